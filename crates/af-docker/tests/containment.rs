//! CONTAINMENT.md's battery (E1–E9 with E5 over IPv6, E11, E15, E16, E20) from inside a running service on the local
//! runtime, against the real
//! Docker daemon. Each route is tried from the service's own network namespace (a probe joined to
//! its holder, exactly the service's rules) and judged at the application layer, beside a positive
//! control proving the target answers a client that is allowed to reach it. Then the sidecar is
//! killed and nothing gets out (E20).
//!
//! The "outside" is the test's own: hosts on internal networks it makes, at TEST-NET, link-local
//! (169.254.169.254) and private addresses. No packet of this test can leave the machine.

mod support;

use std::collections::BTreeMap;

use af_docker::{LocalRuntime, names, networks, one_shot, sidecar};
use af_manifest::EnvironmentId;
use af_runtime::{Environment, ProgressEvent, ProgressSink, Runtime};
use bollard::Docker;
use bollard::models::NetworkConnectRequest;
use support::{Outside, Teardown};

struct Quiet;

impl ProgressSink for Quiet {
    fn emit(&self, _: ProgressEvent) {}
}

/// Runs `af-proxy probe` with `routes` in `holder`'s namespace; outcome by route name.
async fn probe_in(
    docker: &Docker,
    env: &EnvironmentId,
    image: &str,
    holder: &str,
    routes: &[(&str, String)],
) -> BTreeMap<String, String> {
    let mut args = vec![
        "probe".to_string(),
        "--timeout-ms".to_string(),
        "1500".to_string(),
    ];
    for (name, route) in routes {
        args.extend(["--route".to_string(), format!("{name}={route}")]);
    }
    // The standard routes must point somewhere of ours too; the extra routes are the battery.
    for (flag, value) in [
        ("--public-tcp", "203.0.113.10:3128"),
        ("--public-dns", "203.0.113.10:53"),
        ("--metadata", "169.254.169.254:3128"),
        ("--metadata-v6", "[2001:db8::10]:80"),
        ("--platform-api", "203.0.113.10:2375"),
    ] {
        args.extend([flag.to_string(), value.to_string()]);
    }
    let spec = one_shot::OneShot {
        role: "battery".into(),
        image: image.into(),
        args,
        network_mode: format!("container:{holder}"),
        ..Default::default()
    };
    let finished = one_shot::run(docker, env, &spec)
        .await
        .expect("the battery probe runs");
    let verdict: serde_json::Value =
        serde_json::from_str(finished.stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {}", finished.stderr));
    verdict["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn manifest(name: &str, image: &str) -> af_manifest::Manifest {
    let config = "environment: svc\\npolicy: {}\\nlisten: {proxy: 0.0.0.0:8080}\\ncontrol: {listen: 127.0.0.1:9901, token: svc-token-0123456789}\\nlog: {path: /tmp/svc/log.jsonl}\\n";
    af_manifest::parse(
        &format!("name: {name}\nruntime: {{provider: local}}\nservices:\n  web:\n    image: {image}\n    args: [serve]\n    port: 8080\n    env:\n      AF_PROXY_CONFIG_TEXT: \"{config}\"\n"),
        "af.yaml",
    )
    .unwrap()
}

#[tokio::test]
async fn nothing_gets_out_of_a_running_service_and_killing_the_sidecar_opens_nothing() {
    let (docker, image) = support::daemon_and_engine().await;
    let public = Outside::create(&docker, &image, "bat-public", "203.0.113.0/24").await;
    let metadata =
        Outside::create_at(&docker, &image, "bat-metadata", "169.254.169.0/24", 254).await;
    let operator = Outside::create(&docker, &image, "bat-operator", "10.214.77.0/24").await;
    // E5: a global IPv6 host (documentation prefix) and the IPv6 metadata address, fd00:ec2::254.
    let global6 = Outside::create_dual_stack(
        &docker,
        &image,
        "bat-v6",
        "198.51.100.0/24",
        "2001:db8:5::/64",
        "10",
    )
    .await;
    let metadata6 = Outside::create_dual_stack(
        &docker,
        &image,
        "bat-metadata-v6",
        // Its IPv4 side only carries the counters read from the machine; not 192.0.2.0/24, which
        // a machine's own network may be (this kind's is).
        "198.18.5.0/24",
        "fd00:ec2::/64",
        "254",
    )
    .await;
    let (global6_ip, metadata6_ip) = (global6.ip6.clone().unwrap(), metadata6.ip6.clone().unwrap());

    let pid = std::process::id();
    let (a, b) = (
        EnvironmentId::derive("afbat", &format!("a-{pid}")),
        EnvironmentId::derive("afbat", &format!("b-{pid}")),
    );
    let _cleanup = (
        Teardown(docker.clone(), a.clone()),
        Teardown(docker.clone(), b.clone()),
    );
    let targets: Vec<String> = [
        ("--public-tcp", "203.0.113.10:3128"),
        ("--public-dns", "203.0.113.10:53"),
        ("--metadata", "169.254.169.254:3128"),
        ("--metadata-v6", "[2001:db8::10]:80"),
    ]
    .into_iter()
    .flat_map(|(f, v)| [f.to_string(), v.to_string()])
    .collect();
    let runtime = LocalRuntime::new(docker.clone(), targets);
    for (id, name) in [(&a, "afbat"), (&b, "afbat")] {
        let environment = Environment {
            id: id.clone(),
            manifest: manifest(name, &image),
            manifest_dir: ".".into(),
        };
        runtime
            .up(&environment, &Quiet)
            .await
            .unwrap_or_else(|e| panic!("up {id}: {e}"));
    }
    let web_a = names::container(&a, "web-0-holder");
    let web_b = names::container(&b, "web-0-holder");
    let other_ip = sidecar::address_on(&docker, &web_b, &names::internal_network(&b))
        .await
        .unwrap();
    let side = sidecar::find(&docker, &a).await.unwrap();
    let gateway = networks::subnets(&docker, &names::internal_network(&a))
        .await
        .unwrap()[0]
        .replace(".0/24", ".1");

    let battery: Vec<(&str, String)> = vec![
        ("e1-public-tcp", format!("tcp:{}:3128", public.ip)),
        ("e2-public-dns", format!("dns:{}:53", public.ip)),
        ("e3-dns-over-tcp", format!("tcp:{}:53", public.ip)),
        ("e4-metadata", format!("tcp:{}:3128", metadata.ip)),
        ("e5-global-v6", format!("tcp:[{global6_ip}]:3128")),
        ("e5-metadata-v6", format!("tcp:[{metadata6_ip}]:3128")),
        ("e6-platform-api", format!("tcp:{gateway}:2375")),
        ("e7-operator-host", format!("tcp:{}:3128", operator.ip)),
        ("e8-icmp", format!("icmp:{}", public.ip)),
        ("e9-udp", format!("udp:{}:53", public.ip)),
        ("e15-other-environment", format!("tcp:{other_ip}:8080")),
        ("e16-control-api", format!("http:{}:9901", side.internal_ip)),
    ];

    // Positive control: the same routes from a holder attached to the outside networks reach
    // every outside host (the other environment and the sidecar are not on them, so those two
    // are controlled below by their own listeners).
    let control_holder =
        one_shot::start_holder(&docker, &a, "control-holder", &image, &public.network)
            .await
            .unwrap();
    for network in [
        &metadata.network,
        &operator.network,
        &global6.network,
        &metadata6.network,
    ] {
        docker
            .connect_network(
                network,
                NetworkConnectRequest {
                    container: control_holder.clone(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    // What reached each outside host, read off its counters: the routes are judged there, not
    // by the error a client saw (a missing listener errs too).
    let hosts: [(&str, &Outside); 5] = [
        ("public", &public),
        ("metadata", &metadata),
        ("operator", &operator),
        ("global-v6", &global6),
        ("metadata-v6", &metadata6),
    ];
    let arrived = || async {
        let mut counts = Vec::new();
        for (name, host) in hosts {
            counts.push((name, host.arrivals().await));
        }
        counts
    };
    let before_control = arrived().await;
    let open = probe_in(&docker, &a, &image, &control_holder, &battery).await;
    // Positive control, counted where it landed: the public host takes E1, E3 and the probe's
    // own public-tcp route (TCP) and E2, E9 and public-dns (datagrams to its DNS port), the
    // metadata host E4 and the probe's metadata route, each other host its one TCP route (the
    // probe's platform-api and metadata-v6 routes aim at ports where nothing listens). A host counts a
    // connection when its server accepts it, a moment after the client saw it established, so the
    // counts are asked again until they are all in (then nothing of the control is still to come
    // when the inside is judged), for at most 10 s.
    let expected = |at: usize| match at {
        0 => (3, 3),
        1 => (2, 0),
        _ => (1, 0),
    };
    let mut after_control = arrived().await;
    for _ in 0..100 {
        let all_in = before_control.iter().zip(&after_control).enumerate().all(
            |(at, ((_, before), (_, after)))| {
                let (connections, queries) = expected(at);
                after.connections >= before.connections + connections
                    && after.dns_queries >= before.dns_queries + queries
            },
        );
        if all_in {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        after_control = arrived().await;
    }
    for (at, ((name, before), (_, after))) in before_control.iter().zip(&after_control).enumerate()
    {
        let (connections, queries) = expected(at);
        assert_eq!(
            (
                after.connections - before.connections,
                after.dns_queries - before.dns_queries
            ),
            (connections, queries),
            "positive control: what reached the {name} host ({before:?} → {after:?})"
        );
    }
    for route in [
        "e1-public-tcp",
        "e2-public-dns",
        "e3-dns-over-tcp",
        "e4-metadata",
        "e5-global-v6",
        "e5-metadata-v6",
        "e7-operator-host",
        "e9-udp",
    ] {
        assert_eq!(
            open[route], "escaped",
            "positive control for {route}: {open:?}"
        );
    }
    one_shot::remove(&docker, &control_holder).await.unwrap();
    // The other environment's service answers its own environment (its gate passed through it),
    // and the sidecar's control API answers the host side.
    let other_env_holder = one_shot::start_holder(
        &docker,
        &b,
        "control-holder",
        &image,
        &names::internal_network(&b),
    )
    .await
    .unwrap();
    let same_env = probe_in(
        &docker,
        &b,
        &image,
        &other_env_holder,
        &[("e15-other-environment", format!("tcp:{other_ip}:8080"))],
    )
    .await;
    assert_eq!(
        same_env["e15-other-environment"], "escaped",
        "positive control: the service listens"
    );
    one_shot::remove(&docker, &other_env_holder).await.unwrap();
    let mut host_side = tokio::net::TcpStream::connect(&side.control)
        .await
        .expect("the control API from the host side");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    host_side
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: c\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    host_side.read_to_string(&mut answer).await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok\n"),
        "positive control: the control API answers the host side: {answer}"
    );

    // From inside environment A's running service: every route denied, and nothing of it
    // arrived at any outside host. (ICMP, E8, has no listener to count it: it is judged by the
    // reply that did not come, as the other two, E15 and E16, are by their listeners' answers.)
    let before_inside = arrived().await;
    let inside = probe_in(&docker, &a, &image, &web_a, &battery).await;
    for (route, outcome) in &inside {
        assert_eq!(
            outcome, "denied",
            "{route} from inside a service: {inside:?}"
        );
    }
    assert_eq!(
        arrived().await,
        before_inside,
        "nothing from inside a service may arrive at an outside host"
    );

    // E11: a client that ignores its proxy settings resolves an outside name — through the
    // service's resolver, which forwards to the sidecar — and connects straight to port 80: it
    // lands on the sidecar, which decides and records it.
    let transparent = probe_in(
        &docker,
        &a,
        &image,
        &web_a,
        &[
            ("e11-resolve", "dns:127.0.0.11:53".to_string()),
            ("e11-connect", format!("http:{}:80", side.internal_ip)),
        ],
    )
    .await;
    assert_eq!(
        transparent["e11-resolve"], "escaped",
        "outside names are answered (by the sidecar): {transparent:?}"
    );
    assert_eq!(
        transparent["e11-connect"], "escaped",
        "the sidecar answers the direct request itself: {transparent:?}"
    );
    let web_ip = sidecar::address_on(&docker, &web_a, &names::internal_network(&a))
        .await
        .unwrap();
    let logged = runtime
        .net_log(&a, &af_runtime::DecisionQuery::default())
        .await
        .unwrap();
    assert!(
        logged.iter().any(|r| r.protocol == "http-transparent"
            && r.client == web_ip
            && r.verdict == af_runtime::Verdict::Deny),
        "the direct request was decided and logged: {logged:?}"
    );

    // E20: the sidecar stopped — the environment fails closed.
    docker
        .kill_container(
            &side.container,
            None::<bollard::query_parameters::KillContainerOptions>,
        )
        .await
        .unwrap();
    let mut after_kill = battery.clone();
    after_kill.push(("sidecar-proxy", format!("tcp:{}:3128", side.internal_ip)));
    let before_kill = arrived().await;
    let closed = probe_in(&docker, &a, &image, &web_a, &after_kill).await;
    for (route, outcome) in &closed {
        assert_ne!(
            outcome, "escaped",
            "{route} after the sidecar died: {closed:?}"
        );
    }
    assert_eq!(
        arrived().await,
        before_kill,
        "nothing may arrive at an outside host once the sidecar is dead"
    );
}
