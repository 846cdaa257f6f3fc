//! The probe Pod against the API (exact exchanges): a verdict of every route denied lets the
//! environment through; an escaped route is AF-RUN-043 naming it; an image the nodes cannot pull
//! is said at once, naming the image; a probe that never finishes is refused, not passed.

mod api;

use std::time::Duration;

use af_kube::apply::Patience;
use af_kube::apply::probe::run;
use af_runtime::RunCode;
use api::{Script, scripted, status};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

const PODS: &str = "/api/v1/namespaces/af-shop-main/pods";
const POD: &str = "/api/v1/namespaces/af-shop-main/pods/af-probe";
const LOG: &str = "/api/v1/namespaces/af-shop-main/pods/af-probe/log";

fn probe() -> Pod {
    serde_json::from_value(
        json!({"metadata": {"name": "af-probe", "namespace": "af-shop-main"},
        "spec": {"containers": [{"name": "af-probe", "image": "antifailure/proxy:x"}]}}),
    )
    .unwrap()
}

fn pod(phase: &str, exit: i32) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "af-probe", "namespace": "af-shop-main"},
        "spec": {"containers": [{"name": "af-probe", "image": "antifailure/proxy:x"}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "af-probe", "image": "antifailure/proxy:x",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": exit}}}]}})
}

fn verdict(outcome: &str) -> String {
    let contained = outcome == "denied";
    format!(
        "{}\n",
        json!({"check": "probe", "contained": contained,
            "control": {"target": "tcp 10.43.0.53:3128", "reached": true, "detail": "the sidecar answered"},
            "routes": [
            {"route": "public-tcp", "target": "tcp 203.0.113.10:443", "outcome": outcome, "detail": ""},
            {"route": "metadata", "target": "tcp 169.254.169.254:80", "outcome": "denied", "detail": ""}]})
    )
}

fn not_found() -> serde_json::Value {
    status(404, "NotFound", "pods \"af-probe\" not found")
}

fn quick() -> Patience {
    Patience {
        timeout: Duration::from_millis(200),
        interval: Duration::from_millis(20),
    }
}

fn finishing(outcome: &'static str, exit: i32) -> Script {
    vec![
        ("DELETE", POD, 404, not_found()),
        ("POST", PODS, 201, pod("Pending", 0)),
        (
            "GET",
            POD,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "af-probe"}, "status": {"phase": "Pending"}}),
        ),
        (
            "GET",
            POD,
            200,
            pod(if exit == 0 { "Succeeded" } else { "Failed" }, exit),
        ),
        ("GET", LOG, 200, json!(verdict(outcome))),
        ("DELETE", POD, 404, not_found()),
    ]
}

#[tokio::test]
async fn every_route_denied_lets_the_environment_through() {
    let summary = run(
        scripted(finishing("denied", 0)),
        "af-shop-main",
        &probe(),
        quick(),
    )
    .await
    .unwrap();
    assert!(summary.contained);
    assert_eq!(summary.routes.len(), 2);
}

#[tokio::test]
async fn an_escaped_route_is_af_run_043_naming_it() {
    let err = run(
        scripted(finishing("escaped", 1)),
        "af-shop-main",
        &probe(),
        quick(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), RunCode::ContainmentRefused);
    let text = err.to_string();
    assert!(
        text.contains("public-tcp tcp 203.0.113.10:443") && text.contains("escaped"),
        "{text}"
    );
}

#[tokio::test]
async fn an_image_the_nodes_cannot_pull_is_said_at_once_with_its_name() {
    let backoff = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "af-probe"},
        "status": {"phase": "Pending", "containerStatuses": [{"name": "af-probe", "image": "antifailure/proxy:x",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}});
    let client = scripted(vec![
        ("DELETE", POD, 404, not_found()),
        ("POST", PODS, 201, pod("Pending", 0)),
        ("GET", POD, 200, backoff),
        ("DELETE", POD, 404, not_found()),
    ]);
    let err = run(client, "af-shop-main", &probe(), quick())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("ImagePullBackOff") && text.contains("antifailure/proxy:x"),
        "{text}"
    );
}

#[tokio::test]
async fn a_probe_that_does_not_finish_in_time_is_refused_not_passed() {
    let pending = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "af-probe"}, "status": {"phase": "Pending"}});
    let client = scripted(vec![
        ("DELETE", POD, 404, not_found()),
        ("POST", PODS, 201, pod("Pending", 0)),
        ("GET", POD, 200, pending),
        ("DELETE", POD, 404, not_found()),
    ]);
    // No patience at all: the first look at a pending probe is the last.
    let none = Patience {
        timeout: Duration::ZERO,
        interval: Duration::ZERO,
    };
    let err = run(client, "af-shop-main", &probe(), none)
        .await
        .unwrap_err();
    assert_eq!(err.code(), RunCode::ContainmentRefused, "{err}");
    assert!(
        err.to_string()
            .contains("did not finish within 0 s (phase Pending)"),
        "{err}"
    );
}
