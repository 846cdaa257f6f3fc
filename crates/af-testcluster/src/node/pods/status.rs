//! A Pod's status from what the node knows of its containers, as a kubelet writes it: the phase
//! by the kubelet's rules (a container crash-looping under `restartPolicy: Always` is a Running
//! pod; all stopped and all exited 0 is Succeeded), the Initialized / ContainersReady / Ready
//! conditions with the kubelet's reasons and messages (PodScheduled kept as the scheduler wrote
//! it), and each container's state, last state, restart count and readiness. Pure: the runner
//! keeps a [`PodState`] and writes what this makes of it.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::admit::Refusal;

/// How a container ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Termination {
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, `ContainerCannotRun`.
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
    pub container_id: Option<String>,
}

impl Termination {
    /// The reason the kubelet gives an exit status.
    pub fn reason_for(exit_code: i32, oom_killed: bool) -> String {
        match (exit_code, oom_killed) {
            (_, true) => "OOMKilled",
            (0, _) => "Completed",
            _ => "Error",
        }
        .to_string()
    }
}

/// What a container is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated(Termination),
}

impl State {
    pub fn waiting(reason: &str, message: Option<String>) -> State {
        State::Waiting {
            reason: reason.to_string(),
            message,
        }
    }
}

/// One container of the Pod as the node knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRecord {
    pub name: String,
    pub image: String,
    /// `docker-pullable://…` or `docker://sha256:…`, once the image is known.
    pub image_id: String,
    /// `docker://<id>` of the current instance.
    pub container_id: Option<String>,
    pub state: State,
    pub last: Option<Termination>,
    pub restarts: i32,
    pub ready: bool,
    /// Whether its startup probe passed (or it has none) and it runs.
    pub started: bool,
}

impl ContainerRecord {
    pub fn new(name: &str, image: &str, waiting: &str) -> ContainerRecord {
        ContainerRecord {
            name: name.to_string(),
            image: image.to_string(),
            image_id: String::new(),
            container_id: None,
            state: State::waiting(waiting, None),
            last: None,
            restarts: 0,
            ready: false,
            started: false,
        }
    }

    fn succeeded(&self) -> bool {
        matches!(&self.state, State::Terminated(t) if t.exit_code == 0)
    }
}

/// The Pod as the node knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    pub init: Vec<ContainerRecord>,
    pub containers: Vec<ContainerRecord>,
    pub pod_ip: Option<String>,
    pub host_ip: String,
    pub start_time: Option<Timestamp>,
    /// Refused by admission: the Pod failed with this reason before anything was made.
    pub refused: Option<Refusal>,
}

fn time(at: Timestamp) -> Time {
    Time(at)
}

fn terminated(t: &Termination) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: t.exit_code,
        reason: Some(t.reason.clone()),
        message: t.message.clone(),
        started_at: t.started_at.map(time),
        finished_at: Some(time(t.finished_at)),
        container_id: t.container_id.clone(),
        ..Default::default()
    }
}

