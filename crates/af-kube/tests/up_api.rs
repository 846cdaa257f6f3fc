//! `up` and `down` of a whole environment against a stateful fake API server (objects kept by
//! path, statuses filled in as a healthy cluster would): the order of every write; a second `up`
//! that writes nothing but the probe's pod and verdict; a foreign namespace refused before any
//! write; an escaped probe route stopping `up` after the namespace, its policies and the sidecar
//! (so `down` removes them) and before any workload; a failed migration stopping `up` before the
//! services.

mod api;
mod fake_cluster;
mod support;

use std::sync::{Arc, Mutex};

use af_kube::KubeRuntime;
use af_kube::render::Cluster;
use af_manifest::{EnvValue, ImageSource, Manifest};
use af_runtime::{Environment, ProgressEvent, ProgressSink, RunCode, Runtime};
use fake_cluster::{Shared, serve};
use serde_json::json;

struct Quiet;

impl ProgressSink for Quiet {
    fn emit(&self, _: ProgressEvent) {}
}

/// The shop with images the nodes can pull and no value taken from af's environment.
fn shop() -> Manifest {
    let mut manifest = support::shop();
    for service in manifest.services.values_mut() {
        service.source = ImageSource::Image(format!("registry.example/shop-{}:1", service.name));
        for value in service.env.values_mut() {
            if let EnvValue::FromEnv(_) = value {
                *value = EnvValue::Literal("test".into());
            }
        }
    }
    manifest
}

/// A stand-in ingress on loopback that routes everything: preview URLs are asked there, never
/// resolved.
fn routed_ingress() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            use std::io::{Read, Write};
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        }
    });
    address
}

fn runtime(fake: &Shared) -> KubeRuntime {
    KubeRuntime::new(
        serve(fake.clone()),
        "test",
        "context test (cluster fake)".into(),
        "af-".into(),
        support::ENGINE_IMAGE.into(),
        support::targets(),
        Cluster::default(),
    )
    .with_ingress_address(routed_ingress())
}

fn environment() -> Environment {
    Environment {
        id: af_manifest::EnvironmentId::derive("shop", "main"),
        manifest: shop(),
        manifest_dir: ".".into(),
    }
}

fn writes(fake: &Shared) -> Vec<String> {
    std::mem::take(&mut fake.lock().unwrap().writes)
}

#[tokio::test]
async fn up_writes_in_the_seeds_order_and_a_second_up_writes_nothing_but_the_probe() {
    let fake = Shared::default();
    let runtime = runtime(&fake);
    let report = runtime.up(&environment(), &Quiet).await.unwrap();
    assert!(!report.unchanged);
    let ns = "af-shop-main";
    let mut expected = vec!["POST namespaces af-shop-main".to_string()];
    for policy in [
        "af-deny-all",
        "af-workloads-to-sidecar",
        "af-workloads-to-workloads",
        "af-sidecar-from-workloads",
        "af-sidecar-egress",
        "af-ingress-controller",
    ] {
        expected.push(format!("PATCH {ns}/networkpolicies {policy}"));
    }
    expected.extend([
        // Every Service first, the sidecar's first of all: their ClusterIPs are what the pods
        // are rendered with (the resolver, and with netlock all a pod may send to).
        format!("PATCH {ns}/services af-sidecar"),
        format!("PATCH {ns}/services worker"),
        format!("PATCH {ns}/services web"),
        // The sidecar before the probe: the probe's positive control is that it reaches it.
        format!("PATCH {ns}/secrets af-sidecar-config"),
        format!("PATCH {ns}/deployments af-sidecar"),
        format!("POST {ns}/pods af-probe"),
        format!("DELETE {ns}/pods af-probe"),
        "PATCH namespaces af-shop-main".to_string(),
        // The capture CA's certificate (the shop captures its payments API): after the sidecar,
        // before the first workload pod mounts it.
        format!("PATCH {ns}/configmaps af-capture-trust"),
        // The waves of `depends_on`: the worker, then web's migration (it calls the worker)
        // and web and report.
        format!("PATCH {ns}/deployments worker"),
        format!("PATCH {ns}/jobs af-migrate-web"),
        format!("PATCH {ns}/deployments report"),
        format!("PATCH {ns}/deployments web"),
        format!("PATCH {ns}/ingresses web"),
    ]);
    assert_eq!(writes(&fake), expected);
    let status = &report.status;
    assert_eq!(status.services.len(), 3, "{status:?}");
    assert!(status.containment.as_ref().unwrap().contained);
    let web = status.services.iter().find(|s| s.name == "web").unwrap();
    assert_eq!((web.ready, web.wanted), (2, 2));
    assert_eq!(web.urls, ["http://shop-main-web.preview.shop.example"]);

    let again = runtime.up(&environment(), &Quiet).await.unwrap();
    assert!(again.unchanged, "a second up changes nothing");
    assert_eq!(
        writes(&fake),
        [
            format!("POST {ns}/pods af-probe"),
            format!("DELETE {ns}/pods af-probe"),
            "PATCH namespaces af-shop-main".to_string(),
        ],
        "only the probe runs again"
    );

    runtime.down(&environment().id, &Quiet).await.unwrap();
    assert_eq!(writes(&fake), ["DELETE namespaces af-shop-main"]);
}

