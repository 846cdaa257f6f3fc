//! Readiness: every replica of every Deployment waited on ready (a third pod still scheduling is
//! not ready). Waiting stops at once, naming the cause, when a pod says it will never get there —
//! the node refused it, its image cannot be pulled, it cannot be scheduled, it crash-loops,
//! admission refuses to create it (AF-RUN-058) — its netlock step failed (AF-RUN-051), or its
//! startup gate refused (AF-RUN-043): a real cluster's ReplicaSet remade a refused sidecar pod
//! every second while `up` waited 300 s.

use std::time::Duration;

use af_runtime::{PodFailureKind, RuntimeError, RuntimeErrorKind};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::Api;
use kube::api::{ListParams, LogParams};

use super::Patience;
use super::probe::image_problem;
use crate::render::names::NETLOCK;

/// Why a pod will never become ready, as the pod says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodProblem {
    /// It will not start, for `cause`; `container` is the one whose log tells more.
    WillNotStart {
        cause: PodFailureKind,
        detail: String,
        container: Option<String>,
    },
    /// Its startup gate (`af-gate`) exited with `exit_code`: containment was not shown for it.
    GateRefused { exit_code: i32 },
    /// Its netlock step (`af-netlock`, `runtime.netlock`) exited with `exit_code`: the pod is
    /// not locked, so nothing of it may run.
    NetlockFailed { exit_code: i32 },
}

/// The exit code of the init container `name` when its last run failed. A pod that restarts
/// (a Deployment's) shows the failure in `lastState` while it waits to try again, which is most
/// of the time; one that does not (a Job's, the probe's) in `state`.
fn failed_init(status: &PodStatus, name: &str) -> Option<i32> {
    status
        .init_container_statuses
        .iter()
        .flatten()
        .filter(|s| s.name == name)
        .find_map(|s| {
            let terminated = s
                .state
                .as_ref()
                .and_then(|state| state.terminated.as_ref())
                .or_else(|| s.last_state.as_ref()?.terminated.as_ref())?;
            (terminated.exit_code != 0).then_some(terminated.exit_code)
        })
}

/// Reasons the kubelet gives a pod it failed that a new pod would meet again (an evicted pod's
/// replacement may well run, so `Evicted` is not one of them).
fn rejected_for_good(reason: &str) -> bool {
    !matches!(reason, "Evicted" | "Preempting" | "Terminated" | "Shutdown")
}

/// Why `pod` will not become ready, if it says so.
pub fn pod_problem(pod: &Pod) -> Option<PodProblem> {
    if let Some(problem) = image_problem(pod) {
        return Some(PodProblem::WillNotStart {
            cause: PodFailureKind::ImageUnavailable,
            detail: problem,
            container: None,
        });
    }
    let status = pod.status.as_ref()?;
    // A pod the kubelet refused fails before any container starts, with a reason of its own
    // (`SysctlForbidden`): its ReplicaSet makes another, which is refused the same way.
    if status.phase.as_deref() == Some("Failed")
        && let Some(reason) = status.reason.as_deref().filter(|r| rejected_for_good(r))
    {
        return Some(PodProblem::WillNotStart {
            cause: PodFailureKind::RejectedByNode,
            detail: format!(
                "the node refused it: {reason}: {}",
                status.message.clone().unwrap_or_default()
            ),
            container: None,
        });
    }
    if let Some(unschedulable) = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    }) {
        return Some(PodProblem::WillNotStart {
            cause: PodFailureKind::Unschedulable,
            detail: format!(
                "Unschedulable: {}",
                unschedulable.message.clone().unwrap_or_default()
            ),
            container: None,
        });
    }
    if let Some(exit_code) = failed_init(status, NETLOCK) {
        return Some(PodProblem::NetlockFailed { exit_code });
    }
    if let Some(exit_code) = failed_init(status, "af-gate") {
        return Some(PodProblem::GateRefused { exit_code });
    }
    status.container_statuses.iter().flatten().find_map(|s| {
        let waiting = s.state.as_ref()?.waiting.as_ref()?;
        (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then(|| {
            let last_exit = s
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .map_or(String::new(), |t| format!(", last exit {}", t.exit_code));
            PodProblem::WillNotStart {
                cause: PodFailureKind::CrashLoop,
                detail: format!(
                    "CrashLoopBackOff: container {} keeps exiting{last_exit}",
                    s.name
                ),
                container: Some(s.name.clone()),
            }
        })
    })
}

/// The error a pod's problem is, reading what its logs add: a crash loop's last lines, a gate's
/// verdict.
pub async fn problem_error(
    pods: &Api<Pod>,
    namespace: &str,
    workload: &str,
    pod: &Pod,
    problem: PodProblem,
) -> RuntimeError {
    let name = pod.metadata.name.clone().unwrap_or_default();
    match problem {
        PodProblem::NetlockFailed { exit_code } => {
            let log = pods
                .logs(
                    &name,
                    &LogParams {
                        container: Some(NETLOCK.into()),
                        ..Default::default()
                    },
                )
                .await
                .unwrap_or_default();
            RuntimeErrorKind::NetlockFailed {
                place: format!("{workload} (pod {namespace}/{name})"),
                detail: netlock_detail(&log, exit_code),
            }
            .into()
        }
        PodProblem::GateRefused { exit_code } => {
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
            af_runtime::gate_refusal(
                &format!("{workload} (pod {namespace}/{name})"),
                &log,
                &format!("the gate exited {exit_code} and its log could not be read"),
            )
        }
        PodProblem::WillNotStart {
            cause,
            mut detail,
            container,
        } => {
            if let Some(container) = container {
                let params = LogParams {
                    container: Some(container),
                    previous: true,
                    tail_lines: Some(10),
                    ..Default::default()
                };
                if let Ok(log) = pods.logs(&name, &params).await
                    && !log.trim().is_empty()
                {
                    detail.push_str(&format!(
                        "; its last lines:\n  {}",
                        super::job::last_lines(&log, 10)
                    ));
                }
            }
            RuntimeErrorKind::PodWillNotStart {
                workload: workload.to_string(),
                pod: format!("{namespace}/{name}"),
                cause,
                detail,
            }
            .into()
        }
    }
}

