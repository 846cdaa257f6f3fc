//! Against the real Docker daemon: the engine image builds FROM scratch, the probe under a
//! service's rules sees every route denied on the services' network while a leaky setup (a holder
//! also attached to another network) is refused naming the routes that escaped (AF-RUN-043), a
//! foreign network with the environment's name is refused and left alone
//! (AF-RUN-045), and `down` removes every labelled object.
//!
//! These are containment tests: without a Docker daemon or the static engine binary
//! (`AF_PROXY_BINARY`, built by `scripts/build-engine`) they fail, saying what is missing.
//!
//! Every "outside" host is one the test makes, on an `internal` network of its own at a TEST-NET
//! address, so no packet of these tests can leave the machine.

mod support;

use af_docker::{engine_image, names, networks, one_shot, probe, teardown};
use af_manifest::EnvironmentId;
use af_runtime::{RunCode, RuntimeError};
use bollard::Docker;
use bollard::models::{NetworkConnectRequest, NetworkCreateRequest};
use support::{Outside, Teardown};

async fn docker() -> Docker {
    af_docker::connect()
        .await
        .expect("these tests need the Docker daemon (CI runs one)")
}

async fn engine(docker: &Docker) -> String {
    engine_image::ensure(docker)
        .await
        .expect("the engine image: run scripts/build-engine or set AF_PROXY_BINARY")
}

/// Every route pointed at the test's own outside host (never a real address).
fn targets() -> Vec<String> {
    targets_at("203.0.113.10")
}

/// Every route pointed at an outside host of the test's at `ip`.
fn targets_at(ip: &str) -> Vec<String> {
    [
        ("--public-tcp", format!("{ip}:3128")),
        ("--public-dns", format!("{ip}:53")),
        ("--metadata", format!("{ip}:80")),
        ("--metadata-v6", "[2001:db8::10]:80".to_string()),
        ("--platform-api", format!("{ip}:2375")),
        ("--timeout-ms", "1500".to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value])
    .collect()
}

/// The environment's sidecar on its two networks, with an empty policy, created not started.
async fn prepare_sidecar(
    docker: &Docker,
    env: &EnvironmentId,
    image: &str,
    (internal, egress): (&str, &str),
) -> Result<af_docker::sidecar::Prepared, af_docker::DockerError> {
    af_docker::sidecar::prepare(
        docker,
        env,
        af_docker::sidecar::SidecarSpec {
            image,
            internal,
            egress,
            policy: &Default::default(),
            webhooks: &[],
            capture_ca: None,
            relay: None,
        },
    )
    .await
}

fn code(err: af_docker::DockerError) -> (RunCode, String) {
    let err = RuntimeError::from(err);
    (err.code(), err.to_string())
}