/// An `up` after the manifest lost a service, its captures and its domain removes what only the
/// old manifest had — the ingress controller's policy before the probe judges the namespace, the
/// rest once the services are up — and nothing else: not the sidecar's objects, not an object in
/// the namespace without the environment's labels.
#[tokio::test]
async fn an_up_removes_what_the_manifest_no_longer_has() {
    let fake = Shared::default();
    let runtime = runtime(&fake);
    runtime.up(&environment(), &Quiet).await.unwrap();
    writes(&fake);
    let ns = "af-shop-main";
    fake.lock().unwrap().insert(
        &format!("{ns}/configmaps/someone-elses"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "someone-elses", "namespace": ns}}),
    );

    let mut smaller = environment();
    smaller.manifest.services.remove("report");
    smaller.manifest.egress.capture.clear();
    smaller.manifest.egress.mail = af_manifest::MailPolicy::Deny;
    smaller.manifest.runtime.domain = None;
    let report = runtime.up(&smaller, &Quiet).await.unwrap();
    assert!(!report.unchanged);
    let written = writes(&fake);
    let deleted: Vec<&str> = written
        .iter()
        .filter(|w| w.starts_with("DELETE"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        deleted,
        [
            format!("DELETE {ns}/networkpolicies af-ingress-controller"),
            format!("DELETE {ns}/pods af-probe"),
            // Its pod template lost the capture CA: a Job's template cannot be patched (the fake
            // refuses it as a real API server does), so the migration is made anew.
            format!("DELETE {ns}/jobs af-migrate-web"),
            format!("DELETE {ns}/configmaps af-capture-trust"),
            format!("DELETE {ns}/deployments report"),
            format!("DELETE {ns}/ingresses web"),
        ],
        "{written:#?}"
    );
    let at = |line: String| written.iter().position(|w| *w == line).unwrap();
    assert!(
        at(format!("DELETE {ns}/networkpolicies af-ingress-controller"))
            < at(format!("POST {ns}/pods af-probe")),
        "the stale policy goes before the probe: {written:#?}"
    );
    assert!(
        fake.lock()
            .unwrap()
            .object(&format!("{ns}/configmaps/someone-elses"))
            .is_some(),
        "an object without the environment's labels stays"
    );

    let again = runtime.up(&smaller, &Quiet).await.unwrap();
    assert!(again.unchanged, "{:#?}", writes(&fake));
}

