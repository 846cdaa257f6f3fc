//! A stateful API server for the reconcile's tests: kube-fake-client's in-memory objects behind a
//! layer of our own that answers as a real server does where the operator's decisions depend on
//! it — it fills the defaults a real server fills and writes quantities in their canonical form
//! (so "nothing to write" is judged against what a server really stores), answers discovery for
//! KEDA and CloudNativePG as installed or not, and records every request, so a test can say what
//! was written and what was never touched.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use afe_config::engine::AgentFlowEngine;
use afe_config::kinds::{Agent, Flow, Plugin, SchemaResource};
use afe_operator::reconcile::{Context, ReconcileError, reconcile};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::client::Body;
use kube::core::{ApiResource, GroupVersionKind, NamespaceResourceScope};
use kube::runtime::events::{Recorder, Reporter};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::example::{NOW_MS, NS, SANDBOX_NS};
use crate::example::{example_engine, example_resources, example_source};

/// A custom resource of a kind afe does not define (KEDA's, CloudNativePG's), so the fake knows
/// its plural and scope.
macro_rules! foreign_kind {
    ($name:ident, $group:literal, $version:literal, $kind:literal, $plural:literal) => {
        #[derive(Clone, Debug, Default, Serialize, Deserialize)]
        pub struct $name {
            metadata: ObjectMeta,
            #[serde(flatten)]
            rest: serde_json::Map<String, Value>,
        }
        impl kube::Resource for $name {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
foreign_kind!(
    ScaledObject,
    "keda.sh",
    "v1alpha1",
    "ScaledObject",
    "scaledobjects"
);
foreign_kind!(PgCluster, "postgresql.cnpg.io", "v1", "Cluster", "clusters");

/// What the cluster has installed besides afe.
#[derive(Clone, Copy, Debug)]
pub struct Installed {
    pub keda: bool,
    pub cloudnative_pg: bool,
}

pub const EVERYTHING: Installed = Installed {
    keda: true,
    cloudnative_pg: true,
};

/// One request the operator sent.
#[derive(Clone, Debug)]
pub struct Sent {
    pub method: Method,
    pub path: String,
    /// The body as the operator sent it (before the server filled anything in).
    pub body: Option<Value>,
}

impl Sent {
    pub fn writes(&self) -> bool {
        self.method != Method::GET
    }
}

pub struct Cluster {
    /// The in-memory server itself (for a test's own reads and writes, never recorded).
    pub direct: kube::Client,
    /// What the operator talks to.
    pub client: kube::Client,
    pub sent: Arc<Mutex<Vec<Sent>>>,
    pub installed: Arc<Mutex<Installed>>,
}

/// What a real server stores for an applied object: its defaults filled, quantities canonical.
pub fn canonical(mut object: Value) -> Value {
    fn fill(target: &mut Value, defaults: Value) {
        if let (Value::Object(target), Value::Object(defaults)) = (target, defaults) {
            for (key, value) in defaults {
                target.entry(key).or_insert(value);
            }
        }
    }
    fn containers(pod: &mut Value) {
        fill(
            pod,
            json!({"restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30}),
        );
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(containers)) = pod.get_mut(list) {
                for container in containers {
                    fill(
                        container,
                        json!({"terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File"}),
                    );
                    if let Some(Value::Array(ports)) = container.get_mut("ports") {
                        ports
                            .iter_mut()
                            .for_each(|p| fill(p, json!({"protocol": "TCP"})));
                    }
                }
            }
        }
    }
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    if let Some(spec) = object.get_mut("spec") {
        match kind.as_str() {
            "Deployment" => {
                fill(
                    spec,
                    json!({"replicas": 1, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}),
                );
                if let Some(pod) = spec.pointer_mut("/template/spec") {
                    containers(pod);
                }
            }
            "StatefulSet" => {
                fill(
                    spec,
                    json!({"podManagementPolicy": "OrderedReady", "revisionHistoryLimit": 10,
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}}),
                );
                if let Some(pod) = spec.pointer_mut("/template/spec") {
                    containers(pod);
                }
            }
            "Service" => {
                fill(
                    spec,
                    json!({"type": "ClusterIP", "sessionAffinity": "None", "clusterIP": "10.96.0.17",
                    "clusterIPs": ["10.96.0.17"], "ipFamilies": ["IPv4"], "internalTrafficPolicy": "Cluster"}),
                );
                if let Some(Value::Array(ports)) = spec.get_mut("ports") {
                    ports
                        .iter_mut()
                        .for_each(|p| fill(p, json!({"protocol": "TCP"})));
                }
            }
            _ => {}
        }
    }
    quantities(&mut object, None);
    object
}

/// Quantities at the keys that hold one, in the server's spelling (`2048Mi` → `2Gi`).
fn quantities(value: &mut Value, key: Option<&str>) {
    match value {
        Value::Object(map) => map
            .iter_mut()
            .for_each(|(k, v)| quantities(v, Some(k.as_str()))),
        Value::Array(items) => items.iter_mut().for_each(|v| quantities(v, key)),
        Value::String(text) if matches!(key, Some("storage" | "size" | "memory" | "cpu")) => {
            if let Some(amount) = afe_operator::converge::quantity(text) {
                *text = canonical_quantity(amount, text);
            }
        }
        _ => {}
    }
}

fn canonical_quantity(amount: f64, original: &str) -> String {
    if original.ends_with('i') {
        for (suffix, power) in [("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)] {
            let unit = 1024f64.powi(power);
            if amount >= unit && (amount / unit).fract() == 0.0 {
                return format!("{}{suffix}", amount / unit);
            }
        }
    }
    if amount.fract() != 0.0 && (amount * 1000.0).fract() == 0.0 {
        return format!("{}m", amount * 1000.0);
    }
    original.to_string()
}

/// What the layer answers with: a whole body, the in-memory server's, or a watch's stream.
type Answer = Response<UnsyncBoxBody<Bytes, BoxError>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn answer(status: StatusCode, body: Value) -> Answer {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(
            Full::new(Bytes::from(serde_json::to_vec(&body).unwrap()))
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .unwrap()
}

/// A watch that stays open and says nothing: the in-memory server has no watch, and a
/// controller's watcher, after its first list, waits on this as on a quiet real server.
fn quiet_watch() -> Answer {
    let events = futures_util::stream::pending::<Result<http_body::Frame<Bytes>, BoxError>>();
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(StreamBody::new(events).boxed_unsync())
        .unwrap()
}

fn discovery(group_version: &str, kind: &str, plural: &str, installed: bool) -> Answer {
    if installed {
        answer(
            StatusCode::OK,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                "resources": [{"name": plural, "singularName": kind.to_lowercase(), "namespaced": true,
                    "kind": kind, "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]}),
        )
    } else {
        answer(
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404}),
        )
    }
}

async fn serve(
    direct: kube::Client,
    sent: Arc<Mutex<Vec<Sent>>>,
    installed: Arc<Mutex<Installed>>,
    request: Request<Body>,
) -> Result<Answer, kube::Error> {
    let path = request.uri().path().to_string();
    if request.method() == Method::GET
        && request
            .uri()
            .query()
            .is_some_and(|q| q.contains("watch=true"))
    {
        return Ok(quiet_watch());
    }
    let installed = *installed.lock().unwrap();
    if path.starts_with("/apis/keda.sh/v1alpha1") || path.starts_with("/apis/postgresql.cnpg.io/v1")
    {
        // Discovery, and what it found missing is never asked for: a request on a kind the
        // server does not serve is recorded and fails as a real server fails it.
        let absent = (path.contains("keda.sh") && !installed.keda)
            || (path.contains("cnpg.io") && !installed.cloudnative_pg);
        if absent && path.matches('/').count() > 3 {
            sent.lock().unwrap().push(Sent {
                method: request.method().clone(),
                path: path.clone(),
                body: None,
            });
            return Ok(discovery("", "", "", false));
        }
    }
    match path.as_str() {
        "/apis/keda.sh/v1alpha1" => {
            return Ok(discovery(
                "keda.sh/v1alpha1",
                "ScaledObject",
                "scaledobjects",
                installed.keda,
            ));
        }
        "/apis/postgresql.cnpg.io/v1" => {
            return Ok(discovery(
                "postgresql.cnpg.io/v1",
                "Cluster",
                "clusters",
                installed.cloudnative_pg,
            ));
        }
        _ => {}
    }
    let (parts, body) = request.into_parts();
    let body = body.collect_bytes().await?;
    sent.lock().unwrap().push(Sent {
        method: parts.method.clone(),
        path: path.clone(),
        body: serde_json::from_slice(&body).ok(),
    });
    let body = if parts.method == Method::PATCH && !path.ends_with("/status") && !body.is_empty() {
        let object: Value = serde_json::from_slice(&body).unwrap();
        serde_json::to_vec(&canonical(object)).unwrap()
    } else {
        body.to_vec()
    };
    let response = direct
        .send(Request::from_parts(parts, Body::from(body)))
        .await?;
    Ok(response.map(|body| body.map_err(BoxError::from).boxed_unsync()))
}

impl Cluster {
    pub async fn new(objects: Vec<Value>, installed: Installed) -> Cluster {
        let direct = kube_fake_client::ClientBuilder::new()
            .with_resource::<AgentFlowEngine>()
            .with_resource::<SchemaResource>()
            .with_resource::<Agent>()
            .with_resource::<Flow>()
            .with_resource::<Plugin>()
            .with_resource::<ScaledObject>()
            .with_resource::<PgCluster>()
            .with_runtime_objects(objects)
            .build()
            .await
            .unwrap();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let installed = Arc::new(Mutex::new(installed));
        let service = {
            let (direct, sent, installed) = (direct.clone(), sent.clone(), installed.clone());
            tower::service_fn(move |request| {
                serve(direct.clone(), sent.clone(), installed.clone(), request)
            })
        };
        Cluster {
            client: kube::Client::new(service, NS),
            direct,
            sent,
            installed,
        }
    }

    /// The example installation, with `edit` applied to its AgentFlowEngine.
    pub async fn example(installed: Installed, edit: impl FnOnce(&mut Value)) -> Cluster {
        let mut engine = example_engine();
        edit(&mut engine);
        let mut objects = vec![engine, example_source()];
        objects.extend(example_resources());
        Cluster::new(objects, installed).await
    }

    pub fn engine_api(&self) -> Api<AgentFlowEngine> {
        Api::namespaced(self.direct.clone(), NS)
    }

    pub async fn engine(&self) -> AgentFlowEngine {
        self.engine_api().get("afe").await.unwrap()
    }

    /// One reconcile of the AgentFlowEngine as the server holds it now.
    pub async fn reconcile(&self) -> Result<(), ReconcileError> {
        let ctx = Arc::new(Context::new(
            self.client.clone(),
            Recorder::new(
                self.client.clone(),
                Reporter {
                    controller: "afe-operator".to_string(),
                    instance: None,
                },
            ),
            Arc::new(|| NOW_MS),
            Duration::from_secs(60),
        ));
        reconcile(Arc::new(self.engine().await), ctx)
            .await
            .map(|_| ())
    }

    /// Forgets what was sent so far.
    pub fn clear(&self) {
        self.sent.lock().unwrap().clear();
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }

    /// The body of the last apply sent to a path ending in `suffix`.
    pub fn applied(&self, suffix: &str) -> Value {
        self.sent()
            .into_iter()
            .rev()
            .find(|s| s.method == Method::PATCH && s.path.ends_with(suffix))
            .and_then(|s| s.body)
            .unwrap_or_else(|| panic!("nothing applied to …{suffix}"))
    }

    pub fn writes(&self) -> Vec<String> {
        self.sent()
            .into_iter()
            .filter(Sent::writes)
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }

    /// The object `kind/name` in `namespace` as the server holds it, if any.
    pub async fn object(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.direct.clone(),
            namespace,
            &resource_of(api_version, kind),
        );
        api.get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    }

    /// Whether `kind/name` exists in the engine's namespace.
    pub async fn has(&self, kind: &str, name: &str) -> bool {
        self.object(api_version_of(kind), kind, NS, name)
            .await
            .is_some()
    }

    /// `kind/name` of the engine's namespace, which must exist.
    pub async fn get(&self, kind: &str, name: &str) -> Value {
        self.object(api_version_of(kind), kind, NS, name)
            .await
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    /// Creates `object` directly (as someone else would).
    pub async fn create(&self, object: Value) {
        let api_version = object["apiVersion"].as_str().unwrap().to_string();
        let kind = object["kind"].as_str().unwrap().to_string();
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.direct.clone(),
            &namespace,
            &resource_of(&api_version, &kind),
        );
        api.create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
    }

    /// Reports every process (Deployments, the managed Redis) as fully rolled out, as their
    /// controllers would.
    pub async fn roll_out(&self) {
        for (api_version, kind, name) in [
            ("apps/v1", "Deployment", "afe-serve"),
            ("apps/v1", "Deployment", "afe-worker"),
            ("apps/v1", "StatefulSet", "afe-redis"),
        ] {
            let Some(object) = self.object(api_version, kind, NS, name).await else {
                continue;
            };
            let replicas = object["spec"]["replicas"].as_i64().unwrap_or(1);
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.direct.clone(), NS, &resource_of(api_version, kind));
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"replicas": replicas, "readyReplicas": replicas}})),
            )
            .await
            .unwrap();
        }
    }

    /// Changes the AgentFlowEngine's spec as a user's `kubectl apply` would (its generation moves).
    pub async fn edit_engine(&self, edit: impl FnOnce(&mut Value)) {
        let engine = self.engine().await;
        let mut value = serde_json::to_value(&engine).unwrap();
        edit(&mut value);
        value["metadata"]["generation"] = json!(engine.metadata.generation.unwrap_or(1) + 1);
        let api = self.engine_api();
        let mut edited: AgentFlowEngine = serde_json::from_value(value).unwrap();
        edited.status = engine.status.clone();
        api.replace("afe", &PostParams::default(), &edited)
            .await
            .unwrap();
    }
}

/// The apiVersion of each kind the operator makes.
pub fn api_version_of(kind: &str) -> &'static str {
    match kind {
        "Deployment" | "StatefulSet" => "apps/v1",
        "Ingress" | "NetworkPolicy" => "networking.k8s.io/v1",
        "ScaledObject" => "keda.sh/v1alpha1",
        "Cluster" => "postgresql.cnpg.io/v1",
        _ => "v1",
    }
}

fn resource_of(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "Ingress" => "ingresses".to_string(),
        "NetworkPolicy" => "networkpolicies".to_string(),
        other => format!("{}s", other.to_lowercase()),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural)
}

/// A condition of the status: (status, reason, message).
pub fn condition(engine: &AgentFlowEngine, type_: &str) -> (String, String, String) {
    let status = engine.status.clone().unwrap_or_default();
    let c = afe_operator::status::find(&status, type_)
        .unwrap_or_else(|| panic!("no condition {type_} in {status:?}"));
    let text = |t: &Option<String>| t.clone().unwrap_or_default();
    (c.status.clone(), text(&c.reason), text(&c.message))
}
