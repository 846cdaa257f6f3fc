//! One reconcile of an `AgentFlowEngine`, the six steps of seed 003: (1) the configuration read
//! and validated, (2) the data services, (3) the processes, (4) their scaling — all built by
//! [`crate::build`] and applied here by server-side apply under one field manager, never over an
//! object that is not the operator's — (5) the reaper's sweep of the sandbox namespace, and (6)
//! the status. The decisions are pure ([`crate::configuration`], [`crate::converge`],
//! [`crate::status`]); this module only reads and writes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use afe_config::engine::{AgentFlowEngine, EngineComponent};
use afe_config::kinds::{Agent, Flow, Plugin, SchemaResource};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;

use crate::build::{self, Inputs, Target};
use crate::configuration::{self, Validation};
use crate::converge::{Holder, covers, holder, stamped};
use crate::discovery;
use crate::reaper;
use crate::status::{self, Findings};

/// The one field manager of everything the operator applies.
pub const FIELD_MANAGER: &str = "afe-operator";

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// Milliseconds since the epoch (tests set the time the reaper judges at).
    pub clock: Arc<dyn Fn() -> i64 + Send + Sync>,
    /// How soon a reconcile that went well runs again (the reaper's sweep, the status).
    pub requeue: Duration,
    /// Consecutive failures per resource, for the backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("requeue", &self.requeue)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(
        client: Client,
        recorder: Recorder,
        clock: Arc<dyn Fn() -> i64 + Send + Sync>,
        requeue: Duration,
    ) -> Context {
        Context {
            client,
            recorder,
            clock,
            requeue,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

/// Why a reconcile stopped; it is tried again with a backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(
        "AFE-OPR-002 the operator is not allowed to {operation}: {detail}; apply deploy/operator (its Roles list what it needs, docs/afe-operator.md explains each)"
    )]
    Forbidden { operation: String, detail: String },
    #[error(
        "AFE-OPR-003 the API server failed to {operation}: {detail}; the operator tries again with a backoff"
    )]
    Api { operation: String, detail: String },
    #[error(transparent)]
    Reap(#[from] reaper::ReapError),
}

fn failed(operation: impl Into<String>) -> impl FnOnce(kube::Error) -> ReconcileError {
    let operation = operation.into();
    move |err| match &err {
        kube::Error::Api(status) if status.code == 403 => ReconcileError::Forbidden {
            operation,
            detail: status.message.clone(),
        },
        _ => ReconcileError::Api {
            operation,
            detail: err.to_string(),
        },
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// The plural of a kind the operator applies (every one of them is regular but these two).
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// The API of an object's kind in its namespace.
fn api_of(client: &Client, object: &Value) -> (Api<DynamicObject>, String) {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        &plural(kind),
    );
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    (
        Api::namespaced_with(client.clone(), namespace, &resource),
        format!("{kind}/{name}"),
    )
}

/// What applying one object came to.
enum Applied {
    /// The object as the server holds it now (written or already as wanted).
    Live(Value),
    /// Not the operator's: left alone, and why.
    Foreign(String),
}

async fn get(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
) -> Result<Option<Value>, ReconcileError> {
    match api.get(name).await {
        Ok(object) => Ok(Some(
            serde_json::to_value(object).expect("objects serialize"),
        )),
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(failed(format!("read {what}"))(err)),
    }
}

/// Applies `desired` unless the server already holds it, or it is someone else's.
async fn converge(
    client: &Client,
    desired: &Value,
    inputs: &Inputs<'_>,
) -> Result<Applied, ReconcileError> {
    let (api, what) = api_of(client, desired);
    let name = desired["metadata"]["name"].as_str().unwrap_or_default();
    let same_namespace = desired["metadata"]["namespace"].as_str() == Some(inputs.namespace());
    if let Some(live) = get(&api, name, &what).await? {
        let uid = inputs.engine.metadata.uid.as_deref().unwrap_or_default();
        if let Holder::Foreign(why) = holder(&live, uid, inputs.name(), same_namespace) {
            return Ok(Applied::Foreign(format!("{what}: {why}")));
        }
        if covers(&live, desired) {
            return Ok(Applied::Live(live));
        }
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api
        .patch(name, &params, &Patch::Apply(desired))
        .await
        .map_err(failed(format!("apply {what}")))?;
    tracing::info!(object = %what, "applied");
    Ok(Applied::Live(
        serde_json::to_value(written).expect("objects serialize"),
    ))
}

/// Objects the operator may have made for this resource and no longer wants (the Ingress after
/// `deployment.ingress` is removed, ...): deleted when they are its own, left alone otherwise.
async fn prune(
    client: &Client,
    desired: &[Value],
    inputs: &Inputs<'_>,
) -> Result<(), ReconcileError> {
    for target in build::optional(inputs) {
        let wanted = desired.iter().any(|d| {
            d["kind"] == target.kind
                && d["metadata"]["name"] == target.name.as_str()
                && d["metadata"]["namespace"] == target.namespace.as_str()
        });
        if wanted {
            continue;
        }
        let Target {
            api_version,
            kind,
            name,
            namespace,
        } = target;
        let object = serde_json::json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
        });
        let (api, what) = api_of(client, &object);
        let Some(live) = get(&api, &name, &what).await? else {
            continue;
        };
        let uid = inputs.engine.metadata.uid.as_deref().unwrap_or_default();
        if holder(&live, uid, inputs.name(), namespace == inputs.namespace()) == Holder::Ours {
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => tracing::info!(object = %what, "removed: no longer asked for"),
                Err(err) if is_not_found(&err) => {}
                Err(err) => return Err(failed(format!("delete {what}"))(err)),
            }
        }
    }
    Ok(())
}