#[tokio::test]
async fn a_foreign_namespace_is_refused_before_any_write() {
    let fake = Shared::default();
    fake.lock().unwrap().insert(
        "namespaces/af-shop-main",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "af-shop-main", "labels": {"team": "x"}}}),
    );
    let err = runtime(&fake).up(&environment(), &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::NotOurs);
    assert_eq!(writes(&fake), Vec::<String>::new());
    let err = runtime(&fake)
        .down(&environment().id, &Quiet)
        .await
        .unwrap_err();
    assert_eq!(err.code(), RunCode::NotOurs);
    assert_eq!(writes(&fake), Vec::<String>::new());
}

#[tokio::test]
async fn an_escaped_probe_route_stops_up_before_any_workload() {
    let fake = Shared::default();
    fake.lock().unwrap().probe_escapes = true;
    let err = runtime(&fake).up(&environment(), &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::ContainmentRefused);
    assert!(
        err.to_string().contains("public-tcp tcp 203.0.113.10:443"),
        "{err}"
    );
    let written = writes(&fake);
    assert!(
        written
            .iter()
            .any(|w| w.contains("networkpolicies af-deny-all")),
        "{written:?}"
    );
    let workloads: Vec<&String> = written
        .iter()
        .filter(|w| {
            (w.contains("deployments") && !w.ends_with("deployments af-sidecar"))
                || w.contains("jobs")
        })
        .collect();
    assert!(
        workloads.is_empty(),
        "no migration, no service: {written:?}"
    );
    assert!(
        written
            .iter()
            .any(|w| w.ends_with("deployments af-sidecar")),
        "the sidecar runs before the probe, as its positive control: {written:?}"
    );
}

#[tokio::test]
async fn a_failed_migration_stops_up_before_the_services() {
    let fake = Shared::default();
    fake.lock().unwrap().script = Box::new(|origin, _| match origin.kind {
        "Job" => fake_cluster::Fate::JobFails {
            log: "applying 0001\nERROR: it broke".into(),
        },
        _ => fake_cluster::Fate::Healthy,
    });
    let err = runtime(&fake).up(&environment(), &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::MigrationFailed, "{err}");
    assert!(
        err.to_string()
            .contains("the migration of service web failed")
            && err.to_string().contains("ERROR: it broke"),
        "{err}"
    );
    let written = writes(&fake);
    assert!(written.iter().any(|w| w.ends_with("jobs af-migrate-web")));
    assert!(
        !written.iter().any(|w| w.contains("deployments web")),
        "{written:?}"
    );
}

#[tokio::test]
async fn a_container_database_or_a_build_context_is_af_run_044() {
    let fake = Shared::default();
    let mut with_build = environment();
    with_build.manifest.services.get_mut("web").unwrap().source = ImageSource::Build {
        context: "./web".into(),
        dockerfile: "Dockerfile".into(),
    };
    let err = runtime(&fake).up(&with_build, &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::Unsupported);
    assert!(
        err.to_string()
            .contains("the kubernetes runtime does not support building"),
        "{err}"
    );
    assert_eq!(writes(&fake), Vec::<String>::new());

    // The shop as it is, with its database branch: refused before anything is written.
    let mut with_database = environment();
    with_database.manifest.database = af_manifest::load(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop/af.yaml"),
    )
    .unwrap()
    .database;
    assert!(with_database.manifest.database.is_some());
    let err = runtime(&fake).up(&with_database, &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::Unsupported);
    assert!(
        err.to_string()
            .contains("the kubernetes runtime does not support a database branch in a container"),
        "{err}"
    );
    assert_eq!(writes(&fake), Vec::<String>::new());
}

/// Builds nothing for real: says what it was asked.
#[derive(Default)]
struct RecordedImageWork(Mutex<Vec<String>>);

#[async_trait::async_trait]
impl af_kube::runtime::ImageWork for RecordedImageWork {
    async fn build(
        &self,
        manifest_name: &str,
        service: &str,
        _: &std::path::Path,
        context: &std::path::Path,
        _: &std::path::Path,
    ) -> Result<String, af_runtime::RuntimeError> {
        self.0
            .lock()
            .unwrap()
            .push(format!("build {service} from {}", context.display()));
        Ok(format!("af-{manifest_name}-{service}:built"))
    }

