//! What a pod says about whether it will become ready, row by row: an image that cannot be
//! pulled, a crash loop, no node to run on, the node refusing it, a startup gate that refused;
//! and what "ready" is.

use af_kube::apply::readiness::{PodProblem, all_ready, pod_problem};
use af_runtime::PodFailureKind;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "web-1"}, "status": status})).unwrap()
}

/// The cause and the words of a pod that will not start.
fn will_not_start(problem: Option<PodProblem>) -> (PodFailureKind, String) {
    match problem {
        Some(PodProblem::WillNotStart { cause, detail, .. }) => (cause, detail),
        other => panic!("not a pod that will not start: {other:?}"),
    }
}

fn container(name: &str, state: serde_json::Value) -> serde_json::Value {
    json!({"name": name, "image": "shop/web:1", "imageID": "", "ready": false, "restartCount": 3, "state": state})
}

#[test]
fn a_running_pod_has_no_problem() {
    assert_eq!(
        pod_problem(&pod(
            json!({"phase": "Running", "containerStatuses": [container("web", json!({"running": {}}))]})
        )),
        None
    );
}

#[test]
fn an_image_that_cannot_be_pulled_names_the_image() {
    let (cause, found) = will_not_start(pod_problem(&pod(
        json!({"containerStatuses": [container("web", json!({"waiting": {"reason": "ErrImagePull"}}))]}),
    )));
    assert_eq!(cause, PodFailureKind::ImageUnavailable);
    assert!(
        found.starts_with("ErrImagePull") && found.contains("shop/web:1"),
        "{found}"
    );
}

#[test]
fn a_crash_loop_names_the_container_and_its_last_exit() {
    let mut looping = container("web", json!({"waiting": {"reason": "CrashLoopBackOff"}}));
    looping["lastState"] = json!({"terminated": {"exitCode": 2}});
    let (cause, found) = will_not_start(pod_problem(&pod(json!({"containerStatuses": [looping]}))));
    assert_eq!(cause, PodFailureKind::CrashLoop);
    assert_eq!(
        found,
        "CrashLoopBackOff: container web keeps exiting, last exit 2"
    );
}

#[test]
fn an_unschedulable_pod_says_why() {
    let (cause, found) = will_not_start(pod_problem(&pod(
        json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient cpu."}]}),
    )));
    assert_eq!(cause, PodFailureKind::Unschedulable);
    assert_eq!(
        found,
        "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
    );
}

#[test]
fn a_gate_that_refused_is_named() {
    let found = pod_problem(&pod(
        json!({"initContainerStatuses": [container("af-gate", json!({"terminated": {"exitCode": 43}}))]}),
    ));
    assert_eq!(found, Some(PodProblem::GateRefused { exit_code: 43 }));
    // A gate that passed is no problem.
    assert_eq!(
        pod_problem(&pod(
            json!({"initContainerStatuses": [container("af-gate", json!({"terminated": {"exitCode": 0}}))]})
        )),
        None
    );
}

/// What a real kubelet before 1.22 did to the sidecar's pod: failed it before any container
/// ran. An evicted pod is not such a refusal: its replacement may run.
#[test]
fn a_pod_the_node_refused_is_named_with_the_kubelets_reason() {
    let (cause, found) = will_not_start(pod_problem(&pod(json!({"phase": "Failed",
        "reason": "SysctlForbidden",
        "message": "Pod forbidden sysctl: \"net.ipv4.ip_unprivileged_port_start\" not allowlisted"}))));
    assert_eq!(cause, PodFailureKind::RejectedByNode);
    assert!(
        found.contains("SysctlForbidden") && found.contains("ip_unprivileged_port_start"),
        "{found}"
    );
    assert_eq!(
        pod_problem(&pod(
            json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"})
        )),
        None
    );
}

#[test]
fn ready_means_every_wanted_replica_of_the_current_template_ready_and_no_old_one_left() {
    // (generation, observed, wanted, replicas of any template, updated, ready)
    let deployment = |(generation, observed, wanted, total, updated, ready): (
        i64,
        i64,
        i32,
        i32,
        i32,
        i32,
    )|
     -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": generation},
            "spec": {"replicas": wanted, "selector": {}, "template": {}},
            "status": {"observedGeneration": observed, "replicas": total,
                       "updatedReplicas": updated, "readyReplicas": ready}
        }))
        .unwrap()
    };
    assert!(all_ready(&deployment((1, 1, 3, 3, 3, 3))));
    assert!(
        !all_ready(&deployment((1, 1, 3, 3, 3, 2))),
        "a third pod still scheduling is not ready"
    );
    assert!(
        !all_ready(&deployment((2, 1, 1, 1, 1, 1))),
        "its controller has not seen the changed spec yet: the ready pod is the old one"
    );
    assert!(
        !all_ready(&deployment((2, 2, 1, 2, 1, 2))),
        "the new pod and the old one both ready: the old one still answers behind the Service"
    );
    assert!(
        !all_ready(&deployment((2, 2, 1, 1, 0, 1))),
        "no pod of the current template yet"
    );
    assert!(all_ready(&deployment((2, 2, 1, 1, 1, 1))));
}

#[test]
fn a_quota_that_refuses_the_pods_is_named() {
    use af_kube::apply::readiness::replica_set_problem;
    use k8s_openapi::api::apps::v1::ReplicaSet;
    let set: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "web-5d8"}, "status": {"replicas": 0,
        "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
            "message": "pods \"web-5d8-x\" is forbidden: exceeded quota: compute, requested: cpu=250m, used: cpu=2, limited: cpu=2"}]}}))
    .unwrap();
    let found = replica_set_problem(&set).unwrap();
    assert!(
        found.starts_with("the namespace's quota refuses its pods: ")
            && found.contains("limited: cpu=2"),
        "{found}"
    );
    let healthy: ReplicaSet =
        serde_json::from_value(json!({"metadata": {"name": "web-5d8"}, "status": {"replicas": 2}}))
            .unwrap();
    assert_eq!(replica_set_problem(&healthy), None);
}