/// What a failed netlock step said: the cause its AF-RUN-051 line gives (the sentence around it
/// is the one the runtime's error says itself), else its last lines, else its exit code.
pub fn netlock_detail(log: &str, exit_code: i32) -> String {
    let mark = af_runtime::NETLOCK_CAUSE_FOLLOWS;
    if let Some(cause) = log
        .lines()
        .find_map(|line| Some(&line[line.find(mark)? + mark.len()..]))
    {
        return cause.trim().to_string();
    }
    if log.trim().is_empty() {
        format!("the netlock step exited {exit_code} and its log could not be read")
    } else {
        format!(
            "the netlock step exited {exit_code}: {}",
            super::job::last_lines(log, 5)
        )
    }
}

/// Why a ReplicaSet cannot create its pods, if it says so: admission (Pod Security, a
/// ResourceQuota, a LimitRange, a webhook) refusing them leaves no pod to look at, only this
/// condition.
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

/// Whether a Deployment has rolled out what it says now: its controller has seen this spec
/// (`observedGeneration`), every replica it wants runs the current template (`updatedReplicas`),
/// none of an older template is left (`replicas`, which counts them too), and they are ready. Ready
/// replicas alone are not enough: while a changed template rolls out, the old pods are still
/// ready and still behind the Service (a real cluster answered the conformance suite from the
/// old pod after `up` had returned).
pub fn all_ready(deployment: &Deployment) -> bool {
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    let seen = match (deployment.metadata.generation, status.observed_generation) {
        (Some(generation), Some(observed)) => observed >= generation,
        (Some(_), None) => false,
        (None, _) => true,
    };
    let updated = status.updated_replicas.unwrap_or(0);
    let total = status.replicas.unwrap_or(0);
    let ready = status.ready_replicas.unwrap_or(0);
    seen && updated >= wanted && total <= updated && ready >= wanted
}

/// Waits until every Deployment named in `names` is ready, or a pod of it says it never will.
pub async fn wait(
    client: kube::Client,
    namespace: &str,
    names: &[String],
    patience: Patience,
) -> Result<(), RuntimeError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client, namespace);
    let started = tokio::time::Instant::now();
    loop {
        let mut waiting = Vec::new();
        for name in names {
            let deployment = deployments.get(name).await.map_err(|e| {
                crate::error::api(format!("reading Deployment {namespace}/{name}"), e)
            })?;
            if !all_ready(&deployment) {
                waiting.push((name.clone(), selector_of(&deployment)));
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        // Each waiting Deployment's own pods, by its selector: the sidecar's as much as a
        // service's (the sidecar was the pod a real kubelet refused).
        for (name, selector) in &waiting {
            let listed = pods
                .list(&ListParams::default().labels(selector))
                .await
                .map_err(|e| {
                    crate::error::api(format!("listing the pods of {namespace}/{name}"), e)
                })?;
            for pod in &listed.items {
                if let Some(problem) = pod_problem(pod) {
                    return Err(
                        problem_error(&pods, namespace, &workload(name), pod, problem).await,
                    );
                }
            }
            let sets = replica_sets
                .list(&ListParams::default().labels(selector))
                .await
                .map_err(|e| {
                    crate::error::api(format!("listing the ReplicaSets of {namespace}/{name}"), e)
                })?;
            if let Some((set, detail)) = sets
                .items
                .iter()
                .find_map(|set| replica_set_problem(set).map(|d| (set, d)))
            {
                return Err(RuntimeErrorKind::PodWillNotStart {
                    workload: workload(name),
                    pod: format!(
                        "{namespace}/{}",
                        set.metadata.name.clone().unwrap_or_default()
                    ),
                    cause: PodFailureKind::AdmissionRefused,
                    detail,
                }
                .into());
            }
        }
        let waiting: Vec<String> = waiting.into_iter().map(|(name, _)| name).collect();
        if started.elapsed() >= patience.timeout {
            return Err(RuntimeErrorKind::NeverReady {
                waiting: waiting.iter().map(|name| workload(name)).collect(),
                waited_s: patience.timeout.as_secs(),
            }
            .into());
        }
        tokio::time::sleep(patience.interval).await;
    }
}

/// A Deployment's pod selector as a label selector (`a=b,c=d`).
fn selector_of(deployment: &Deployment) -> String {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// How a Deployment's pods are named to the person: the sidecar is not one of their services.
fn workload(service: &str) -> String {
    if service == crate::render::names::SIDECAR {
        "the egress sidecar".to_string()
    } else {
        format!("service {service}")
    }
}

/// Readiness's patience.
pub const PATIENCE: Patience = Patience {
    timeout: Duration::from_secs(300),
    interval: Duration::from_secs(1),
};
