//! A fake Kubernetes API server that answers as a real one does where af's apply logic depends on
//! it (TESTING.md: "fakes answer like the real thing where it matters"). A fake that echoes every
//! write proves only that the code agrees with itself; the Kubernetes runtime met a real cluster
//! and failed in six ways such a fake had passed (issue 28). So this one:
//!
//! - keeps objects and answers server-side apply, get, list (by label), delete; refuses a change
//!   to a Job's pod template (422, `field is immutable`), as every real API server does;
//! - fills what the server fills: uid, resourceVersion, creationTimestamp, the defaults of
//!   Deployments, Jobs, pods and Services, a distinct ClusterIP per Service, and resource
//!   quantities in their canonical form (`0.5` comes back `500m`);
//! - runs the controllers af waits on: a Deployment's ReplicaSet makes its pods, a Job makes its
//!   pod, and each pod's fate is the test's script (ready; rejected by the kubelet, as
//!   SysctlForbidden, with the ReplicaSet making a new one each time it is looked at; an image that
//!   cannot be pulled; unschedulable; crash-looping; its gate or its netlock step failing, shown
//!   as a kubelet shows an init container it restarts — waiting in CrashLoopBackOff with the
//!   failure in `lastState` — for pods that restart; a Job's pod failing);
//! - admits pods as Pod Security Admission does, as far as af's pods test it: in a namespace
//!   enforcing `baseline` or `restricted`, a pod whose containers add a capability outside
//!   baseline's list is refused (403 for a pod made directly, the ReplicaSet's `FailedCreate`
//!   condition for a Deployment's), with the real server's message;
//! - deletes a namespace the way a cluster does: Terminating for a while, refusing new objects in
//!   it, then gone with everything in it;
//! - answers `/version` with the server version the test sets, and lists nodes and every pod on
//!   them for the fit check.
#![allow(dead_code)] // each test binary uses its own part

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

/// Where a pod came from: its namespace and the object that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub namespace: String,
    /// `Deployment`, `Job` or `Pod` (made directly, as the probe is).
    pub kind: &'static str,
    pub name: String,
}

/// What happens to a pod once it exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Runs and becomes ready (a Job's pod: completes).
    Healthy,
    /// A Job's pod that exits 1, having written `log`.
    JobFails { log: String },
    /// The kubelet rejects it (`SysctlForbidden`, say): phase Failed with that reason. The
    /// ReplicaSet replaces it, again and again, as a real one does.
    Rejected { reason: String, message: String },
    /// Its image cannot be pulled.
    ImagePull,
    /// The scheduler cannot place it.
    Unschedulable { message: String },
    /// Its container keeps exiting, having written `log`.
    CrashLoop { log: String },
    /// Its startup gate (the `af-gate` init container) exits 43, having written `log`.
    GateRefused { log: String },
    /// Its netlock step (the `af-netlock` init container) exits 51, having written `log`.
    NetlockFails { log: String },
    /// Runs and never answers its readiness probe: nothing says it will not get there.
    NeverReady,
    /// Admission refuses to create it (a policy webhook): no pod at all. A Deployment's
    /// ReplicaSet says why in its `ReplicaFailure` condition; a pod made directly is answered
    /// 403. (Not a Job's: a Job says it in events alone.)
    Forbidden { message: String },
}

/// The test's script: each new pod's fate, from where it came and what the cluster holds now.
pub type Script = Box<dyn Fn(&Origin, &State) -> Fate + Send>;

pub struct State {
    objects: BTreeMap<String, Value>,
    /// Every write af made, as `METHOD collection name`, in order.
    pub writes: Vec<String>,
    /// Allocatable `(cpu, memory)` of each node.
    pub nodes: Vec<(&'static str, &'static str)>,
    /// The images every node reports having.
    pub node_images: Vec<String>,
    /// The server's `gitVersion`.
    pub version: String,
    /// Whether the probe reports an escaped route.
    pub probe_escapes: bool,
    /// How many reads a deleted namespace stays Terminating for.
    pub terminating_reads: u32,
    /// Objects (`namespace/collection/name`) whose reads fail as an overloaded server's do: 500.
    pub failing_reads: Vec<String>,
    pub script: Script,
    next_ip: u32,
    next_uid: u64,
    /// Pods made by a ReplicaSet whose pods are rejected: it keeps making new ones.
    churned: u32,
}