    async fn load(&self, command: &[String]) -> Result<(), af_runtime::RuntimeError> {
        self.0.lock().unwrap().push(command.join(" "));
        Ok(())
    }

    async fn daemon_id(&self) -> Option<String> {
        Some("RECORDED:DAEMON".to_string())
    }

    async fn ensure_engine_image(&self) -> Result<(), af_runtime::RuntimeError> {
        self.0
            .lock()
            .unwrap()
            .push("ensure the engine image".to_string());
        Ok(())
    }
}

#[tokio::test]
async fn on_k3d_built_images_and_the_engine_are_copied_into_the_nodes_once() {
    let fake = Shared::default();
    let work = Arc::new(RecordedImageWork::default());
    let runtime = KubeRuntime::new(
        serve(fake.clone()),
        "k3d-twins",
        "context k3d-twins".into(),
        "af-".into(),
        support::ENGINE_IMAGE.into(),
        support::targets(),
        Cluster::default(),
    )
    .with_image_work(work.clone())
    .with_ingress_address(routed_ingress());
    let mut with_build = environment();
    with_build.manifest.services.get_mut("web").unwrap().source = ImageSource::Build {
        context: "./image".into(),
        dockerfile: "Dockerfile".into(),
    };
    runtime.up(&with_build, &Quiet).await.unwrap();
    assert_eq!(
        *work.0.lock().unwrap(),
        [
            "build web from ./image".to_string(),
            "ensure the engine image".to_string(),
            format!("k3d image import {} -c twins", support::ENGINE_IMAGE),
            "k3d image import af-shop-web:built -c twins".to_string(),
        ],
        "what af built and its own image; an image: reference is the nodes' to pull"
    );
    let web = fake
        .lock()
        .unwrap()
        .object("af-shop-main/deployments/web")
        .unwrap()
        .clone();
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"],
        "af-shop-web:built"
    );
}

// The defects a real cluster found (issue 28), each on this tier, which answers as that cluster
// did.

/// Seed 000 and the local runtime: a service's migration runs once the services it depends on
/// are ready. The shop's web migration calls the worker, so on a cluster where every Job ran
/// before any Deployment existed it failed with `Connection refused`.
#[tokio::test]
async fn a_migration_runs_after_the_services_its_service_depends_on_are_ready() {
    let fake = Shared::default();
    fake.lock().unwrap().script = Box::new(|origin, cluster| {
        if origin.kind == "Job" && !cluster.deployment_ready(&origin.namespace, "worker") {
            return fake_cluster::Fate::JobFails {
                log: "calling http://worker:9090/ready: Connection refused".into(),
            };
        }
        fake_cluster::Fate::Healthy
    });
    runtime(&fake).up(&environment(), &Quiet).await.unwrap();
    let written = writes(&fake);
    let at = |line: &str| {
        written
            .iter()
            .position(|w| w == line)
            .unwrap_or_else(|| panic!("{line} in {written:#?}"))
    };
    let ns = "af-shop-main";
    assert!(
        at(&format!("PATCH {ns}/deployments worker"))
            < at(&format!("PATCH {ns}/jobs af-migrate-web"))
            && at(&format!("PATCH {ns}/jobs af-migrate-web"))
                < at(&format!("PATCH {ns}/deployments web")),
        "worker, then web's migration, then web: {written:#?}"
    );
}

/// The nodes' room, sized so that the shop fits once beside what else runs, and not twice.
fn node_that_fits_the_shop_once() -> (String, String) {
    let rendered = support::rendered(&shop());
    let needed = af_kube::fit::instances(&rendered)
        .iter()
        .fold(0, |sum, i| sum + i.requests.cpu_millis);
    (format!("{}m", needed + needed / 2), "32Gi".to_string())
}

