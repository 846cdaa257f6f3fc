//! The environment's namespace: the unit of ownership and of teardown. Only a namespace carrying
//! our label is ever reused or deleted; one with our name and without it is somebody else's, and
//! `up` and `down` refuse it (AF-RUN-045) — `up` because the first policy would cut off whatever
//! already runs there, `down` because deleting it would delete everything in it.

use af_manifest::EnvironmentId;
use af_runtime::{RuntimeError, RuntimeErrorKind};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use super::Patience;
use crate::render::names::{ENVIRONMENT_LABEL, MANAGED_LABEL};

/// What the cluster has under the environment's namespace name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    Absent,
    /// Ours, and in use.
    Ours,
    /// Ours, being deleted (by an earlier `down`); its finalizers say what it waits for.
    Terminating {
        finalizers: Vec<String>,
    },
    /// Not ours: it lacks our label, or carries another environment's id.
    Foreign,
}

/// Whether `namespace` (as read from the cluster) is ours for `env`, and in what state.
pub fn state_of(namespace: Option<&Namespace>, env: &EnvironmentId) -> NamespaceState {
    let Some(namespace) = namespace else {
        return NamespaceState::Absent;
    };
    let labels = namespace.metadata.labels.clone().unwrap_or_default();
    let ours = labels.get(MANAGED_LABEL).map(String::as_str) == Some("true")
        && labels.get(ENVIRONMENT_LABEL).map(String::as_str) == Some(env.as_str());
    if !ours {
        return NamespaceState::Foreign;
    }
    let terminating = namespace.metadata.deletion_timestamp.is_some()
        || namespace.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    if terminating {
        let mut finalizers = namespace
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default();
        finalizers.extend(namespace.metadata.finalizers.clone().unwrap_or_default());
        NamespaceState::Terminating { finalizers }
    } else {
        NamespaceState::Ours
    }
}

fn not_ours(name: &str) -> RuntimeError {
    RuntimeErrorKind::NotOurs {
        object_kind: "namespace".to_string(),
        name: name.to_string(),
    }
    .into()
}

async fn read(api: &Api<Namespace>, name: &str) -> Result<Option<Namespace>, RuntimeError> {
    api.get_opt(name)
        .await
        .map_err(|e| crate::error::api(format!("reading namespace {name}"), e))
}

/// Waits until `name` is gone; past `patience`, the error names the finalizers holding it.
async fn wait_gone(
    api: &Api<Namespace>,
    name: &str,
    env: &EnvironmentId,
    patience: Patience,
) -> Result<(), RuntimeError> {
    let started = tokio::time::Instant::now();
    loop {
        match state_of(read(api, name).await?.as_ref(), env) {
            NamespaceState::Absent => return Ok(()),
            NamespaceState::Foreign => return Err(not_ours(name)),
            NamespaceState::Ours | NamespaceState::Terminating { .. }
                if started.elapsed() < patience.timeout =>
            {
                tokio::time::sleep(patience.interval).await;
            }
            NamespaceState::Terminating { finalizers } => {
                return Err(crate::error::unexpected(
                    format!("waiting for namespace {name} to be deleted"),
                    format!(
                        "it is still terminating after {} s, held by the finalizers {}; something they wait for is stuck (kubectl get namespace {name} -o yaml shows its conditions)",
                        patience.timeout.as_secs(),
                        if finalizers.is_empty() {
                            "(none listed)".to_string()
                        } else {
                            finalizers.join(", ")
                        }
                    ),
                ));
            }
            NamespaceState::Ours => {
                return Err(crate::error::unexpected(
                    format!("waiting for namespace {name} to be deleted"),
                    "the cluster accepted the delete and has not started it",
                ));
            }
        }
    }
}

/// Creates `namespace` (which carries our labels in the object itself), reuses it when it is ours
/// — with its labels as rendered now: the Pod Security level follows `runtime.netlock` — waits out
/// an earlier `down` still deleting it, and refuses one that is not ours. `true` when it wrote.
pub async fn ensure(
    client: kube::Client,
    namespace: &Namespace,
    env: &EnvironmentId,
    patience: Patience,
) -> Result<bool, RuntimeError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let name = namespace.metadata.name.clone().unwrap_or_default();
    match state_of(read(&api, &name).await?.as_ref(), env) {
        NamespaceState::Ours => {
            let object = crate::render::Object::Namespace(namespace.clone());
            return Ok(super::objects::apply(client, &object).await?.1);
        }
        NamespaceState::Foreign => return Err(not_ours(&name)),
        NamespaceState::Terminating { .. } => wait_gone(&api, &name, env, patience).await?,
        NamespaceState::Absent => {}
    }
    match api.create(&PostParams::default(), namespace).await {
        Ok(_) => Ok(true),
        // Created between the read and the create: ours only if it carries our label.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            match state_of(read(&api, &name).await?.as_ref(), env) {
                NamespaceState::Ours => Ok(false),
                _ => Err(not_ours(&name)),
            }
        }
        Err(err) => Err(crate::error::api(format!("creating namespace {name}"), err)),
    }
}

/// Deletes the environment's namespace, only when it is ours, and waits until it is gone. One that
/// does not exist is already gone.
pub async fn delete(
    client: kube::Client,
    name: &str,
    env: &EnvironmentId,
    patience: Patience,
) -> Result<(), RuntimeError> {
    let api: Api<Namespace> = Api::all(client);
    match state_of(read(&api, name).await?.as_ref(), env) {
        NamespaceState::Absent => return Ok(()),
        NamespaceState::Foreign => return Err(not_ours(name)),
        NamespaceState::Terminating { .. } => {}
        NamespaceState::Ours => match api.delete(name, &DeleteParams::foreground()).await {
            Ok(_) => {}
            // Gone between the read and the delete.
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(err) => {
                return Err(crate::error::api(format!("deleting namespace {name}"), err));
            }
        },
    }
    wait_gone(&api, name, env, patience).await
}
