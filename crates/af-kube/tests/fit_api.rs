//! The fit check against the API (exact exchanges): refusing with AF-RUN-047 on synthetic nodes
//! (cordoned, not Ready, partly used), passing when the environment fits, and passing with a
//! message when RBAC forbids listing nodes or pods.

mod api;

use std::sync::Mutex;

use af_kube::apply::fit::check;
use af_kube::fit::{Amount, Instance};
use af_runtime::{ProgressEvent, ProgressSink, RunCode};
use api::{scripted, status};
use serde_json::json;

#[derive(Default)]
struct Recorded(Mutex<Vec<ProgressEvent>>);

impl ProgressSink for Recorded {
    fn emit(&self, event: ProgressEvent) {
        self.0.lock().unwrap().push(event);
    }
}

fn list(kind: &str, items: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items})
}

fn node(name: &str, cpu: &str, ready: bool, cordoned: bool) -> serde_json::Value {
    json!({"metadata": {"name": name}, "spec": {"unschedulable": cordoned},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi"},
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
}

fn pod_on(node: &str, cpu: &str) -> serde_json::Value {
    json!({"metadata": {"name": format!("used-{node}"), "namespace": "other"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"}})
}

fn web(cpu_millis: u128) -> Instance {
    Instance {
        owner: "web".into(),
        requests: Amount {
            cpu_millis,
            memory_bytes: 1 << 20,
        },
    }
}

fn cluster() -> api::Script {
    vec![
        (
            "GET",
            "/api/v1/nodes",
            200,
            list(
                "NodeList",
                json!([
                    node("big-but-cordoned", "64", true, true),
                    node("big-but-down", "64", false, false),
                    node("small", "4", true, false),
                ]),
            ),
        ),
        (
            "GET",
            "/api/v1/pods",
            200,
            list("PodList", json!([pod_on("small", "3")])),
        ),
    ]
}

#[tokio::test]
async fn an_environment_larger_than_what_is_free_is_af_run_047_naming_the_shortfall() {
    // 64 CPU sit on nodes that take nothing; 1 of the 4 on the last node is free.
    let err = check(
        scripted(cluster()),
        &[web(2000)],
        "af-shop-main",
        &Recorded::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), RunCode::DoesNotFit);
    let text = err.to_string();
    assert!(
        text.contains(
            "web needs 2 CPU per instance, and the most free on one node is 1 CPU (small)"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn an_environment_that_fits_passes() {
    check(
        scripted(cluster()),
        &[web(500), web(500)],
        "af-shop-main",
        &Recorded::default(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_cluster_that_forbids_listing_nodes_passes_with_a_message() {
    let client = scripted(vec![
        (
            "GET",
            "/api/v1/nodes",
            403,
            status(
                403,
                "Forbidden",
                "nodes is forbidden: User \"dev\" cannot list resource \"nodes\"",
            ),
        ),
        (
            "GET",
            "/api/v1/pods",
            403,
            status(403, "Forbidden", "pods is forbidden"),
        ),
    ]);
    let progress = Recorded::default();
    check(client, &[web(64000)], "af-shop-main", &progress)
        .await
        .unwrap();
    let events = progress.0.lock().unwrap();
    let said = events.iter().any(|e| {
        matches!(e, ProgressEvent::Notice { message }
        if message.contains("the fit check did not run") && message.contains("may not list nodes"))
    });
    assert!(said, "{events:?}");
}

#[tokio::test]
async fn another_api_failure_is_af_run_001_naming_the_list() {
    let client = scripted(vec![(
        "GET",
        "/api/v1/nodes",
        500,
        status(500, "InternalError", "etcd unavailable"),
    )]);
    let err = check(client, &[web(1)], "af-shop-main", &Recorded::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), RunCode::PlatformFailed);
    assert!(
        err.to_string().contains("listing nodes for the fit check"),
        "{err}"
    );
}
