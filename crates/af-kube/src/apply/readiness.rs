//! Readiness: every replica of every service ready (a third pod still scheduling is not ready).
//! Waiting stops early, naming the cause, when a pod says it will never get there: its image
//! cannot be pulled, it crash-loops, it cannot be scheduled, or its startup gate refused.

use std::time::Duration;

use af_runtime::RuntimeError;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, LogParams};

use super::Patience;
use super::probe::image_problem;
use crate::render::names::{ROLE_LABEL, SERVICE_LABEL};

/// Why `pod` will not become ready, if it says so.
pub fn pod_problem(pod: &Pod) -> Option<String> {
    if let Some(problem) = image_problem(pod) {
        return Some(problem);
    }
    let status = pod.status.as_ref()?;
    if let Some(unschedulable) = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    }) {
        return Some(format!(
            "Unschedulable: {}",
            unschedulable.message.clone().unwrap_or_default()
        ));
    }
    if let Some(gate) = status.init_container_statuses.iter().flatten().find(|s| {
        s.name == "af-gate"
            && s.state
                .as_ref()
                .and_then(|state| state.terminated.as_ref())
                .is_some_and(|t| t.exit_code != 0)
    }) {
        let code = gate
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map_or(0, |t| t.exit_code);
        return Some(format!(
            "the startup gate refused to let the service start (exit {code}): an escape route was open or the sidecar did not answer"
        ));
    }
    status.container_statuses.iter().flatten().find_map(|s| {
        let waiting = s.state.as_ref()?.waiting.as_ref()?;
        (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then(|| {
            let last_exit = s
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .map_or(String::new(), |t| format!(", last exit {}", t.exit_code));
            format!(
                "CrashLoopBackOff: container {} keeps exiting{last_exit}",
                s.name
            )
        })
    })
}

/// Why a ReplicaSet cannot create its pods, if it says so: a ResourceQuota (or a LimitRange, or an
/// admission webhook) refusing them leaves no pod to look at, only this condition.
pub fn replica_set_problem(replica_set: &ReplicaSet) -> Option<String> {
    replica_set
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .map(|c| {
            let message = c.message.clone().unwrap_or_default();
            if message.contains("exceeded quota") {
                format!("the namespace's quota refuses its pods: {message}")
            } else {
                format!("its pods cannot be created: {message}")
            }
        })
}

/// Whether a Deployment has all the replicas it wants ready.
pub fn all_ready(deployment: &Deployment) -> bool {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let ready = deployment
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    ready >= wanted
}

/// Waits until every Deployment named in `names` is ready, or a pod of it says it never will.
pub async fn wait(
    client: kube::Client,
    namespace: &str,
    names: &[String],
    patience: Patience,
) -> Result<(), RuntimeError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let started = tokio::time::Instant::now();
    loop {
        let mut waiting = Vec::new();
        for name in names {
            let deployment = deployments.get(name).await.map_err(|e| {
                RuntimeError::platform_failed(format!("reading Deployment {namespace}/{name}"), e)
            })?;
            if !all_ready(&deployment) {
                waiting.push(name.clone());
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        let listed = pods
            .list(&ListParams::default().labels(&format!("{ROLE_LABEL}=service")))
            .await
            .map_err(|e| {
                RuntimeError::platform_failed(format!("listing the pods of {namespace}"), e)
            })?;
        for pod in &listed.items {
            let service = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_LABEL))
                .cloned()
                .unwrap_or_default();
            if let Some(problem) = pod_problem(pod) {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let gate = if problem.starts_with("the startup gate") {
                    let log = pods
                        .logs(
                            &name,
                            &LogParams {
                                container: Some("af-gate".into()),
                                ..Default::default()
                            },
                        )
                        .await
                        .unwrap_or_default();
                    format!("; its verdict: {}", log.lines().last().unwrap_or("(none)"))
                } else {
                    String::new()
                };
                return Err(RuntimeError::platform_failed(
                    format!("starting service {service} (pod {namespace}/{name})"),
                    format!("{problem}{gate}"),
                ));
            }
        }
        let replica_sets: Api<ReplicaSet> = Api::namespaced(pods.clone().into_client(), namespace);
        let sets = replica_sets
            .list(&ListParams::default().labels(&format!("{ROLE_LABEL}=service")))
            .await
            .map_err(|e| {
                RuntimeError::platform_failed(format!("listing the ReplicaSets of {namespace}"), e)
            })?;
        for set in &sets.items {
            if let Some(problem) = replica_set_problem(set) {
                let service = set
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_LABEL))
                    .cloned()
                    .unwrap_or_default();
                return Err(RuntimeError::platform_failed(
                    format!("starting service {service}"),
                    problem,
                ));
            }
        }
        if started.elapsed() >= patience.timeout {
            return Err(RuntimeError::platform_failed(
                format!("waiting for {} to be ready", waiting.join(", ")),
                format!(
                    "not every replica was ready within {} s",
                    patience.timeout.as_secs()
                ),
            ));
        }
        tokio::time::sleep(patience.interval).await;
    }
}

/// Readiness's patience.
pub const PATIENCE: Patience = Patience {
    timeout: Duration::from_secs(300),
    interval: Duration::from_secs(1),
};