impl Default for State {
    fn default() -> State {
        State {
            objects: BTreeMap::new(),
            writes: Vec::new(),
            nodes: vec![("16", "32Gi")],
            node_images: Vec::new(),
            version: "v1.30.2".into(),
            probe_escapes: false,
            terminating_reads: 0,
            failing_reads: Vec::new(),
            script: Box::new(|_, _| Fate::Healthy),
            next_ip: 10,
            next_uid: 1,
            churned: 0,
        }
    }
}

impl State {
    /// The object at `collection/name` (`af-shop-main/deployments/web`, `namespaces/af-shop-main`).
    pub fn object(&self, key: &str) -> Option<&Value> {
        self.objects.get(key)
    }

    pub fn insert(&mut self, key: &str, object: Value) {
        self.objects.insert(key.to_string(), object);
    }

    /// The pods of `namespace`, in the order they were made.
    pub fn pods(&self, namespace: &str) -> Vec<&Value> {
        let prefix = format!("{namespace}/pods/");
        let mut pods: Vec<&Value> = self
            .objects
            .iter()
            .filter(|(key, _)| key.starts_with(&prefix) && !key[prefix.len()..].contains('/'))
            .map(|(_, pod)| pod)
            .collect();
        pods.sort_by_key(|p| {
            p["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        });
        pods
    }

    /// Whether every replica of Deployment `name` in `namespace` is ready.
    pub fn deployment_ready(&self, namespace: &str, name: &str) -> bool {
        let Some(deployment) = self.objects.get(&format!("{namespace}/deployments/{name}")) else {
            return false;
        };
        let wanted = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
        ready_pods(self, namespace, "Deployment", name) >= wanted
    }

    fn uid(&mut self) -> String {
        self.next_uid += 1;
        format!("uid-{:06}", self.next_uid)
    }
}

pub type Shared = Arc<Mutex<State>>;

/// A client whose API server is `state`.
pub fn serve(state: Shared) -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, respond)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default().to_string();
            let body = request.into_body().collect_bytes().await.unwrap();
            let (status, value) = answer(&mut state.lock().unwrap(), &method, &path, &query, &body);
            respond.send_response(crate::api::response(status, value));
        }
    });
    kube::Client::new(service, "default")
}

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

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
}

pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
        "code": code, "message": message})
}

/// Whether `object` carries every `key=value` of a list's `labelSelector` (as kube encodes it).
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

