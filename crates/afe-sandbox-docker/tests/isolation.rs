//! Containment of a ticket's sandbox, tried from inside it as uid 1000 and judged where the
//! packets would land: test hosts of the test's own (TEST-NET addresses on internal Docker
//! networks it makes) count every TCP connection and DNS query that reaches them. Each denial sits
//! beside a positive control — the same attempt as the proxy's uid in the same namespace, or from
//! a container that is not locked, reaches the host — so a route is denied, not aimed at nothing.

mod support;

use std::collections::BTreeMap;
use std::net::IpAddr;

use af_docker::test_hosts::{Arrivals, HostSpec, OutsideHost, Program};
use af_sidecar_api::config::ResolverConfig;
use af_sidecar_api::records::Verdict;
use afe_sandbox::{ExecRequest, Opened, Payload, Sandbox};
use afe_sandbox_docker::exec::{self, Command};
use afe_sandbox_docker::{DockerSandbox, DockerSandboxSettings};
use bollard::Docker;
use support::*;

/// Two outside hosts on internal networks of this test: `allowed.test` and `denied.test`; the
/// second is also the resolver the sandbox's holder is given.
struct Outside {
    docker: Docker,
    allowed: OutsideHost,
    denied: OutsideHost,
}

impl Outside {
    /// The hosts at `.<base + 10>` of the `/26` at `base` of each TEST-NET: one `/26` per test of
    /// this file, since they run at once.
    async fn create(tag: &str, base: u8) -> Outside {
        let docker = af_docker::connect().await.expect("the Docker daemon");
        let engine = af_docker::engine_image::ensure(&docker)
            .await
            .expect("the engine image: run scripts/build-engine or set AF_PROXY_BINARY");
        let host = |name: &str, net: &str, alias: &str| {
            let subnet = format!("{net}.{base}/26");
            let mut spec = HostSpec::new(&format!("{tag}-{name}"), &subnet, Program::Server);
            spec.host_number = base + 10;
            spec.aliases = vec![alias.to_string()];
            spec
        };
        let allowed = OutsideHost::create(
            &docker,
            &engine,
            &host("allow", "198.51.100", "allowed.test"),
        )
        .await
        .expect("the allowed host");
        let denied =
            OutsideHost::create(&docker, &engine, &host("deny", "203.0.113", "denied.test"))
                .await
                .expect("the denied host");
        Outside {
            docker,
            allowed,
            denied,
        }
    }

    /// Sandboxes whose egress leaves through both hosts' networks, resolving through `denied`, and
    /// whose proxy knows both names' addresses.
    fn settings(&self) -> DockerSandboxSettings {
        let ip = |host: &OutsideHost| host.ip.parse::<IpAddr>().unwrap();
        DockerSandboxSettings {
            egress_networks: vec![self.allowed.network.clone(), self.denied.network.clone()],
            dns: vec![ip(&self.denied)],
            resolver: ResolverConfig {
                static_hosts: BTreeMap::from([
                    ("allowed.test".to_string(), vec![ip(&self.allowed)]),
                    ("denied.test".to_string(), vec![ip(&self.denied)]),
                ]),
                ..ResolverConfig::default()
            },
            // The allowed host's TEST-NET address is not public: the operator lets the proxy
            // dial it (only it; the denied host's stays forbidden).
            dialable: vec![af_manifest::parse_host_rule(&self.allowed.ip).unwrap()],
            ..DockerSandboxSettings::default()
        }
    }

    async fn arrivals(&self) -> (Arrivals, Arrivals) {
        (
            self.allowed.arrivals().await.unwrap(),
            self.denied.arrivals().await.unwrap(),
        )
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let (docker, allowed, denied) = (
            self.docker.clone(),
            self.allowed.clone(),
            self.denied.clone(),
        );
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                allowed.remove(&docker).await;
                denied.remove(&docker).await;
            })
        })
        .join();
    }
}

const PROBE: &str = "/workspace/probe/af-proxy";