/// Step 1's reading: the afe custom resources of the namespace and the source ConfigMap's keys.
async fn read_source(
    client: &Client,
    engine: &AgentFlowEngine,
) -> Result<(Vec<Value>, Option<BTreeMap<String, String>>), ReconcileError> {
    let namespace = engine.namespace().unwrap_or_default();
    let mut objects = Vec::new();
    for resource in [
        ApiResource::erase::<SchemaResource>(&()),
        ApiResource::erase::<Agent>(&()),
        ApiResource::erase::<Flow>(&()),
        ApiResource::erase::<Plugin>(&()),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
        let listed = api
            .list(&Default::default())
            .await
            .map_err(failed(format!("list the {}", resource.plural)))?;
        for mut object in listed.items {
            // A listed item carries no type; the config reads it by its kind.
            object.types = Some(kube::core::TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            });
            objects.push(serde_json::to_value(object).expect("objects serialize"));
        }
    }
    let name = &engine.spec.config.config_map_ref.name;
    let source = match Api::<ConfigMap>::namespaced(client.clone(), &namespace)
        .get(name)
        .await
    {
        Ok(map) => Some(map.data.unwrap_or_default()),
        Err(err) if is_not_found(&err) => None,
        Err(err) => return Err(failed(format!("read ConfigMap {name}"))(err)),
    };
    Ok((objects, source))
}

fn reference(object: &Value) -> ObjectReference {
    ObjectReference {
        api_version: object["apiVersion"].as_str().map(str::to_string),
        kind: object["kind"].as_str().map(str::to_string),
        name: object["metadata"]["name"].as_str().map(str::to_string),
        namespace: object["metadata"]["namespace"].as_str().map(str::to_string),
        ..Default::default()
    }
}

/// Steps 2 to 4: every object asked for, applied unless the server holds it already or it is not
/// the operator's (each such one named in an Event), and what is no longer asked for removed.
/// The objects left alone, and the processes as they stand.
async fn apply_all(
    ctx: &Context,
    engine: &AgentFlowEngine,
    inputs: &Inputs<'_>,
) -> Result<(Vec<String>, Vec<EngineComponent>), ReconcileError> {
    let desired: Vec<Value> = build::desired(inputs).into_iter().map(stamped).collect();
    let (mut conflicts, mut components) = (Vec::new(), Vec::new());
    for object in &desired {
        match converge(&ctx.client, object, inputs).await? {
            Applied::Foreign(why) => {
                conflict_event(ctx, engine, object, &why).await;
                conflicts.push(why);
            }
            Applied::Live(live) => {
                if matches!(live["kind"].as_str(), Some("Deployment" | "StatefulSet")) {
                    let component = live["metadata"]["labels"]["app.kubernetes.io/component"]
                        .as_str()
                        .unwrap_or_default();
                    components.push(status::component(component, &live));
                }
            }
        }
    }
    prune(&ctx.client, &desired, inputs).await?;
    Ok((conflicts, components))
}

