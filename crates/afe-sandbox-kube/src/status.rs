//! What a ticket's Pod says of itself, read as the engine needs it (pure): ready, still on its
//! way (and what it waits on, for the message when it never arrives), gone, or not contained
//! (its netlock step failed, so nothing of the ticket may run in it).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::render::NETLOCK;

/// Where a Pod is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodState {
    Ready,
    /// Not yet ready; what it waits on.
    Starting(String),
    /// It will never be ready: deleted, or ended.
    Gone(String),
    /// Its netlock step failed: the Pod's network is not locked.
    Uncontained(String),
}

fn terminated_badly(status: &ContainerStatus) -> Option<String> {
    let terminated = status.state.as_ref()?.terminated.as_ref()?;
    (terminated.exit_code != 0).then(|| {
        format!(
            "{} exited {}{}",
            status.name,
            terminated.exit_code,
            terminated
                .message
                .as_deref()
                .map(|m| format!(": {}", m.trim()))
                .unwrap_or_default()
        )
    })
}

fn waiting(status: &ContainerStatus) -> Option<String> {
    let waiting = status.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref().unwrap_or("waiting");
    Some(match waiting.message.as_deref() {
        Some(message) => format!("container {}: {reason}: {message}", status.name),
        None => format!("container {}: {reason}", status.name),
    })
}

/// Reads `pod`.
pub fn pod_state(pod: &Pod) -> PodState {
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Gone("it is being deleted".to_string());
    }
    let Some(status) = &pod.status else {
        return PodState::Starting("the API server has not reported on it yet".to_string());
    };
    let inits = status
        .init_container_statuses
        .as_deref()
        .unwrap_or_default();
    if let Some(failed) = inits
        .iter()
        .filter(|s| s.name == NETLOCK)
        .find_map(terminated_badly)
    {
        return PodState::Uncontained(failed);
    }
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    if let Some(phase @ ("Failed" | "Succeeded")) = status.phase.as_deref() {
        let why = containers
            .iter()
            .find_map(terminated_badly)
            .or_else(|| status.message.clone())
            .or_else(|| status.reason.clone())
            .unwrap_or_else(|| "its sandbox process ended".to_string());
        return PodState::Gone(format!("it ended ({phase}): {why}"));
    }
    let conditions = status.conditions.as_deref().unwrap_or_default();
    if conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
    {
        return PodState::Ready;
    }
    if let Some(unscheduled) = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        return PodState::Starting(format!(
            "not scheduled: {}",
            unscheduled
                .message
                .as_deref()
                .or(unscheduled.reason.as_deref())
                .unwrap_or("no reason given")
        ));
    }
    let why = inits
        .iter()
        .chain(containers)
        .find_map(waiting)
        .unwrap_or_else(|| "its containers are starting or not ready yet".to_string());
    PodState::Starting(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "status": status
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_ready_when_its_ready_condition_is_true() {
        let ready = pod(serde_json::json!({"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}));
        assert_eq!(pod_state(&ready), PodState::Ready);
    }

    #[test]
    fn what_a_starting_pod_waits_on_is_named() {
        let unscheduled = pod(serde_json::json!({"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient memory."}]}));
        assert_eq!(
            pod_state(&unscheduled),
            PodState::Starting(
                "not scheduled: 0/1 nodes are available: 1 Insufficient memory.".into()
            )
        );
        let pulling = pod(serde_json::json!({"phase": "Pending",
            "containerStatuses": [{"name": "sandbox", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff",
                "message": "Back-off pulling image \"afe-sandbox\""}}}]}));
        assert!(
            matches!(pod_state(&pulling), PodState::Starting(why) if why.contains("ImagePullBackOff"))
        );
    }

    #[test]
    fn a_failed_netlock_is_not_contained_and_an_ended_pod_is_gone() {
        let unlocked = pod(serde_json::json!({"phase": "Failed",
            "initContainerStatuses": [{"name": "netlock", "image": "e", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 51,
                "message": "AF-RUN-051 the kernel cannot match packets by owner"}}}]}));
        assert!(
            matches!(pod_state(&unlocked), PodState::Uncontained(why) if why.contains("netlock exited 51: AF-RUN-051"))
        );
        let ended = pod(serde_json::json!({"phase": "Failed",
            "containerStatuses": [{"name": "sandbox", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}));
        assert!(
            matches!(pod_state(&ended), PodState::Gone(why) if why.contains("sandbox exited 137"))
        );
        let deleting: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "deletionTimestamp": "2026-12-05T00:00:00Z"}}))
        .unwrap();
        assert!(matches!(pod_state(&deleting), PodState::Gone(_)));
    }
}