fn answer(state: &mut State, method: &str, path: &str, query: &str, body: &[u8]) -> (u16, Value) {
    if path == "/version" {
        let minor = state.version.split('.').nth(1).unwrap_or("0").to_string();
        return (
            200,
            json!({"major": "1", "minor": minor, "gitVersion": state.version,
                "gitCommit": "0", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.22", "compiler": "gc", "platform": "linux/amd64"}),
        );
    }
    let (collection, name, sub) = parts(path);
    let namespace = collection.split_once('/').map(|(ns, _)| ns.to_string());
    if let Some(ns) = &namespace {
        settle_namespace(state, ns);
    }
    match (method, name.as_deref(), sub.as_deref()) {
        ("GET", None, _) if collection == "nodes" => {
            let images = state.node_images.clone();
            let nodes = state
                .nodes
                .iter()
                .enumerate()
                .map(|(i, (cpu, memory))| {
                    json!({"metadata": {"name": format!("node-{i}")}, "spec": {},
                        "status": {"allocatable": {"cpu": cpu, "memory": memory},
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "images": [{"names": images}]}})
                })
                .collect();
            (200, list(nodes))
        }
        ("GET", None, _) if collection == "pods" => {
            let items = state
                .objects
                .iter()
                .filter(|(key, _)| {
                    key.split('/').nth(1) == Some("pods") && key.split('/').count() == 3
                })
                .map(|(_, pod)| pod.clone())
                .collect();
            (200, list(items))
        }
        ("GET", None, _) => {
            if collection.ends_with("/pods") {
                churn(state, namespace.as_deref().unwrap_or_default());
            }
            refresh_statuses(state, namespace.as_deref().unwrap_or_default());
            let prefix = format!("{collection}/");
            let items = state
                .objects
                .iter()
                .filter(|(key, object)| {
                    key.starts_with(&prefix)
                        && !key[prefix.len()..].contains('/')
                        && selected(object, query)
                })
                .map(|(_, object)| object.clone())
                .collect();
            (200, list(items))
        }
        ("GET", Some(name), Some("log")) => {
            let key = format!("{collection}/{name}");
            let log = state
                .objects
                .get(&format!("{key}/log"))
                .and_then(|l| l.as_str())
                .unwrap_or_default()
                .to_string();
            (200, Value::String(log))
        }
        ("GET", Some(name), _)
            if state
                .failing_reads
                .contains(&format!("{collection}/{name}")) =>
        {
            (
                500,
                status(500, "InternalError", "etcdserver: request timed out"),
            )
        }
        ("GET", Some(name), _) => {
            if collection == "namespaces" {
                settle_namespace(state, name);
            } else {
                refresh_statuses(state, namespace.as_deref().unwrap_or_default());
            }
            match state.objects.get(&format!("{collection}/{name}")) {
                Some(object) => (200, object.clone()),
                None => not_found(&collection, name),
            }
        }
        ("POST", None, _) | ("PATCH", Some(_), _) => {
            let object: Value = serde_json::from_slice(body).unwrap();
            let name = name.unwrap_or_else(|| {
                object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            });
            if let Some(refusal) = terminating_refusal(state, namespace.as_deref()) {
                return refusal;
            }
            if collection.ends_with("/pods")
                && let Some(message) =
                    admission_refusal(state, namespace.as_deref(), &name, &object)
            {
                return (403, status(403, "Forbidden", &message));
            }
            let key = format!("{collection}/{name}");
            if method == "POST" && state.objects.contains_key(&key) {
                return (
                    409,
                    status(409, "AlreadyExists", &format!("{name} already exists")),
                );
            }
            if let Some(refusal) = immutable_template(state, &collection, &key, &object) {
                return refusal;
            }
            state.writes.push(format!("{method} {collection} {name}"));
            let stored = store(state, &collection, &name, object);
            let code = if method == "POST" { 201 } else { 200 };
            (code, stored)
        }
        ("DELETE", Some(name), _) => {
            let key = format!("{collection}/{name}");
            if !state.objects.contains_key(&key) {
                return not_found(&collection, name);
            }
            state.writes.push(format!("DELETE {collection} {name}"));
            if collection == "namespaces" {
                let object = state.objects.get_mut(&key).unwrap();
                object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                object["status"]["phase"] = json!("Terminating");
                let object = object.clone();
                settle_namespace(state, name);
                return (200, object);
            }
            let object = state.objects.remove(&key).unwrap();
            state.objects.remove(&format!("{key}/log"));
            if collection.ends_with("/deployments") || collection.ends_with("/jobs") {
                let kind = if collection.ends_with("/jobs") {
                    "Job"
                } else {
                    "Deployment"
                };
                remove_pods_of(state, namespace.as_deref().unwrap_or_default(), kind, name);
            }
            (200, object)
        }
        other => panic!("the fake API server does not know {other:?} {path}"),
    }
}

/// A Job's pod template cannot change once the Job exists: a real API server answers 422
/// (`spec.template: ... field is immutable`), whatever changed in it.
fn immutable_template(
    state: &State,
    collection: &str,
    key: &str,
    object: &Value,
) -> Option<(u16, Value)> {
    if !collection.ends_with("/jobs") {
        return None;
    }
    let current = state.objects.get(key)?;
    let mut sent = object["spec"]["template"].clone();
    pod_defaults(&mut sent["spec"]);
    let mut kept = current["spec"]["template"].clone();
    if let Some(labels) = kept["metadata"]["labels"].as_object_mut() {
        labels.remove("job-name");
        labels.remove("controller-uid");
    }
    (sent != kept).then(|| {
        let name = current["metadata"]["name"].as_str().unwrap_or_default();
        (
            422,
            status(
                422,
                "Invalid",
                &format!(
                    "Job.batch \"{name}\" is invalid: spec.template: Invalid value: core.PodTemplateSpec{{...}}: field is immutable"
                ),
            ),
        )
    })
}

fn not_found(collection: &str, name: &str) -> (u16, Value) {
    let resource = collection.rsplit('/').next().unwrap_or_default();
    (
        404,
        status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
    )
}

/// Admission's answer to a pod made directly: Pod Security first, then the test's script (a
/// policy webhook). Its message when refused.
fn admission_refusal(
    state: &State,
    namespace: Option<&str>,
    name: &str,
    pod: &Value,
) -> Option<String> {
    let namespace = namespace?;
    if let Some(message) = pod_security_refusal(state, namespace, name, &pod["spec"]) {
        return Some(message);
    }
    let origin = Origin {
        namespace: namespace.to_string(),
        kind: "Pod",
        name: name.to_string(),
    };
    match (state.script)(&origin, state) {
        Fate::Forbidden { message } => Some(message),
        _ => None,
    }
}

/// A namespace being deleted takes nothing new, as a real one refuses it.
fn terminating_refusal(state: &State, namespace: Option<&str>) -> Option<(u16, Value)> {
    let namespace = namespace?;
    let object = state.objects.get(&format!("namespaces/{namespace}"))?;
    (object["status"]["phase"] == "Terminating").then(|| {
        (
            403,
            status(
                403,
                "Forbidden",
                &format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            ),
        )
    })
}

/// Counts a read of a Terminating namespace; after `terminating_reads` of them it is gone, with
/// everything in it.
fn settle_namespace(state: &mut State, name: &str) {
    let key = format!("namespaces/{name}");
    let terminating = state
        .objects
        .get(&key)
        .is_some_and(|n| n["status"]["phase"] == "Terminating");
    if !terminating {
        return;
    }
    if state.terminating_reads > 0 {
        state.terminating_reads -= 1;
        return;
    }
    state.objects.remove(&key);
    let prefix = format!("{name}/");
    state.objects.retain(|key, _| !key.starts_with(&prefix));
}

/// Stores `object` as the server would have it, runs the controller its kind has, and returns it.
fn store(state: &mut State, collection: &str, name: &str, mut object: Value) -> Value {
    let key = format!("{collection}/{name}");
    let resource = collection
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let namespace = collection
        .split_once('/')
        .map(|(ns, _)| ns.to_string())
        .unwrap_or_default();
    let previous = state.objects.get(&key).cloned();
    let uid = previous
        .as_ref()
        .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .unwrap_or_else(|| state.uid());
    object["metadata"]["uid"] = json!(uid);
    object["metadata"]["resourceVersion"] = json!(state.next_uid.to_string());
    object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    if !namespace.is_empty() {
        object["metadata"]["namespace"] = json!(namespace);
    }
    match resource.as_str() {
        "namespaces" => object["status"] = json!({"phase": "Active"}),
        "services" => {
            let ip = previous
                .as_ref()
                .and_then(|p| p["spec"]["clusterIP"].as_str().map(str::to_string))
                .unwrap_or_else(|| {
                    state.next_ip += 1;
                    format!("10.43.0.{}", state.next_ip)
                });
            let spec = &mut object["spec"];
            spec["clusterIP"] = json!(ip);
            spec["clusterIPs"] = json!([ip]);
            default(spec, "type", json!("ClusterIP"));
            default(spec, "sessionAffinity", json!("None"));
            default(spec, "ipFamilies", json!(["IPv4"]));
            default(spec, "ipFamilyPolicy", json!("SingleStack"));
            for port in spec["ports"].as_array_mut().into_iter().flatten() {
                default(port, "protocol", json!("TCP"));
                let number = port["port"].clone();
                default(port, "targetPort", number);
            }
        }
        "deployments" => {
            // The generation counts the changes of its spec, as the API server counts them.
            let generation = previous.as_ref().map_or(1, |p| {
                let before = p["metadata"]["generation"].as_i64().unwrap_or(1);
                if p["spec"]["template"] == object["spec"]["template"]
                    && p["spec"]["replicas"] == object["spec"]["replicas"]
                {
                    before
                } else {
                    before + 1
                }
            });
            object["metadata"]["generation"] = json!(generation);
            let spec = &mut object["spec"];
            default(spec, "replicas", json!(1));
            default(spec, "revisionHistoryLimit", json!(10));
            default(spec, "progressDeadlineSeconds", json!(600));
            default(
                spec,
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
            pod_defaults(&mut spec["template"]["spec"]);
        }
        "jobs" => {
            let spec = &mut object["spec"];
            default(spec, "completions", json!(1));
            default(spec, "parallelism", json!(1));
            default(spec, "completionMode", json!("NonIndexed"));
            spec["template"]["metadata"]["labels"]["job-name"] = json!(name);
            spec["template"]["metadata"]["labels"]["controller-uid"] = json!(uid);
            pod_defaults(&mut spec["template"]["spec"]);
        }
        "pods" => pod_defaults(&mut object["spec"]),
        _ => {}
    }
    state.objects.insert(key.clone(), object);
    match resource.as_str() {
        "deployments" => reconcile_deployment(state, &namespace, name, previous.as_ref()),
        "jobs" if previous.is_none() => start_job(state, &namespace, name),
        "pods" => start_pod(state, &namespace, name),
        _ => {}
    }
    refresh_statuses(state, &namespace);
    state.objects[&key].clone()
}

fn default(object: &mut Value, field: &str, value: Value) {
    if object.get(field).is_none_or(Value::is_null) {
        object[field] = value;
    }
}

/// What the API server fills into every pod spec.
fn pod_defaults(spec: &mut Value) {
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "securityContext", json!({}));
    for list in ["initContainers", "containers"] {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            default(
                container,
                "terminationMessagePath",
                json!("/dev/termination-log"),
            );
            default(container, "terminationMessagePolicy", json!("File"));
            let image = container["image"].as_str().unwrap_or_default();
            let tag = image.rsplit('/').next().unwrap_or_default();
            let policy = if !tag.contains(':') || tag.ends_with(":latest") {
                "Always"
            } else {
                "IfNotPresent"
            };
            default(container, "imagePullPolicy", json!(policy));
            for side in ["requests", "limits"] {
                let figures = &mut container["resources"][side];
                if let Some(figures) = figures.as_object_mut() {
                    for value in figures.values_mut() {
                        *value = json!(canonical(value.as_str().unwrap_or_default()));
                    }
                }
            }
        }
    }
}

/// A quantity as the API server returns it. Written independently of af's own canonical form,
/// as facts read off a real server: known rewrites, and anything else must already be canonical
/// (a whole number with the largest suffix that keeps it whole), or this fake says it does not
/// know the server's answer.
fn canonical(sent: &str) -> String {
    const REWRITES: &[(&str, &str)] = &[
        ("0.5", "500m"),
        ("0.25", "250m"),
        ("0.1", "100m"),
        ("1000m", "1"),
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
    ];
    if let Some((_, returned)) = REWRITES.iter().find(|(s, _)| *s == sent) {
        return returned.to_string();
    }
    let digits: String = sent.chars().take_while(char::is_ascii_digit).collect();
    let suffix = &sent[digits.len()..];
    let number: u64 = digits.parse().unwrap_or(0);
    let whole_in_its_suffix = !digits.starts_with('0')
        && number > 0
        && match suffix {
            "Ki" | "Mi" | "Gi" | "Ti" => !number.is_multiple_of(1024),
            "m" | "" | "k" | "M" | "G" | "T" => !number.is_multiple_of(1000),
            _ => false,
        };
    assert!(
        whole_in_its_suffix,
        "the fake does not know what the API server returns for the quantity {sent:?}; add it"
    );
    sent.to_string()
}

/// The pods of `kind` `name` (their owner) in `namespace`.
fn pods_of<'a>(
    state: &'a State,
    namespace: &str,
    kind: &str,
    name: &str,
) -> impl Iterator<Item = (&'a String, &'a Value)> {
    let prefix = format!("{namespace}/pods/");
    let (kind, name) = (kind.to_string(), name.to_string());
    state.objects.iter().filter(move |(key, pod)| {
        key.starts_with(&prefix)
            && !key[prefix.len()..].contains('/')
            && pod["metadata"]["ownerReferences"][0]["kind"] == kind.as_str()
            && pod["metadata"]["ownerReferences"][0]["name"] == name.as_str()
    })
}