/// A Warning Event on the resource naming an object it left alone (`related`: the object).
async fn conflict_event(ctx: &Context, engine: &AgentFlowEngine, object: &Value, why: &str) {
    tracing::warn!(engine = %engine.name_any(), conflict = %why, "left alone: not the operator's");
    let event = Event {
        type_: EventType::Warning,
        reason: "ResourceConflict".to_string(),
        note: Some(format!(
            "{why}: the operator does not adopt objects; delete or rename it to let the operator make its own"
        )),
        action: "Apply".to_string(),
        secondary: Some(reference(object)),
    };
    if let Err(err) = ctx.recorder.publish(&event, &engine.object_ref(&())).await {
        tracing::warn!(error = %err, "the ResourceConflict event was not recorded");
    }
}

/// One reconcile of `engine`: the six steps.
pub async fn reconcile(
    engine: Arc<AgentFlowEngine>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let client = &ctx.client;
    let name = engine.name_any();
    // (1) the configuration.
    let (objects, source) = read_source(client, &engine).await?;
    let mut validation = configuration::validate(&engine, &objects, source.as_ref());
    let grace = configuration::orphan_grace(&engine);
    if let (Err(problem), Validation::Valid { .. }) = (&grace, &validation) {
        validation = Validation::Invalid {
            problems: vec![problem.clone()],
        };
    }
    let facts = discovery::facts(client).await?;
    let pin = engine.spec.config.revision.as_deref();
    // (2)-(4) the data services, the processes, their scaling; only a revision that may roll.
    // Otherwise what runs is left as it was, and so is what the status says of it.
    let (conflicts, components) = match &validation {
        Validation::Valid { revision, files } if status::rolls(&validation, pin) => {
            let inputs = Inputs {
                engine: &engine,
                revision,
                files,
                keda: facts.keda,
                cloudnative_pg: facts.cloudnative_pg,
            };
            apply_all(&ctx, &engine, &inputs).await?
        }
        _ => (
            Vec::new(),
            engine
                .status
                .as_ref()
                .map(|s| s.components.clone())
                .unwrap_or_default(),
        ),
    };
    // (5) the reaper.
    let now_ms = (ctx.clock)();
    let removed = match grace {
        Ok(grace) => {
            let judged =
                reaper::sweep(client, &engine.spec.afe.sandbox.namespace, now_ms, grace).await?;
            reaper::removed(&judged)
        }
        Err(_) => 0,
    };
    // (6) the status.
    let findings = Findings {
        engine: &engine,
        validation: &validation,
        scaling: build::scaling(&engine, facts.keda),
        cloudnative_pg: facts.cloudnative_pg,
        conflicts,
        components: sorted(components),
        orphans_removed: removed,
        now: rfc3339(now_ms),
    };
    let next = status::status(&findings);
    if engine.status.as_ref() != Some(&next) {
        Api::<AgentFlowEngine>::namespaced(client.clone(), &engine.namespace().unwrap_or_default())
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(status::merge_patch(&next)),
            )
            .await
            .map_err(failed(format!(
                "write the status of AgentFlowEngine {name}"
            )))?;
    }
    ctx.failures.lock().expect("not poisoned").remove(&name);
    Ok(Action::requeue(ctx.requeue))
}

fn sorted(mut components: Vec<EngineComponent>) -> Vec<EngineComponent> {
    components.sort_by(|a, b| a.name.cmp(&b.name));
    components
}

fn rfc3339(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// The backoff after a failed reconcile: 5 s, doubled with each failure in a row, at most 5 min.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(5u64.saturating_mul(1 << failures.min(6)).min(300))
}

/// The controller's error policy: log it, and try again after [`backoff`].
pub fn error_policy(
    engine: Arc<AgentFlowEngine>,
    err: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    let name = engine.name_any();
    let mut failures = ctx.failures.lock().expect("not poisoned");
    let count = failures.entry(name.clone()).or_insert(0);
    let wait = backoff(*count);
    *count = count.saturating_add(1);
    tracing::error!(engine = %name, error = %err, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_of_the_applied_kinds() {
        for (kind, plural_) in [
            ("ConfigMap", "configmaps"),
            ("Deployment", "deployments"),
            ("Service", "services"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("StatefulSet", "statefulsets"),
            ("ScaledObject", "scaledobjects"),
            ("Cluster", "clusters"),
        ] {
            assert_eq!(plural(kind), plural_);
        }
    }

    #[test]
    fn the_backoff_doubles_and_stops_at_five_minutes() {
        assert_eq!(backoff(0), Duration::from_secs(5));
        assert_eq!(backoff(1), Duration::from_secs(10));
        assert_eq!(backoff(10), Duration::from_secs(300));
    }

    #[test]
    fn times_are_written_as_kubernetes_writes_them() {
        assert_eq!(rfc3339(1_800_000_000_000), "2027-01-15T08:00:00Z");
    }
}