/// The static `af-proxy` (its probe tries each route and says what became of it), put into the
/// sandbox as its user would put any program.
async fn put_probe(sandbox: &DockerSandbox, opened: &Opened) {
    let path = af_docker::engine_image::locate_binary().expect("the static af-proxy");
    let binary = std::fs::read(&path).unwrap();
    sandbox
        .put(opened, PROBE, Payload::File(binary))
        .await
        .unwrap();
    let ran = sh(sandbox, opened, &format!("chmod 755 {PROBE}")).await;
    assert!(ran.succeeded());
}

/// Every route a ticket's code might take out, aimed at the two hosts (never at a real address:
/// every standard target is given).
fn probe_argv(program: &str, outside: &Outside, proxy: &str) -> Vec<String> {
    let (allowed, denied) = (&outside.allowed.ip, &outside.denied.ip);
    let mut argv = vec![
        program.to_string(),
        "probe".to_string(),
        "--sidecar-proxy".to_string(),
        proxy.to_string(),
        "--sidecar-patience-s".to_string(),
        "2".to_string(),
        "--deadline-s".to_string(),
        "0".to_string(),
        "--rounds".to_string(),
        "1".to_string(),
        "--timeout-ms".to_string(),
        "1000".to_string(),
        // E1, E2 and the platform: TCP and DNS straight to a host.
        "--public-tcp".to_string(),
        format!("{denied}:3128"),
        "--public-dns".to_string(),
        format!("{denied}:53"),
        "--metadata".to_string(),
        format!("{denied}:853"),
        "--metadata-v6".to_string(),
        format!("{denied}:853"),
        "--platform-api".to_string(),
        format!("{allowed}:9901"),
    ];
    for route in [
        // E1 to the allowed host itself: allowed names are reached through the proxy only.
        format!("allowed-direct=tcp:{allowed}:3128"),
        // E3: DNS over TCP.
        format!("dns-over-tcp=tcp:{denied}:53"),
        // E9: any datagram (the host counts whatever reaches its port 53).
        format!("datagram=udp:{denied}:53"),
        // E8: ICMP echo.
        format!("ping=icmp:{allowed}"),
    ] {
        argv.push("--route".to_string());
        argv.push(route);
    }
    argv
}