fn ready_pods(state: &State, namespace: &str, kind: &str, name: &str) -> i64 {
    let ready = pods_of(state, namespace, kind, name)
        .filter(|(_, pod)| {
            pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .count();
    i64::try_from(ready).unwrap()
}

fn remove_pods_of(state: &mut State, namespace: &str, kind: &str, name: &str) {
    let keys: Vec<String> = pods_of(state, namespace, kind, name)
        .map(|(key, _)| key.clone())
        .collect();
    for key in keys {
        state.objects.remove(&format!("{key}/log"));
        state.objects.remove(&key);
    }
}

/// The Deployment controller: a new pod template replaces every pod; missing replicas are made.
fn reconcile_deployment(state: &mut State, namespace: &str, name: &str, previous: Option<&Value>) {
    let deployment = state.objects[&format!("{namespace}/deployments/{name}")].clone();
    let template = deployment["spec"]["template"].clone();
    if previous.is_some_and(|p| p["spec"]["template"] != template) {
        remove_pods_of(state, namespace, "Deployment", name);
    }
    let wanted = usize::try_from(deployment["spec"]["replicas"].as_i64().unwrap_or(1)).unwrap();
    let origin = Origin {
        namespace: namespace.to_string(),
        kind: "Deployment",
        name: name.to_string(),
    };
    let fate = match pod_security_refusal(
        state,
        namespace,
        &format!("{name}-6d4cf56db6-x2v9k"),
        &template["spec"],
    ) {
        Some(message) => Fate::Forbidden { message },
        None => (state.script)(&origin, state),
    };
    if let Fate::Forbidden { message } = &fate {
        replica_set(state, namespace, name, Some(message));
        return;
    }
    replica_set(state, namespace, name, None);
    let have = pods_of(state, namespace, "Deployment", name).count();
    for _ in have..wanted {
        make_pod(state, &origin, &template, fate.clone());
    }
}

/// The ReplicaSet af reads when a Deployment has too few pods: with the condition a refused
/// creation leaves.
fn replica_set(state: &mut State, namespace: &str, deployment: &str, refused: Option<&String>) {
    let labels = state.objects[&format!("{namespace}/deployments/{deployment}")]["spec"]
        ["template"]["metadata"]["labels"]
        .clone();
    let conditions = match refused {
        Some(message) => json!([{"type": "ReplicaFailure", "status": "True",
            "reason": "FailedCreate", "message": message}]),
        None => json!([]),
    };
    let name = format!("{deployment}-6d4cf56db6");
    state.objects.insert(
        format!("{namespace}/replicasets/{name}"),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "status": {"replicas": 0, "conditions": conditions}}),
    );
}