fn container_status(record: &ContainerRecord) -> ContainerStatus {
    let state = match &record.state {
        State::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        State::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(time(*started_at)),
            }),
            ..Default::default()
        },
        State::Terminated(t) => ContainerState {
            terminated: Some(terminated(t)),
            ..Default::default()
        },
    };
    ContainerStatus {
        name: record.name.clone(),
        image: record.image.clone(),
        image_id: record.image_id.clone(),
        container_id: record.container_id.clone(),
        ready: record.ready,
        restart_count: record.restarts,
        started: Some(record.started),
        state: Some(state),
        last_state: Some(ContainerState {
            terminated: record.last.as_ref().map(terminated),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Pod's phase, by the kubelet's rules (`getPhase`).
pub fn phase(state: &PodState, restart_policy: &str) -> &'static str {
    if state.refused.is_some() {
        return "Failed";
    }
    let init_failed = state.init.iter().any(|c| {
        matches!(&c.state, State::Terminated(t) if t.exit_code != 0)
            || (c.last.as_ref().is_some_and(|t| t.exit_code != 0) && !c.succeeded())
    });
    if !state.init.iter().all(ContainerRecord::succeeded) {
        return if init_failed && restart_policy == "Never" {
            "Failed"
        } else {
            "Pending"
        };
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for container in &state.containers {
        match &container.state {
            State::Running { .. } => running += 1,
            State::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            State::Waiting { .. } if container.last.is_some() => stopped += 1,
            State::Waiting { .. } => waiting += 1,
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        match restart_policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "OnFailure" => "Running",
            _ => "Failed",
        }
    } else {
        "Pending"
    }
}

/// A condition, keeping `previous`'s transition time when its status did not change.
fn condition(
    previous: &[PodCondition],
    type_: &str,
    holds: bool,
    reason: Option<String>,
    message: Option<String>,
    now: Timestamp,
) -> PodCondition {
    let status = if holds { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(time(now));
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason,
        message,
        last_transition_time: Some(since),
        ..Default::default()
    }
}

/// `[a b]`, as the kubelet lists containers in a condition's message.
fn listed(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

/// The status to write for `state`, given the Pod's current status (`previous`) and policy.
pub fn pod_status(
    previous: &PodStatus,
    state: &PodState,
    restart_policy: &str,
    now: Timestamp,
) -> PodStatus {
    let earlier = previous.conditions.clone().unwrap_or_default();
    let phase = phase(state, restart_policy);
    if let Some(refusal) = &state.refused {
        return PodStatus {
            phase: Some(phase.to_string()),
            reason: Some(refusal.reason.clone()),
            message: Some(refusal.message.clone()),
            conditions: previous.conditions.clone(),
            qos_class: previous.qos_class.clone(),
            ..Default::default()
        };
    }
    let uninitialized: Vec<&str> = state
        .init
        .iter()
        .filter(|c| !c.succeeded())
        .map(|c| c.name.as_str())
        .collect();
    let unready: Vec<&str> = state
        .containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let finished = matches!(phase, "Succeeded" | "Failed");
    let (ready_reason, ready_message) = if finished {
        (Some("PodCompleted".to_string()), None)
    } else if unready.is_empty() {
        (None, None)
    } else {
        (
            Some("ContainersNotReady".to_string()),
            Some(format!(
                "containers with unready status: {}",
                listed(&unready)
            )),
        )
    };
    let initialized = if uninitialized.is_empty() {
        condition(&earlier, "Initialized", true, None, None, now)
    } else {
        condition(
            &earlier,
            "Initialized",
            false,
            Some("ContainersNotInitialized".to_string()),
            Some(format!(
                "containers with incomplete status: {}",
                listed(&uninitialized)
            )),
            now,
        )
    };
    let all_ready = unready.is_empty() && !finished;
    let mut conditions = vec![
        initialized,
        condition(
            &earlier,
            "Ready",
            all_ready,
            ready_reason.clone(),
            ready_message.clone(),
            now,
        ),
        condition(
            &earlier,
            "ContainersReady",
            all_ready,
            ready_reason,
            ready_message,
            now,
        ),
    ];
    conditions.extend(earlier.into_iter().filter(|c| c.type_ == "PodScheduled"));
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: Some(state.host_ip.clone()),
        pod_ip: state.pod_ip.clone(),
        pod_ips: state.pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        start_time: state.start_time.map(time),
        init_container_statuses: (!state.init.is_empty())
            .then(|| state.init.iter().map(container_status).collect()),
        container_statuses: Some(state.containers.iter().map(container_status).collect()),
        qos_class: previous.qos_class.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn ended(exit_code: i32) -> Termination {
        Termination {
            exit_code,
            reason: Termination::reason_for(exit_code, false),
            message: None,
            started_at: Some(at(0)),
            finished_at: at(1),
            container_id: Some("docker://abc".into()),
        }
    }

    fn record(name: &str, state: State) -> ContainerRecord {
        ContainerRecord {
            state,
            ..ContainerRecord::new(name, "img", "ContainerCreating")
        }
    }

    #[test]
    fn the_phase_follows_the_kubelets_rules() {
        let running = State::Running { started_at: at(0) };
        let mut state = PodState {
            containers: vec![record("a", running.clone())],
            ..Default::default()
        };
        assert_eq!(phase(&state, "Always"), "Running");
        // A crash-looping container of a Deployment's pod: still a Running pod.
        state.containers[0] = ContainerRecord {
            last: Some(ended(2)),
            ..record("a", State::waiting("CrashLoopBackOff", None))
        };
        assert_eq!(phase(&state, "Always"), "Running");
        state.containers[0] = record("a", State::Terminated(ended(0)));
        assert_eq!(phase(&state, "Never"), "Succeeded");
        state.containers[0] = record("a", State::Terminated(ended(1)));
        assert_eq!(phase(&state, "Never"), "Failed");
        assert_eq!(phase(&state, "OnFailure"), "Running");
        // A failed init container fails a pod that is never restarted, and holds back one that is.
        state.init = vec![record("gate", State::Terminated(ended(3)))];
        state.containers[0] = record("a", State::waiting("PodInitializing", None));
        assert_eq!(phase(&state, "Never"), "Failed");
        assert_eq!(phase(&state, "Always"), "Pending");
        state.refused = Some(Refusal {
            reason: "SysctlForbidden".into(),
            message: "Pod forbidden sysctl".into(),
        });
        assert_eq!(phase(&state, "Always"), "Failed");
    }

    #[test]
    fn conditions_say_which_containers_hold_the_pod_back_and_keep_their_transition_times() {
        let mut state = PodState {
            init: vec![record("af-gate", State::Terminated(ended(0)))],
            containers: vec![
                record("web", State::Running { started_at: at(0) }),
                record("side", State::Running { started_at: at(0) }),
            ],
            pod_ip: Some("10.244.0.7".into()),
            host_ip: "127.0.0.1".into(),
            start_time: Some(at(0)),
            refused: None,
        };
        let scheduled: PodStatus = serde_json::from_value(serde_json::json!({
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "qosClass": "Guaranteed"
        }))
        .unwrap();
        let first = pod_status(&scheduled, &state, "Always", at(5));
        let ready = |s: &PodStatus| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .cloned()
                .unwrap()
        };
        assert_eq!(ready(&first).status, "False");
        assert_eq!(
            ready(&first).message.as_deref(),
            Some("containers with unready status: [web side]")
        );
        assert!(
            first
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "PodScheduled")
        );
        assert_eq!(first.qos_class.as_deref(), Some("Guaranteed"));
        assert_eq!(first.pod_ips.as_ref().unwrap()[0].ip, "10.244.0.7");
        state.containers[0].ready = true;
        state.containers[1].ready = true;
        let second = pod_status(&first, &state, "Always", at(9));
        assert_eq!(ready(&second).status, "True");
        assert_eq!(ready(&second).last_transition_time, Some(time(at(9))));
        let third = pod_status(&second, &state, "Always", at(20));
        assert_eq!(
            ready(&third).last_transition_time,
            Some(time(at(9))),
            "unchanged: the time it became true"
        );
    }

    #[test]
    fn a_refused_pod_fails_with_its_reason() {
        let state = PodState {
            refused: Some(Refusal {
                reason: "SysctlForbidden".into(),
                message: "Pod forbidden sysctl: \"x\" not whitelisted".into(),
            }),
            ..Default::default()
        };
        let status = pod_status(&PodStatus::default(), &state, "Always", at(0));
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason.as_deref(), Some("SysctlForbidden"));
        assert!(status.container_statuses.is_none());
    }
}
