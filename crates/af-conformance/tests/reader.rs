//! The reader refuses every record set that is not one whole, passing run of one runtime. Each
//! test starts from a set it accepts and breaks it in one way.

use af_conformance::behaviour::IMMEDIATE_STARTUP_PROOF;
use af_conformance::reader::{Problem, check};
use af_conformance::record::{Record, Verdict, from_lines, to_lines};
use af_conformance::{expected, roster};

/// A whole passing run of `local`: every behaviour passed, the one the local runtime lacks the
/// capability for skipped.
fn accepted_run() -> Vec<Record> {
    roster()
        .iter()
        .map(|b| Record {
            name: b.name.to_string(),
            runtime: "local".into(),
            run: "r1".into(),
            verdict: if b.needs == Some(af_runtime::Capability::HealthMustSucceed) {
                Verdict::Skipped
            } else {
                Verdict::Passed
            },
            containment: b.is_containment(),
            duration_ms: 1,
            detail: String::new(),
        })
        .collect()
}

fn problems(records: &[Record]) -> Vec<Problem> {
    check(records, &expected(), "local", None).expect_err("the reader must refuse this set")
}

fn a_containment_behaviour() -> usize {
    accepted_run()
        .iter()
        .position(|r| r.containment && r.name != IMMEDIATE_STARTUP_PROOF)
        .unwrap()
}

#[test]
fn a_whole_passing_run_is_accepted_and_counted() {
    let summary = check(&accepted_run(), &expected(), "local", None).unwrap();
    assert!(summary.passed >= 40);
    assert_eq!(
        summary.skipped,
        ["readiness_health_status_must_be_2xx_or_3xx"]
    );
    assert_eq!(
        summary.to_string(),
        format!(
            "{} passed, 0 failed, 1 skipped (readiness_health_status_must_be_2xx_or_3xx)",
            summary.passed
        )
    );
}

#[test]
fn one_behaviour_missing_is_refused() {
    let mut records = accepted_run();
    let gone = records.remove(3);
    assert_eq!(problems(&records), [Problem::Missing(gone.name)]);
}

#[test]
fn one_skipped_containment_behaviour_is_refused() {
    let mut records = accepted_run();
    let index = a_containment_behaviour();
    records[index].verdict = Verdict::Skipped;
    assert_eq!(
        problems(&records),
        [Problem::SkippedContainment(records[index].name.clone())]
    );
}

#[test]
fn one_failed_behaviour_is_refused() {
    let mut records = accepted_run();
    records[0].verdict = Verdict::Failed;
    records[0].detail = "status said 1/2".into();
    assert_eq!(
        problems(&records),
        [Problem::Failed {
            name: records[0].name.clone(),
            detail: "status said 1/2".into()
        }]
    );
}

#[test]
fn one_duplicated_behaviour_is_refused() {
    let mut records = accepted_run();
    records.push(records[5].clone());
    assert_eq!(
        problems(&records),
        [Problem::Duplicated(records[5].name.clone())]
    );
}

#[test]
fn one_record_from_another_runtime_is_refused() {
    let mut records = accepted_run();
    records[7].runtime = "kubernetes".into();
    assert_eq!(
        problems(&records),
        [Problem::OtherRuntime {
            name: records[7].name.clone(),
            runtime: "kubernetes".into()
        }]
    );
}

#[test]
fn one_record_from_another_run_is_refused() {
    let mut records = accepted_run();
    records[9].run = "r0".into();
    assert_eq!(
        problems(&records),
        [Problem::OtherRun {
            name: records[9].name.clone(),
            run: "r0".into()
        }]
    );
    // And a whole set from another run than the one asked for.
    let refused = check(&accepted_run(), &expected(), "local", Some("r2")).unwrap_err();
    assert_eq!(refused.len(), accepted_run().len());
}

#[test]
fn a_run_without_the_immediate_startup_proof_is_refused() {
    let mut records = accepted_run();
    let proof = records
        .iter()
        .position(|r| r.name == IMMEDIATE_STARTUP_PROOF)
        .unwrap();
    records[proof].verdict = Verdict::Failed;
    let found = problems(&records);
    assert!(
        found.contains(&Problem::NoImmediateStartupProof),
        "{found:?}"
    );
    records.remove(proof);
    let found = problems(&records);
    assert!(
        found.contains(&Problem::NoImmediateStartupProof),
        "{found:?}"
    );
    assert!(
        found.contains(&Problem::Missing(IMMEDIATE_STARTUP_PROOF.into())),
        "{found:?}"
    );
}

#[test]
fn containment_relabelled_as_something_else_is_refused() {
    let mut records = accepted_run();
    let index = a_containment_behaviour();
    records[index].containment = false;
    records[index].verdict = Verdict::Skipped;
    let found = problems(&records);
    assert!(
        found.contains(&Problem::ContainmentMislabelled(
            records[index].name.clone()
        )),
        "{found:?}"
    );
    assert!(
        found.contains(&Problem::SkippedContainment(records[index].name.clone())),
        "the roster, not the record, says what is containment: {found:?}"
    );
}

#[test]
fn unknown_behaviours_and_empty_sets_are_refused() {
    let mut records = accepted_run();
    let mut stranger = records[0].clone();
    stranger.name = "a_behaviour_nobody_wrote".into();
    records.push(stranger);
    assert_eq!(
        problems(&records),
        [Problem::NotOnRoster("a_behaviour_nobody_wrote".into())]
    );
    assert_eq!(problems(&[]), [Problem::Empty]);
}

#[test]
fn records_survive_their_file_format_and_a_bad_line_is_named() {
    let records = accepted_run();
    assert_eq!(from_lines(&to_lines(&records)).unwrap(), records);
    let err = from_lines("{\"name\": 1}\n").unwrap_err();
    assert!(err.starts_with("line 1:"), "{err}");
}