/// The Job controller: one pod, whose fate says how the Job ends.
fn start_job(state: &mut State, namespace: &str, name: &str) {
    let job = state.objects[&format!("{namespace}/jobs/{name}")].clone();
    let origin = Origin {
        namespace: namespace.to_string(),
        kind: "Job",
        name: name.to_string(),
    };
    let fate = (state.script)(&origin, state);
    // A real Job controller says a refused pod only in events, and keeps trying: not modelled.
    assert!(
        !matches!(fate, Fate::Forbidden { .. })
            && pod_security_refusal(state, namespace, name, &job["spec"]["template"]["spec"])
                .is_none(),
        "the fake does not model a Job whose pods admission refuses"
    );
    make_pod(state, &origin, &job["spec"]["template"], fate);
}

/// A pod made directly (the probe): healthy, it finishes with the probe's verdict; otherwise its
/// fate's status.
fn start_pod(state: &mut State, namespace: &str, name: &str) {
    let key = format!("{namespace}/pods/{name}");
    if !state.objects[&key]["metadata"]["ownerReferences"].is_null() {
        return;
    }
    let origin = Origin {
        namespace: namespace.to_string(),
        kind: "Pod",
        name: name.to_string(),
    };
    let fate = (state.script)(&origin, state);
    let escaped = state.probe_escapes;
    let pod = state.objects.get_mut(&key).unwrap();
    let (status, log) = match fate {
        Fate::Healthy => {
            let container = pod["spec"]["containers"][0]["name"].clone();
            let exit = i32::from(escaped);
            let status = json!({"phase": if escaped {"Failed"} else {"Succeeded"},
                "containerStatuses": [{"name": container, "image": "x", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": exit}}}]});
            let outcome = if escaped { "escaped" } else { "denied" };
            let verdict = json!({"check": "probe", "contained": !escaped,
                "control": {"target": "tcp 10.43.0.11:3128", "reached": true, "detail": "the sidecar answered"},
                "routes": [{"route": "public-tcp", "target": "tcp 203.0.113.10:443", "outcome": outcome, "detail": ""}]});
            (status, verdict.to_string())
        }
        Fate::NetlockFails { log } => {
            let image = pod["spec"]["containers"][0]["image"].clone();
            (failed_init(&pod["spec"], "af-netlock", 51, &image), log)
        }
        other => panic!("the fake does not model a probe pod whose fate is {other:?}"),
    };
    pod["status"] = status;
    state.objects.insert(format!("{key}/log"), json!(log));
}

/// A pod whose init container `name` exited `exit_code`: one that restarts waits in
/// CrashLoopBackOff with the failure in `lastState` (what a real kubelet shows nearly all the
/// time); one that does not has failed, the failure in `state`.
fn failed_init(spec: &Value, name: &str, exit_code: i32, image: &Value) -> Value {
    let terminated = json!({"terminated": {"exitCode": exit_code, "reason": "Error"}});
    if spec["restartPolicy"] == "Never" {
        json!({"phase": "Failed", "initContainerStatuses": [{"name": name, "image": image,
            "imageID": "", "ready": false, "restartCount": 0, "state": terminated}]})
    } else {
        json!({"phase": "Pending", "initContainerStatuses": [{"name": name, "image": image,
            "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": terminated}]})
    }
}

/// Pod Security Admission's verdict on a pod spec in `namespace`, as far as af's pods test it:
/// under `baseline` (and `restricted`, which includes it), a container may add no capability
/// outside baseline's list. The real server's message, or none when admitted.
fn pod_security_refusal(state: &State, namespace: &str, pod: &str, spec: &Value) -> Option<String> {
    const BASELINE_CAPABILITIES: [&str; 13] = [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ];
    let level = state.objects.get(&format!("namespaces/{namespace}"))?["metadata"]["labels"]
        ["pod-security.kubernetes.io/enforce"]
        .as_str()
        .unwrap_or("privileged")
        .to_string();
    if level == "privileged" {
        return None;
    }
    let added: Vec<String> = ["initContainers", "containers"]
        .iter()
        .flat_map(|list| spec[*list].as_array().cloned().unwrap_or_default())
        .flat_map(|container| {
            let name = container["name"].as_str().unwrap_or_default().to_string();
            container["securityContext"]["capabilities"]["add"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| c.as_str().map(str::to_string))
                .filter(|c| !BASELINE_CAPABILITIES.contains(&c.as_str()))
                .map(move |c| format!("container \"{name}\" must not include \"{c}\" in securityContext.capabilities.add"))
        })
        .collect();
    (!added.is_empty()).then(|| {
        format!(
            "pods \"{pod}\" is forbidden: violates PodSecurity \"{level}:latest\": non-default capabilities ({})",
            added.join(", ")
        )
    })
}

fn make_pod(state: &mut State, origin: &Origin, template: &Value, fate: Fate) {
    let uid = state.uid();
    let name = format!("{}-{}", origin.name, &uid[4..]);
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": origin.namespace, "uid": uid,
            "labels": template["metadata"]["labels"].clone(),
            "ownerReferences": [{"kind": origin.kind, "name": origin.name}]},
        "spec": template["spec"].clone()});
    let containers: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect();
    let image = pod["spec"]["containers"][0]["image"].clone();
    let main = containers.first().cloned().unwrap_or_default();
    let waiting = |reason: &str| {
        json!([{"name": main, "image": image, "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": reason}}}])
    };
    let scheduled = !matches!(fate, Fate::Unschedulable { .. });
    if scheduled {
        pod["spec"]["nodeName"] = json!("node-0");
    }
    let (status, log) = match &fate {
        Fate::Healthy if origin.kind == "Job" => (
            json!({"phase": "Succeeded", "containerStatuses": [{"name": main, "image": image,
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0}}}]}),
            String::new(),
        ),
        Fate::Healthy => (
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": containers.iter().map(|c| json!({"name": c, "image": image,
                    "imageID": "", "ready": true, "restartCount": 0,
                    "state": {"running": {}}})).collect::<Vec<_>>()}),
            String::new(),
        ),
        Fate::JobFails { log } => (
            json!({"phase": "Failed", "containerStatuses": [{"name": main, "image": image,
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 1}}}]}),
            log.clone(),
        ),
        Fate::Rejected { reason, message } => (
            json!({"phase": "Failed", "reason": reason, "message": message}),
            String::new(),
        ),
        Fate::ImagePull => (
            json!({"phase": "Pending", "containerStatuses": waiting("ErrImagePull")}),
            String::new(),
        ),
        Fate::Unschedulable { message } => (
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": message}]}),
            String::new(),
        ),
        Fate::CrashLoop { log } => (
            json!({"phase": "Running", "containerStatuses": [{"name": main, "image": image,
                "imageID": "", "ready": false, "restartCount": 5,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 2}}}]}),
            log.clone(),
        ),
        Fate::GateRefused { log } => (
            failed_init(&pod["spec"], "af-gate", 43, &image),
            log.clone(),
        ),
        Fate::NetlockFails { log } => (
            failed_init(&pod["spec"], "af-netlock", 51, &image),
            log.clone(),
        ),
        Fate::NeverReady => (
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": containers.iter().map(|c| json!({"name": c, "image": image,
                    "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"running": {}}})).collect::<Vec<_>>()}),
            String::new(),
        ),
        Fate::Forbidden { .. } => unreachable!("no pod is made"),
    };
    pod["status"] = status;
    let key = format!("{}/pods/{name}", origin.namespace);
    state.objects.insert(format!("{key}/log"), json!(log));
    state.objects.insert(key, pod);
}