fn outcomes(stdout: &str) -> BTreeMap<String, String> {
    let line = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no verdict: {stdout}"));
    let verdict: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    verdict["routes"]
        .as_array()
        .unwrap_or_else(|| panic!("{verdict}"))
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `argv` in the sandbox's container as `user` (the positive control runs as the proxy's uid, in
/// the same namespace the lock applies to).
async fn run_as(docker: &Docker, opened: &Opened, user: &str, argv: Vec<String>) -> String {
    let ran = exec::run(
        docker,
        &Command {
            container: &opened.id,
            user,
            argv,
            env: Vec::new(),
            workdir: None,
            stdin: None,
            output_limit: 1 << 20,
        },
        &mut |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e:?}"));
    ran.stdout.text()
}

/// With an allowlist: the allowed host is reached through the proxy and the denied one is not
/// (the proxy refuses it, records it, and nothing arrives there); no TCP, UDP, ICMP or DNS packet
/// of the ticket's user leaves by itself — while the proxy's uid in the same namespace reaches
/// every one of those hosts the same way; names do not resolve, not even through Docker's embedded
/// resolver.
#[tokio::test]
async fn with_an_allowlist_only_the_allowed_host_is_reached_and_only_through_the_proxy() {
    let outside = Outside::create(&format!("afe-iso-{}", std::process::id()), 0).await;
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(outside.settings()).await;
    let mut spec = spec(&ticket);
    spec.egress = vec![af_manifest::parse_host_rule("allowed.test").unwrap()];
    let opened = open(&sandbox, &spec).await;
    put_probe(&sandbox, &opened).await;
    let docker = sandbox.docker().clone();
    let proxy = "127.0.0.1:3128";

    // Positive control: as the proxy's uid every route gets out and lands on its host.
    let before = outside.arrivals().await;
    let open_routes = outcomes(
        &run_as(
            &docker,
            &opened,
            "1337:1337",
            probe_argv(PROBE, &outside, proxy),
        )
        .await,
    );
    for (route, outcome) in &open_routes {
        assert_eq!(
            outcome, "escaped",
            "positive control {route}: {open_routes:?}"
        );
    }
    let reached = outside.arrivals().await;
    assert!(
        reached.0.connections > before.0.connections
            && reached.1.connections > before.1.connections
            && reached.1.dns_queries > before.1.dns_queries,
        "the proxy uid's attempts arrived: {before:?} -> {reached:?}"
    );

    // The ticket's user: every route denied, nothing arrives anywhere.
    let locked = sandbox
        .exec(
            &opened,
            &ExecRequest::new(probe_argv(PROBE, &outside, proxy)),
            &mut |_| {},
        )
        .await
        .unwrap();
    let locked_routes = outcomes(&locked.stdout.text());
    for (route, outcome) in &locked_routes {
        assert_eq!(
            outcome, "denied",
            "{route} from uid 1000: {locked_routes:?}"
        );
    }
    assert_eq!(locked_routes.len(), open_routes.len());
    assert_eq!(
        outside.arrivals().await,
        reached,
        "nothing of uid 1000's reached either host"
    );

    // Names: neither the machine's resolver nor Docker's embedded one answers the ticket's user.
    let lookup = sh(
        &sandbox,
        &opened,
        "getent hosts allowed.test; echo status=$?; getent hosts example.org; echo status=$?",
    )
    .await;
    assert_eq!(
        lookup.stdout.text(),
        "status=2\nstatus=2\n",
        "no name resolves: {}",
        lookup.stderr.text()
    );
    let embedded = outcomes(
        &sandbox
            .exec(
                &opened,
                &ExecRequest::new([
                    PROBE,
                    "probe",
                    "--sidecar-proxy",
                    proxy,
                    "--deadline-s",
                    "0",
                    "--public-tcp",
                    &format!("{}:3128", outside.denied.ip),
                    "--public-dns",
                    "127.0.0.11:53",
                    "--metadata",
                    &format!("{}:853", outside.denied.ip),
                    "--metadata-v6",
                    &format!("{}:853", outside.denied.ip),
                    "--platform-api",
                    &format!("{}:9901", outside.allowed.ip),
                    "--route",
                    "embedded-dns-tcp=tcp:127.0.0.11:53",
                ]),
                &mut |_| {},
            )
            .await
            .unwrap()
            .stdout
            .text(),
    );
    assert_eq!(embedded["public-dns"], "denied", "{embedded:?}");
    assert_eq!(embedded["embedded-dns-tcp"], "denied", "{embedded:?}");
    assert_eq!(outside.arrivals().await, reached, "no query was forwarded");

    // Through the proxy: git (libcurl, reading HTTPS_PROXY/http_proxy) asks both hosts.
    let through =
        |host: &str| format!("git ls-remote http://{host}:3128/x.git 2>&1; echo status=$?");
    let to_allowed = sh(&sandbox, &opened, &through("allowed.test")).await;
    let after_allowed = outside.arrivals().await;
    assert_eq!(
        after_allowed.0.connections,
        reached.0.connections + 1,
        "the allowed host was reached through the proxy: {}",
        to_allowed.stdout.text()
    );
    let to_denied = sh(&sandbox, &opened, &through("denied.test")).await;
    assert!(
        to_denied.stdout.text().contains("403") && !to_denied.stdout.text().contains("status=0"),
        "the proxy refused the denied host: {}",
        to_denied.stdout.text()
    );
    assert_eq!(
        outside.arrivals().await.1,
        after_allowed.1,
        "nothing reached the denied host"
    );

    // Both decisions are recorded, for the ticket's events.
    let decisions = sandbox.egress_decisions(&opened, None).await.unwrap();
    let verdict_for = |host: &str| {
        decisions
            .iter()
            .filter(|d| d.host == host)
            .map(|d| d.verdict)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        verdict_for("allowed.test"),
        [Verdict::Allow],
        "{decisions:?}"
    );
    assert_eq!(verdict_for("denied.test"), [Verdict::Deny], "{decisions:?}");
    let later = sandbox
        .egress_decisions(&opened, Some(&decisions.last().unwrap().time))
        .await
        .unwrap();
    assert!(later.len() <= 1, "since: only the last one again at most");
}

/// Without egress there is no proxy and no network but loopback: nothing of the ticket leaves,
/// while a container that is not locked, on the hosts' networks, reaches them by the same routes.
#[tokio::test]
async fn without_egress_nothing_leaves() {
    let outside = Outside::create(&format!("afe-none-{}", std::process::id()), 64).await;
    let ticket = ticket();
    let _cleanup = Cleanup(ticket.clone());
    let sandbox = adapter(outside.settings()).await;
    let opened = open(&sandbox, &spec(&ticket)).await;
    put_probe(&sandbox, &opened).await;
    let (containers, _) = sandbox_objects(&ticket).await;
    assert_eq!(containers, 2, "no proxy container without egress");
    let env = sh(&sandbox, &opened, "env | grep -ci proxy; ip -o link 2>/dev/null | wc -l; cat /proc/net/dev | tail -n +3 | cut -d: -f1").await;
    assert!(
        env.stdout.text().starts_with("0\n"),
        "no proxy variables: {}",
        env.stdout.text()
    );
    assert!(
        env.stdout.text().trim_end().ends_with("lo"),
        "loopback is the only interface: {}",
        env.stdout.text()
    );

    // Positive control: the engine's probe in a plain container on the hosts' networks.
    let before = outside.arrivals().await;
    let engine = af_docker::engine_image::ensure(sandbox.docker())
        .await
        .unwrap();
    let control = plain_container_probe(&outside, &engine).await;
    for (route, outcome) in &control {
        if route != "ping" {
            assert_eq!(outcome, "escaped", "positive control {route}: {control:?}");
        }
    }
    let reached = outside.arrivals().await;
    assert!(
        reached.0.connections > before.0.connections
            && reached.1.dns_queries > before.1.dns_queries
    );

    let locked = sandbox
        .exec(
            &opened,
            &ExecRequest::new(probe_argv(PROBE, &outside, "127.0.0.1:3128")),
            &mut |_| {},
        )
        .await
        .unwrap();
    let routes = outcomes(&locked.stdout.text());
    for (route, outcome) in &routes {
        assert_eq!(outcome, "denied", "{route} without egress: {routes:?}");
    }
    assert_eq!(outside.arrivals().await, reached, "nothing arrived");
    assert!(
        sandbox
            .egress_decisions(&opened, None)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The probe in a throwaway container of the engine image attached to both hosts' networks, not
/// locked: what the routes do where nothing stops them.
async fn plain_container_probe(outside: &Outside, engine: &str) -> BTreeMap<String, String> {
    let docker = &outside.docker;
    let name = format!("afe-control-{}", std::process::id());
    remove_container(docker, &name).await;
    let mut argv = probe_argv("/af-proxy", outside, "127.0.0.1:9");
    argv.remove(0);
    docker
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            }),
            bollard::models::ContainerCreateBody {
                image: Some(engine.to_string()),
                cmd: Some(argv),
                host_config: Some(bollard::models::HostConfig {
                    network_mode: Some(outside.allowed.network.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    outside.denied.attach(docker, &name, &[]).await.unwrap();
    docker
        .start_container(
            &name,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .unwrap();
    use futures_util::StreamExt;
    let mut waited = docker.wait_container(
        &name,
        None::<bollard::query_parameters::WaitContainerOptions>,
    );
    while waited.next().await.is_some() {}
    let mut logs = docker.logs(
        &name,
        Some(bollard::query_parameters::LogsOptions {
            stdout: true,
            ..Default::default()
        }),
    );
    let mut text = String::new();
    while let Some(Ok(line)) = logs.next().await {
        text.push_str(&line.to_string());
    }
    remove_container(docker, &name).await;
    outcomes(&text)
}

/// Removes a container of the test's own, whatever state it is in; none is fine.
async fn remove_container(docker: &Docker, name: &str) {
    let _ = docker
        .remove_container(
            name,
            Some(bollard::query_parameters::RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
}
