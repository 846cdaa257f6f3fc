//! `up` and `down` of a whole environment against a stateful fake API server (objects kept by
//! path, statuses filled in as a healthy cluster would): the order of every write; a second `up`
//! that writes nothing but the probe's pod and verdict; a foreign namespace refused before any
//! write; an escaped probe route stopping `up` after the namespace, its policies and the sidecar
//! (so `down` removes them) and before any workload; a failed migration stopping `up` before the
//! services.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use af_kube::KubeRuntime;
use af_kube::render::Cluster;
use af_manifest::{EnvValue, ImageSource, Manifest};
use af_runtime::{Environment, ProgressEvent, ProgressSink, RunCode, Runtime};
use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

struct Quiet;

impl ProgressSink for Quiet {
    fn emit(&self, _: ProgressEvent) {}
}

#[derive(Default)]
struct Fake {
    objects: BTreeMap<String, Value>,
    writes: Vec<String>,
    probe_escapes: bool,
    migration_fails: bool,
    /// The images every node reports having.
    node_images: Vec<String>,
}

type Shared = Arc<Mutex<Fake>>;

/// (collection, name, subresource) of an API path: `af-shop-main/pods`, `af-probe`, `log`.
fn parts(path: &str) -> (String, Option<String>, Option<String>) {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = if segments[0] == "api" {
        &segments[2..]
    } else {
        &segments[3..]
    };
    if rest[0] == "namespaces" && rest.len() >= 3 {
        (
            format!("{}/{}", rest[1], rest[2]),
            rest.get(3).map(|s| s.to_string()),
            rest.get(4).map(|s| s.to_string()),
        )
    } else {
        (
            rest[0].to_string(),
            rest.get(1).map(|s| s.to_string()),
            None,
        )
    }
}