/// A ReplicaSet whose pods the kubelet rejects makes another each time: the churn a real cluster
/// shows (hundreds of pods while `up` waited). Bounded so a test that never stops stays small.
fn churn(state: &mut State, namespace: &str) {
    let rejected: Vec<(String, Value)> = state
        .pods(namespace)
        .into_iter()
        .filter(|p| p["status"]["phase"] == "Failed" && !p["status"]["reason"].is_null())
        .filter(|p| p["metadata"]["ownerReferences"][0]["kind"] == "Deployment")
        .map(|p| {
            (
                p["metadata"]["ownerReferences"][0]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                p.clone(),
            )
        })
        .collect();
    if state.churned > 500 {
        return;
    }
    for (deployment, pod) in rejected.into_iter().take(1) {
        state.churned += 1;
        let template =
            state.objects[&format!("{namespace}/deployments/{deployment}")]["spec"]["template"]
                .clone();
        let fate = Fate::Rejected {
            reason: pod["status"]["reason"].as_str().unwrap_or_default().into(),
            message: pod["status"]["message"].as_str().unwrap_or_default().into(),
        };
        let origin = Origin {
            namespace: namespace.to_string(),
            kind: "Deployment",
            name: deployment,
        };
        make_pod(state, &origin, &template, fate);
    }
}