#[tokio::test]
async fn the_probe_sees_every_route_denied_and_refuses_a_leaky_setup_naming_the_routes() {
    let docker = docker().await;
    let image = engine(&docker).await;
    let outside = Outside::create(&docker, &image, "probe", "203.0.113.0/24").await;
    let env = EnvironmentId::derive("aftest", &format!("probe-{}", std::process::id()));
    let _cleanup = Teardown(docker.clone(), env.clone());
    let (internal, egress) = networks::ensure(&docker, &env)
        .await
        .expect("the environment's networks");
    // The environment's sidecar: the probe's positive control.
    let prepared = prepare_sidecar(&docker, &env, &image, (&internal, &egress))
        .await
        .expect("the sidecar");
    let (sidecar, _) = af_docker::sidecar::start_prepared(&docker, prepared)
        .await
        .expect("the sidecar starts");
    let targets = || {
        let mut args = targets();
        args.extend(probe::sidecar_args(sidecar.internal_ip));
        args
    };

    // The leaky setup, and the positive control: a service's holder also attached to the outside
    // network. The refusal rules cover the environment's interface only, so the leak shows.
    let holder = one_shot::start_holder(&docker, &env, "leaky-holder", &image, &internal)
        .await
        .unwrap();
    docker
        .connect_network(
            &outside.network,
            NetworkConnectRequest {
                container: holder.clone(),
                ..Default::default()
            },
        )
        .await
        .expect("attaching the holder to the outside network");
    let layout = networks::layout(&docker, &internal).await.unwrap();
    let leaky = probe::run_in(&docker, &holder, &layout, targets())
        .await
        .expect_err("a leaky setup must be refused");
    let (code_seen, message) = code(leaky);
    assert_eq!(code_seen, RunCode::ContainmentRefused, "{message}");
    assert!(
        message.contains("public-tcp tcp 203.0.113.10:3128 (escaped)"),
        "{message}"
    );
    assert!(
        message.contains("public-dns dns/udp 203.0.113.10:53 (escaped)"),
        "{message}"
    );
    one_shot::remove(&docker, &holder).await.unwrap();

    // The services' network, under exactly a service's rules: every route denied.
    let judged = probe::judge(&docker, &env, &image, &internal, targets()).await;
    one_shot::remove(&docker, &probe::holder(&env))
        .await
        .unwrap();
    let summary = judged.expect("contained on the internal network");
    assert!(summary.contained);
    assert_eq!(summary.routes.len(), 5);
    assert!(
        summary
            .routes
            .iter()
            .all(|(_, outcome)| outcome == "denied"),
        "{:?}",
        summary.routes
    );

    teardown::down(&docker, &env).await.expect("down");
    assert!(networks::list(&docker, &env).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_foreign_network_with_our_name_is_refused_and_left_alone() {
    let docker = docker().await;
    let env = EnvironmentId::derive("aftest", &format!("foreign-{}", std::process::id()));
    let name = names::internal_network(&env);
    let _ = docker.remove_network(&name).await;
    docker
        .create_network(NetworkCreateRequest {
            name: name.clone(),
            internal: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();

    let (up_code, message) = code(
        networks::ensure(&docker, &env)
            .await
            .expect_err("up must refuse it"),
    );
    assert_eq!(up_code, RunCode::NotOurs, "{message}");
    assert!(message.contains(&name), "{message}");
    let (down_code, _) = code(
        teardown::down(&docker, &env)
            .await
            .expect_err("down must refuse it"),
    );
    assert_eq!(down_code, RunCode::NotOurs);
    assert!(
        docker
            .inspect_network(
                &name,
                None::<bollard::query_parameters::InspectNetworkOptions>
            )
            .await
            .is_ok(),
        "left untouched"
    );
    docker.remove_network(&name).await.unwrap();
    // The egress network `ensure` made beside the refusal is ours: down removes it now.
    teardown::down(&docker, &env).await.unwrap();
}

#[tokio::test]
async fn down_removes_every_labelled_object_and_nothing_else() {
    let docker = docker().await;
    let env = EnvironmentId::derive("aftest", &format!("down-{}", std::process::id()));
    let _cleanup = Teardown(docker.clone(), env.clone());
    networks::ensure(&docker, &env).await.unwrap();
    assert_eq!(networks::list(&docker, &env).await.unwrap().len(), 2);
    // Another environment's objects survive this one's teardown.
    let other = EnvironmentId::derive("aftest", &format!("other-{}", std::process::id()));
    let _cleanup_other = Teardown(docker.clone(), other.clone());
    networks::ensure(&docker, &other).await.unwrap();

    teardown::down(&docker, &env).await.unwrap();
    assert!(networks::list(&docker, &env).await.unwrap().is_empty());
    assert!(
        teardown::containers(&docker, &env)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        networks::list(&docker, &other).await.unwrap().len(),
        2,
        "another environment is untouched"
    );
    teardown::down(&docker, &other).await.unwrap();
    teardown::down(&docker, &env)
        .await
        .expect("down on nothing is fine");
}

/// A container with the name af would give the sidecar, made by someone else: `up` refuses
/// (AF-RUN-045) and leaves it as it was.
#[tokio::test]
async fn a_foreign_container_with_our_name_is_refused_and_left_alone() {
    let docker = docker().await;
    let image = engine(&docker).await;
    let env = EnvironmentId::derive("aftest", &format!("foreignc-{}", std::process::id()));
    let _cleanup = Teardown(docker.clone(), env.clone());
    let name = names::container(&env, "sidecar");
    docker
        .create_container(
            Some(bollard::query_parameters::CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            }),
            bollard::models::ContainerCreateBody {
                image: Some(image.clone()),
                cmd: Some(vec!["hold".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (internal, egress) = networks::ensure(&docker, &env).await.unwrap();
    let refused = prepare_sidecar(&docker, &env, &image, (&internal, &egress))
        .await
        .expect_err("someone else's container");
    let (code_seen, message) = code(refused);
    assert_eq!(code_seen, RunCode::NotOurs, "{message}");
    assert!(message.contains(&name), "{message}");
    assert!(
        docker
            .inspect_container(
                &name,
                None::<bollard::query_parameters::InspectContainerOptions>
            )
            .await
            .is_ok(),
        "left untouched"
    );
    teardown::down(&docker, &env).await.unwrap();
    assert!(
        docker
            .inspect_container(
                &name,
                None::<bollard::query_parameters::InspectContainerOptions>
            )
            .await
            .is_ok(),
        "down leaves it too"
    );
    docker
        .remove_container(
            &name,
            Some(bollard::query_parameters::RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
}

/// A holder's one capability is NET_ADMIN, for the refusal rules alone: they apply as root in it,
/// the same command as the unprivileged user the probe and the gates run as is refused for want of
/// it (the control that the capability is what makes the difference), and the holder's own
/// process, which lives as long as the pod, has given it up.
#[tokio::test]
async fn only_the_refusal_step_has_net_admin_in_a_holder() {
    let docker = docker().await;
    let image = engine(&docker).await;
    let env = EnvironmentId::derive("aftest", &format!("caps-{}", std::process::id()));
    let _cleanup = Teardown(docker.clone(), env.clone());
    let (internal, _) = networks::ensure(&docker, &env).await.unwrap();
    let holder = one_shot::start_holder(&docker, &env, "caps-holder", &image, &internal)
        .await
        .unwrap();
    let layout = networks::layout(&docker, &internal).await.unwrap();
    let unprivileged = one_shot::exec_in_holder(&docker, &holder, &layout.refusal_args())
        .await
        .unwrap();
    assert_ne!(
        unprivileged.exit_code, 0,
        "the unprivileged user has no NET_ADMIN: {}",
        unprivileged.stderr
    );
    one_shot::apply_refusal(&docker, &holder, &layout.refusal_args())
        .await
        .expect("the refusal step, as root, has NET_ADMIN");

    let pid = holder_pid(&docker, &holder).await;
    let status = String::from_utf8(host_proc(pid, "status")).unwrap();
    let set = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(set("CapEff:"), "0000000000000000", "{status}");
    assert_eq!(set("CapPrm:"), "0000000000000000", "{status}");
    assert_eq!(
        set("CapBnd:"),
        "0000000000001000",
        "NET_ADMIN and nothing else bounds what an exec in it may have"
    );
    one_shot::remove(&docker, &holder).await.unwrap();
}

/// Issue 28's lock of an `af` service's pod (`runtime.netlock` on Kubernetes) applies in the
/// engine image as its init container runs it — root, NET_ADMIN and no other capability, a
/// read-only root — so the image carries every iptables part the pod plan needs. Locked to the
/// outside host's address, the probe (the engine's unprivileged user) reaches it: the positive
/// control. Locked to another address instead, the same probe reaches nothing, judged at the
/// host, which counts no arrival.
#[tokio::test]
async fn a_pods_netlock_applies_in_the_engine_image_with_net_admin_alone() {
    let docker = docker().await;
    let image = engine(&docker).await;
    let outside = Outside::create(&docker, &image, "podlock", "198.51.100.0/24").await;
    let env = EnvironmentId::derive("aftest", &format!("podlock-{}", std::process::id()));
    let _cleanup = Teardown(docker.clone(), env.clone());
    let holder = one_shot::start_holder(&docker, &env, "podlock-holder", &image, &outside.network)
        .await
        .unwrap();
    let control = format!("{}:3128", outside.ip);
    let mut probe: Vec<String> = [
        "probe",
        "--sidecar-proxy",
        &control,
        "--sidecar-patience-s",
        "5",
        "--deadline-s",
        "0",
    ]
    .map(String::from)
    .to_vec();
    probe.extend(targets_at(&outside.ip));
    let lock = |to: &str| ["netlock", "--only-to", to].map(String::from).to_vec();

    let locked =
        one_shot::exec_in_holder_as(&docker, &holder, one_shot::HOLDER_ROOT, &lock(&outside.ip))
            .await
            .unwrap();
    assert_eq!(locked.exit_code, 0, "{}{}", locked.stdout, locked.stderr);
    let report: serde_json::Value = serde_json::from_str(locked.stdout.trim()).unwrap();
    assert_eq!(report["ipv4"], "locked", "{report}");
    assert_eq!(
        report["only_to"],
        serde_json::json!([outside.ip]),
        "{report}"
    );
    let before = outside.arrivals().await;
    let allowed = one_shot::exec_in_holder(&docker, &holder, &probe)
        .await
        .unwrap();
    let allowed: serde_json::Value =
        serde_json::from_str(allowed.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(allowed["control"]["reached"], true, "{allowed}");
    assert_eq!(allowed["routes"][0]["route"], "public-tcp", "{allowed}");
    assert_eq!(
        allowed["routes"][0]["outcome"], "escaped",
        "positive control: the allowed address answers through the lock: {allowed}"
    );
    let reached = outside.arrivals().await;
    assert!(reached.connections > before.connections, "{reached:?}");

    let relocked =
        one_shot::exec_in_holder_as(&docker, &holder, one_shot::HOLDER_ROOT, &lock("192.0.2.99"))
            .await
            .unwrap();
    assert_eq!(
        relocked.exit_code, 0,
        "{}{}",
        relocked.stdout, relocked.stderr
    );
    let denied = one_shot::exec_in_holder(&docker, &holder, &probe)
        .await
        .unwrap();
    assert_eq!(
        denied.exit_code, 43,
        "no control, no verdict of containment: {}",
        denied.stdout
    );
    let verdict: serde_json::Value =
        serde_json::from_str(denied.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(verdict["control"]["reached"], false, "{verdict}");
    assert_eq!(verdict["routes"][0]["route"], "public-tcp", "{verdict}");
    assert_eq!(verdict["routes"][0]["outcome"], "denied", "{verdict}");
    assert_eq!(
        outside.arrivals().await,
        reached,
        "nothing arrived through the lock"
    );
    one_shot::remove(&docker, &holder).await.unwrap();
}

/// Every process of the engine image starts with the sidecar's process environment (one malloc
/// arena): read from a running holder's environment as the kernel holds it, not from the
/// Dockerfile.
#[tokio::test]
async fn engine_image_processes_start_with_the_sidecars_process_environment() {
    let docker = docker().await;
    let image = engine(&docker).await;
    let env = EnvironmentId::derive("aftest", &format!("penv-{}", std::process::id()));
    let _cleanup = Teardown(docker.clone(), env.clone());
    let (internal, _) = networks::ensure(&docker, &env).await.unwrap();
    let holder = one_shot::start_holder(&docker, &env, "penv-holder", &image, &internal)
        .await
        .unwrap();
    let pid = holder_pid(&docker, &holder).await;
    let environ = host_proc(pid, "environ");
    let variables: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    for (name, value) in af_sidecar_api::PROCESS_ENVIRONMENT {
        assert!(
            variables.contains(&format!("{name}={value}")),
            "{name}={value} missing from {variables:?}"
        );
    }
    one_shot::remove(&docker, &holder).await.unwrap();
}

/// The host's process id of a running holder.
async fn holder_pid(docker: &Docker, holder: &str) -> i64 {
    docker
        .inspect_container(
            holder,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap()
        .state
        .and_then(|s| s.pid)
        .expect("the holder runs")
}

/// A file of `/proc/<pid>/`: a container's process, seen from the host (the tests run as root, as
/// CI does).
fn host_proc(pid: i64, file: &str) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/{file}"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/{file}: {e} (the tests must run as root)"))
}