/// What a healthy cluster would have filled in.
fn with_status(collection: &str, mut object: Value, fake: &Fake) -> Value {
    let resource = collection.rsplit('/').next().unwrap_or_default();
    match resource {
        "services" => object["spec"]["clusterIP"] = json!("10.43.0.53"),
        "deployments" => {
            let wanted = object["spec"]["replicas"].as_i64().unwrap_or(1);
            object["status"] = json!({"readyReplicas": wanted, "replicas": wanted});
        }
        "jobs" if fake.migration_fails => object["status"] = json!({"failed": 1}),
        "jobs" => object["status"] = json!({"succeeded": 1}),
        "pods" => {
            let exit = if fake.probe_escapes { 1 } else { 0 };
            object["status"] = json!({"phase": if exit == 0 {"Succeeded"} else {"Failed"},
                "containerStatuses": [{"name": "af-probe", "image": "x", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": exit}}}]});
        }
        _ => {}
    }
    object
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
}

/// Whether `object` carries every `key=value` of a list's `labelSelector` (as kube encodes it in
/// the query).
fn selected(object: &Value, query: &str) -> bool {
    let Some(selector) = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("labelSelector="))
    else {
        return true;
    };
    let selector = selector
        .replace("%3D", "=")
        .replace("%2C", ",")
        .replace("%2F", "/");
    let labels = &object["metadata"]["labels"];
    selector.split(',').all(|term| match term.split_once('=') {
        Some((key, value)) => labels[key] == value,
        None => !labels[term].is_null(),
    })
}

fn answer(fake: &mut Fake, method: &str, path: &str, query: &str, body: &[u8]) -> (u16, Value) {
    let (collection, name, sub) = parts(path);
    let key = |name: &str| format!("{collection}/{name}");
    match (method, name.as_deref(), sub.as_deref()) {
        ("GET", None, _) if collection == "nodes" => (
            200,
            list(vec![json!({"metadata": {"name": "k3d-0"},
            "spec": {}, "status": {"allocatable": {"cpu": "16", "memory": "32Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": fake.node_images}]}})]),
        ),
        ("GET", None, _) if collection.ends_with("/pods") && fake.migration_fails => (
            200,
            list(vec![json!({"metadata": {"name": "af-migrate-web-x"}})]),
        ),
        ("GET", None, _) => {
            let prefix = format!("{collection}/");
            let items = fake
                .objects
                .iter()
                .filter(|(key, object)| key.starts_with(&prefix) && selected(object, query))
                .map(|(_, object)| with_status(&collection, object.clone(), fake))
                .collect();
            (200, list(items))
        }
        ("GET", Some(name), Some("log")) => {
            let outcome = if fake.probe_escapes {
                "escaped"
            } else {
                "denied"
            };
            let text = if name == "af-probe" {
                json!({"check": "probe", "contained": !fake.probe_escapes,
                    "control": {"target": "tcp 10.43.0.53:3128", "reached": true, "detail": "the sidecar answered"},
                    "routes": [
                    {"route": "public-tcp", "target": "tcp 203.0.113.10:443", "outcome": outcome, "detail": ""}]})
                .to_string()
            } else {
                "applying 0001\nERROR: it broke".to_string()
            };
            (200, Value::String(text))
        }
        ("GET", Some(name), _) => match fake.objects.get(&key(name)).cloned() {
            Some(object) => (200, with_status(&collection, object, fake)),
            None => (404, not_found()),
        },
        ("POST", None, _) => {
            let object: Value = serde_json::from_slice(body).unwrap();
            let name = object["metadata"]["name"].as_str().unwrap().to_string();
            fake.writes.push(format!("POST {collection} {name}"));
            fake.objects.insert(key(&name), object.clone());
            (201, object)
        }
        ("PATCH", Some(name), _) => {
            let object: Value = serde_json::from_slice(body).unwrap();
            fake.writes.push(format!("PATCH {collection} {name}"));
            fake.objects.insert(key(name), object.clone());
            (200, with_status(&collection, object, fake))
        }
        ("DELETE", Some(name), _) => match fake.objects.remove(&key(name)) {
            Some(object) => {
                fake.writes.push(format!("DELETE {collection} {name}"));
                (200, object)
            }
            None => (404, not_found()),
        },
        other => panic!("unexpected request {other:?} {path}"),
    }
}

fn serve(fake: Shared) -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, respond)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default().to_string();
            let body = request.into_body().collect_bytes().await.unwrap();
            let (status, value) = answer(&mut fake.lock().unwrap(), &method, &path, &query, &body);
            let bytes = match value {
                Value::String(text) => text.into_bytes(),
                other => serde_json::to_vec(&other).unwrap(),
            };
            respond.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(bytes))
                    .unwrap(),
            );
        }
    });
    kube::Client::new(service, "default")
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
        format!("PATCH {ns}/services af-sidecar"),
        // The sidecar before the probe: the probe's positive control is that it reaches it.
        format!("PATCH {ns}/secrets af-sidecar-config"),
        format!("PATCH {ns}/deployments af-sidecar"),
        format!("POST {ns}/pods af-probe"),
        format!("DELETE {ns}/pods af-probe"),
        "PATCH namespaces af-shop-main".to_string(),
        // The capture CA's certificate (the shop captures its payments API): after the sidecar,
        // before the first workload pod mounts it.
        format!("PATCH {ns}/configmaps af-capture-trust"),
        format!("PATCH {ns}/jobs af-migrate-web"),
        format!("PATCH {ns}/services worker"),
        format!("PATCH {ns}/services web"),
        format!("PATCH {ns}/deployments worker"),
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
    fake.lock().unwrap().objects.insert(
        format!("{ns}/configmaps/someone-elses"),
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
            .objects
            .contains_key(&format!("{ns}/configmaps/someone-elses")),
        "an object without the environment's labels stays"
    );

    let again = runtime.up(&smaller, &Quiet).await.unwrap();
    assert!(again.unchanged, "{:#?}", writes(&fake));
}

#[tokio::test]
async fn a_foreign_namespace_is_refused_before_any_write() {
    let fake = Shared::default();
    fake.lock().unwrap().objects.insert(
        "namespaces/af-shop-main".into(),
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
    fake.lock().unwrap().migration_fails = true;
    let err = runtime(&fake).up(&environment(), &Quiet).await.unwrap_err();
    assert!(err.to_string().contains("ERROR: it broke"), "{err}");
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
            format!("k3d image import {} -c twins", support::ENGINE_IMAGE),
            "k3d image import af-shop-web:built -c twins".to_string(),
        ],
        "what af built and its own image; an image: reference is the nodes' to pull"
    );
    let web = fake.lock().unwrap().objects["af-shop-main/deployments/web"].clone();
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"],
        "af-shop-web:built"
    );
}