/// The free figure once counted the environment's own running pods as used, so on a small
/// cluster the second, idempotent `up` was refused with AF-RUN-047 although it adds nothing.
#[tokio::test]
async fn a_second_up_is_not_refused_for_the_room_its_own_pods_take() {
    let fake = Shared::default();
    let (cpu, memory) = node_that_fits_the_shop_once();
    fake.lock().unwrap().nodes = vec![(cpu.leak(), memory.leak())];
    runtime(&fake).up(&environment(), &Quiet).await.unwrap();
    let again = runtime(&fake).up(&environment(), &Quiet).await.unwrap();
    assert!(again.unchanged);

    // Another environment on the same node is still counted against: it would be added.
    let other = Environment {
        id: af_manifest::EnvironmentId::derive("shop", "other"),
        ..environment()
    };
    let err = runtime(&fake).up(&other, &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::DoesNotFit, "{err}");
}

/// What a pod of `service` says, the rest healthy.
fn with_fate(service: &'static str, fate: fake_cluster::Fate) -> Shared {
    fated(
        move |origin| origin.kind == "Deployment" && origin.name == service,
        fate,
    )
}

/// What the pods made by the objects `chosen` picks say, the rest healthy.
fn fated(
    chosen: impl Fn(&fake_cluster::Origin) -> bool + Send + 'static,
    fate: fake_cluster::Fate,
) -> Shared {
    let fake = Shared::default();
    fake.lock().unwrap().script = Box::new(move |origin, _| {
        if chosen(origin) {
            fate.clone()
        } else {
            fake_cluster::Fate::Healthy
        }
    });
    fake
}

/// A pod the kubelet rejects is replaced every second by its ReplicaSet and never becomes
/// ready: `up` once waited out its 300 s and then spoke of the Docker daemon. It must stop at
/// the first rejected pod, with its own code and the kubelet's reason.
#[tokio::test]
async fn a_pod_the_kubelet_rejects_stops_up_at_once_with_the_reason() {
    let fake = with_fate(
        "af-sidecar",
        fake_cluster::Fate::Rejected {
            reason: "SysctlForbidden".into(),
            message:
                "Pod forbidden sysctl: \"net.ipv4.ip_unprivileged_port_start\" not allowlisted"
                    .into(),
        },
    );
    let err = runtime(&fake).up(&environment(), &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::PodWillNotStart, "{err}");
    let text = format!("{err} {}", err.help());
    assert!(
        text.contains("SysctlForbidden") && text.contains("ip_unprivileged_port_start"),
        "{text}"
    );
    assert!(
        !text.contains("docker"),
        "advice that fits the cause: {text}"
    );
    let pods = fake.lock().unwrap().pods("af-shop-main").len();
    assert!(
        pods <= 3,
        "stopped at the first rejected pods, not after {pods}"
    );
}

#[tokio::test]
async fn a_pod_that_will_never_be_ready_stops_up_naming_its_cause() {
    use fake_cluster::Fate;
    let cases = [
        (Fate::ImagePull, "ErrImagePull", "pull"),
        (
            Fate::Unschedulable {
                message: "0/1 nodes are available: 1 node(s) had untolerated taint".into(),
            },
            "untolerated taint",
            "scheduler",
        ),
        (
            Fate::CrashLoop {
                log: "listening on 0.0.0.0:9090\npanic: no database".into(),
            },
            "panic: no database",
            "keeps exiting",
        ),
        (
            Fate::Forbidden {
                message:
                    "pods \"worker-x\" is forbidden: violates PodSecurity \"restricted:latest\""
                        .into(),
            },
            "violates PodSecurity",
            "admission",
        ),
    ];
    for (fate, said, advice) in cases {
        let fake = with_fate("worker", fate.clone());
        let err = runtime(&fake).up(&environment(), &Quiet).await.unwrap_err();
        assert_eq!(err.code(), RunCode::PodWillNotStart, "{fate:?}: {err}");
        assert!(err.to_string().contains(said), "{fate:?}: {err}");
        assert!(err.help().contains(advice), "{fate:?}: {}", err.help());
    }
}