/// Deployment and Job statuses, from their pods as they are now.
fn refresh_statuses(state: &mut State, namespace: &str) {
    let prefix = format!("{namespace}/deployments/");
    let deployments: Vec<String> = state
        .objects
        .keys()
        .filter(|k| k.starts_with(&prefix))
        .map(|k| k[prefix.len()..].to_string())
        .collect();
    for name in deployments {
        let ready = ready_pods(state, namespace, "Deployment", &name);
        let replicas =
            i64::try_from(pods_of(state, namespace, "Deployment", &name).count()).unwrap();
        let key = format!("{prefix}{name}");
        let deployment = state.objects.get_mut(&key).unwrap();
        // The fake rolls a changed template out at once: every pod it has is of the current one.
        let generation = deployment["metadata"]["generation"].clone();
        deployment["status"] = json!({"replicas": replicas, "readyReplicas": ready,
            "updatedReplicas": replicas, "observedGeneration": generation});
    }
    let prefix = format!("{namespace}/jobs/");
    let jobs: Vec<String> = state
        .objects
        .keys()
        .filter(|k| k.starts_with(&prefix))
        .map(|k| k[prefix.len()..].to_string())
        .collect();
    for name in jobs {
        let phases: Vec<String> = pods_of(state, namespace, "Job", &name)
            .map(|(_, p)| {
                p["status"]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        let key = format!("{prefix}{name}");
        let job = state.objects.get_mut(&key).unwrap();
        if phases.iter().any(|p| p == "Succeeded") {
            job["status"] = json!({"succeeded": 1});
        } else if phases.iter().any(|p| p == "Failed") {
            job["status"] = json!({"failed": 1});
        } else if job["status"].is_null() {
            job["status"] = json!({"active": 1});
        }
    }
}
