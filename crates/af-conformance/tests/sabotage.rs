//! The suite notices a broken guarantee: with every service instance also attached to the public
//! outside network (a leak the harness makes on purpose after each `up`), the containment
//! behaviours that try that network fail, and the reader refuses the records. Against the real
//! Docker daemon; never skipped.

use af_conformance::context::Ctx;
use af_conformance::harness::Harness;
use af_conformance::local::{LocalHarness, Sabotage};
use af_conformance::record::Verdict;
use af_conformance::{expected, reader, roster, runner};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_leaking_onto_the_public_network_fails_the_matching_behaviours() {
    let harness = LocalHarness::start("sabotage")
        .await
        .expect("the local harness (Docker daemon, engine binary)")
        .with_sabotage(Sabotage::ServicesOnThePublicNetwork);
    let ctx = Ctx::new(&harness, af_conformance::new_run_id());
    // The routes aimed at the public host, and one that is not (the operator's network).
    let chosen = [
        "containment_e1_public_tcp",
        "containment_e2_public_dns_udp",
        "containment_e9_udp",
        "containment_e7_operator_network",
    ];
    let planned: Vec<_> = roster()
        .into_iter()
        .filter(|b| chosen.contains(&b.name))
        .map(af_conformance::plan::Planned::Run)
        .collect();
    let records = runner::run(&ctx, &planned, "local", |r| {
        eprintln!("{:?} {}: {}", r.verdict, r.name, r.detail)
    })
    .await;
    let leftovers = ctx.teardown().await;
    harness.close().await;

    let verdict = |name: &str| records.iter().find(|r| r.name == name).unwrap().verdict;
    for leaked in &chosen[..3] {
        assert_eq!(
            verdict(leaked),
            Verdict::Failed,
            "{leaked} must notice the leak"
        );
    }
    let e1 = records.iter().find(|r| r.name == chosen[0]).unwrap();
    assert!(e1.detail.contains("escaped"), "{}", e1.detail);
    assert_eq!(
        verdict(chosen[3]),
        Verdict::Passed,
        "a route the leak does not open still passes: the failures are the leak's"
    );
    assert!(reader::check(&records, &expected(), "local", None).is_err());
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