/// A gate that refused is the containment verdict of that pod: AF-RUN-043, with the gate's own
/// words.
#[tokio::test]
async fn a_refusing_gate_is_a_containment_refusal_with_its_verdict() {
    let verdict = json!({"check": "gate", "passed": false,
        "reason": "routes still not denied at the deadline: public-tcp (tcp 203.0.113.10:443, escaped)",
        "rounds_tried": 30, "consecutive_denied": 0, "elapsed_ms": 30000,
        "routes": [{"route": "public-tcp", "target": "tcp 203.0.113.10:443", "outcome": "escaped", "detail": "connected"}]});
    let fake = with_fate(
        "worker",
        fake_cluster::Fate::GateRefused {
            log: verdict.to_string(),
        },
    );
    let err = runtime(&fake).up(&environment(), &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::ContainmentRefused, "{err}");
    assert!(err.to_string().contains("public-tcp"), "{err}");
    assert!(
        err.to_string().contains("worker"),
        "names the service: {err}"
    );
}

/// The oldest API server af supports is stated; an older one is refused before anything is
/// written, naming both versions.
#[tokio::test]
async fn a_cluster_older_than_af_supports_is_refused_before_any_write() {
    let fake = Shared::default();
    fake.lock().unwrap().version = "v1.20.15".into();
    let err = runtime(&fake).up(&environment(), &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::ClusterTooOld, "{err}");
    assert!(
        err.to_string().contains("1.20.15")
            && err.to_string().contains(af_kube::apply::version::MINIMUM),
        "{err}"
    );
    assert_eq!(writes(&fake), Vec::<String>::new());
}

/// `down` then `up` at once: the namespace is still terminating (it refuses new objects) and is
/// waited out, then made again.
#[tokio::test]
async fn an_up_right_after_down_waits_for_the_namespace_to_finish_terminating() {
    let fake = Shared::default();
    let runtime = runtime(&fake);
    runtime.up(&environment(), &Quiet).await.unwrap();
    fake.lock().unwrap().terminating_reads = 2;
    // What `down` does not wait for (another client deleted it): the namespace is Terminating.
    let mut ns = fake
        .lock()
        .unwrap()
        .object("namespaces/af-shop-main")
        .unwrap()
        .clone();
    ns["status"]["phase"] = json!("Terminating");
    ns["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    fake.lock().unwrap().insert("namespaces/af-shop-main", ns);
    writes(&fake);
    runtime.up(&environment(), &Quiet).await.unwrap();
    let written = writes(&fake);
    assert_eq!(written[0], "POST namespaces af-shop-main", "{written:#?}");
}

fn with_netlock() -> Environment {
    Environment {
        manifest: support::with_netlock(shop()),
        ..environment()
    }
}

/// The init containers' names and the netlock step's arguments of a pod template.
fn netlock_of(spec: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    let init = spec["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names = init
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect();
    let args = init
        .iter()
        .find(|c| c["name"] == "af-netlock")
        .map(|c| serde_json::from_value(c["args"].clone()).unwrap())
        .unwrap_or_default();
    (names, args)
}

/// `runtime.netlock`: every customer pod's first step locks it to the environment's own Service
/// addresses, as the cluster assigned them (the sidecar's and each service's, never a range);
/// the sidecar's pod has no lock (it is the way out). The fake admits pods as Pod Security does,
/// so the namespace's level must admit the step: an environment first brought up without
/// netlock, at `baseline`, is relabelled when netlock is turned on — else its probe is refused.
#[tokio::test]
async fn with_netlock_every_customer_pod_is_locked_to_the_environments_service_addresses() {
    let fake = Shared::default();
    let runtime = runtime(&fake);
    runtime.up(&environment(), &Quiet).await.unwrap();
    let ns = "af-shop-main";
    let level = |fake: &Shared| {
        fake.lock()
            .unwrap()
            .object(&format!("namespaces/{ns}"))
            .unwrap()["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
            .clone()
    };
    assert_eq!(level(&fake), "baseline");

    runtime.up(&with_netlock(), &Quiet).await.unwrap();
    assert_eq!(
        level(&fake),
        "privileged",
        "the step needs NET_ADMIN as root"
    );
    let state = fake.lock().unwrap();
    let ip = |service: &str| {
        state.object(&format!("{ns}/services/{service}")).unwrap()["spec"]["clusterIP"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut expected = vec!["netlock".to_string()];
    for service in ["af-sidecar", "web", "worker"] {
        expected.extend(["--only-to".to_string(), ip(service)]);
    }
    for key in [
        "deployments/web",
        "deployments/worker",
        "deployments/report",
        "jobs/af-migrate-web",
    ] {
        let object = state.object(&format!("{ns}/{key}")).unwrap();
        let (init, args) = netlock_of(&object["spec"]["template"]["spec"]);
        assert_eq!(
            init.first().map(String::as_str),
            Some("af-netlock"),
            "{key}: {init:?}"
        );
        assert_eq!(
            init.get(1).map(String::as_str),
            Some("af-gate"),
            "{key}: then the gate"
        );
        assert_eq!(args, expected, "{key}");
    }
    let sidecar = state
        .object(&format!("{ns}/deployments/af-sidecar"))
        .unwrap();
    let (init, _) = netlock_of(&sidecar["spec"]["template"]["spec"]);
    assert!(!init.contains(&"af-netlock".to_string()), "{init:?}");
}

/// The probe is locked as the services will be, so an admission rule that refuses the step
/// refuses the probe first: AF-RUN-058 with the rule's words and advice that names netlock,
/// before any service's pod is asked for.
#[tokio::test]
async fn an_admission_rule_that_refuses_the_netlock_step_stops_up_at_the_probe() {
    let fake = fated(
        |origin| origin.kind == "Pod",
        fake_cluster::Fate::Forbidden {
            message: "admission webhook \"validate.kyverno.svc\" denied the request: NET_ADMIN is not allowed".into(),
        },
    );
    let err = runtime(&fake)
        .up(&with_netlock(), &Quiet)
        .await
        .unwrap_err();
    assert_eq!(err.code(), RunCode::PodWillNotStart, "{err}");
    assert!(
        err.to_string().contains("the containment probe") && err.to_string().contains("kyverno"),
        "{err}"
    );
    assert!(err.help().contains("runtime.netlock"), "{}", err.help());
    let writes = writes(&fake);
    assert!(
        !writes
            .iter()
            .any(|w| w.contains("/deployments ") && !w.ends_with("af-sidecar")),
        "no service was asked for: {writes:?}"
    );
}

/// A netlock step that cannot lock its pod (a gVisor runtime class, say) is AF-RUN-051 naming
/// the pod and the step's own cause, at the probe and at a service's pod alike — whose kubelet
/// restarts the step, so its failure shows in `lastState`.
#[tokio::test]
async fn a_netlock_step_that_fails_is_af_run_051_with_its_cause() {
    // What `af-proxy netlock` prints under gVisor.
    let cause = "refusing to run under gVisor: its network stack implements only part of netfilter (no owner matching among what it lacks), so a lock would only look applied; run it with runc or Kata";
    let said = af_runtime::RuntimeError::from(af_runtime::RuntimeErrorKind::NetlockFailed {
        place: "this pod".into(),
        detail: cause.into(),
    });
    let log = format!("af-proxy netlock: {said}\n  help: {}\n", said.help());
    for failing in ["Pod", "Deployment"] {
        let fake = fated(
            move |origin| origin.kind == failing && origin.name != "af-sidecar",
            fake_cluster::Fate::NetlockFails { log: log.clone() },
        );
        let err = runtime(&fake)
            .up(&with_netlock(), &Quiet)
            .await
            .unwrap_err();
        assert_eq!(err.code(), RunCode::NetlockFailed, "{failing}: {err}");
        let text = err.to_string();
        let place = if failing == "Pod" {
            "the containment probe (pod af-shop-main/af-probe)"
        } else {
            "service worker (pod af-shop-main/worker-"
        };
        assert!(text.contains(place), "{failing}: {text}");
        assert!(
            text.ends_with(&format!("must not start: {cause}")),
            "the step's cause, said once: {text}"
        );
        assert!(err.help().contains("gVisor"), "{}", err.help());
    }
}

/// A value the manifest takes from af's environment and that is not set there stops `up` before
/// anything is written (it once stopped it after the namespace, the sidecar and the probe).
#[tokio::test]
async fn an_unset_from_env_value_is_af_run_060_before_any_write() {
    let fake = Shared::default();
    let mut unset = environment();
    let web = unset.manifest.services.get_mut("web").unwrap();
    web.env.insert(
        "PAYMENTS_KEY".into(),
        EnvValue::FromEnv("AF_TEST_NEVER_SET_PAYMENTS_KEY".into()),
    );
    let err = runtime(&fake).up(&unset, &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::EnvValueMissing, "{err}");
    assert!(
        err.to_string()
            .contains("web's PAYMENTS_KEY from AF_TEST_NEVER_SET_PAYMENTS_KEY"),
        "{err}"
    );
    assert_eq!(writes(&fake), Vec::<String>::new());
}

/// A service that runs and never becomes ready, with nothing saying it never will, is waited on
/// for readiness's patience and then is AF-RUN-063 naming it, with advice about the service, not
/// the platform.
#[tokio::test]
async fn a_service_that_never_becomes_ready_is_af_run_063() {
    let fake = with_fate("worker", fake_cluster::Fate::NeverReady);
    let client = serve(fake.clone());
    let rendered = support::rendered(&shop());
    let worker = rendered
        .deployments
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some("worker"))
        .unwrap();
    af_kube::apply::objects::apply(
        client.clone(),
        &af_kube::render::Object::Deployment(worker.clone()),
    )
    .await
    .unwrap();
    let patience = af_kube::apply::Patience {
        timeout: std::time::Duration::from_millis(300),
        interval: std::time::Duration::from_millis(50),
    };
    let err = af_kube::apply::readiness::wait(client, "af-shop-main", &["worker".into()], patience)
        .await
        .unwrap_err();
    assert_eq!(err.code(), RunCode::NeverReady, "{err}");
    assert!(err.to_string().contains("service worker"), "{err}");
    assert!(err.help().contains("af logs"), "{}", err.help());
    assert!(!err.help().contains("docker info"), "{}", err.help());
}

/// A sidecar configuration that cannot be read (the API server failing, not the Secret missing)
/// stops `up`: taking it for "none" would mint a new token and capture CA, replacing the sidecar
/// and breaking every service's trust in the CA it was given.
#[tokio::test]
async fn an_unreadable_sidecar_configuration_is_never_taken_for_none() {
    let fake = Shared::default();
    let runtime = runtime(&fake);
    runtime.up(&environment(), &Quiet).await.unwrap();
    let ns = "af-shop-main";
    let before = fake
        .lock()
        .unwrap()
        .object(&format!("{ns}/secrets/af-sidecar-config"))
        .cloned()
        .unwrap();
    writes(&fake);
    fake.lock()
        .unwrap()
        .failing_reads
        .push(format!("{ns}/secrets/af-sidecar-config"));
    let err = runtime.up(&environment(), &Quiet).await.unwrap_err();
    assert_eq!(err.code(), RunCode::PlatformFailed, "{err}");
    assert!(err.to_string().contains("af-sidecar-config"), "{err}");
    let written = writes(&fake);
    assert!(
        !written.iter().any(|w| w.contains("af-sidecar")),
        "nothing of the sidecar rewritten: {written:?}"
    );
    fake.lock().unwrap().failing_reads.clear();
    let after = fake
        .lock()
        .unwrap()
        .object(&format!("{ns}/secrets/af-sidecar-config"))
        .cloned()
        .unwrap();
    assert_eq!(before["data"], after["data"], "the token and the CA kept");
}
