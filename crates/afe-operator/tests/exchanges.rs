//! The reconcile's exact exchanges with the API server (`tower-test`): every request in order —
//! one nobody scripted fails the test — for a pin that does not match (reads, discovery, the
//! reaper's lists, the status, and nothing else), and the error paths (403, 500).

mod example;

use std::sync::Arc;
use std::time::Duration;

use afe_config::engine::AgentFlowEngine;
use afe_operator::reconcile::{Context, ReconcileError, reconcile};
use afe_testkit::kube_script::{Step, scripted};
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};

fn context(client: kube::Client) -> Arc<Context> {
    Arc::new(Context::new(
        client.clone(),
        Recorder::new(
            client,
            Reporter {
                controller: "afe-operator".to_string(),
                instance: None,
            },
        ),
        Arc::new(|| example::NOW_MS),
        Duration::from_secs(60),
    ))
}

fn list(api_version: &str, kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {}, "items": items})
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
        "reason": reason, "message": format!("{reason} (scripted)")})
}

fn engine(pin: &str) -> AgentFlowEngine {
    let mut engine = example::example_engine();
    engine["spec"]["config"]["revision"] = json!(pin);
    serde_json::from_value(engine).unwrap()
}

const AFE: &str = "/apis/afe.dev/v1alpha1/namespaces/afe";

/// The reads of step 1: the four kinds of the config, then the source ConfigMap.
fn reads() -> Vec<Step> {
    let resources = example::example_resources();
    let of = |kind: &str| -> Vec<Value> {
        resources
            .iter()
            .filter(|r| r["kind"] == kind)
            .cloned()
            .collect()
    };
    let mut steps: Vec<Step> = ["Schema", "Agent", "Flow", "Plugin"]
        .into_iter()
        .map(|kind| {
            let path = format!("GET {AFE}/{}s?", kind.to_lowercase());
            (path, 200, list("afe.dev/v1alpha1", kind, of(kind)))
        })
        .collect();
    steps.push((
        "GET /api/v1/namespaces/afe/configmaps/afe-source".to_string(),
        200,
        example::example_source(),
    ));
    steps
}

#[tokio::test]
async fn a_pin_that_does_not_match_reads_sweeps_and_writes_only_the_status() {
    let sandbox = format!("/api/v1/namespaces/{}", example::SANDBOX_NS);
    let selector = "labelSelector=afe.ticket%2Capp.kubernetes.io%2Fmanaged-by%3Dafe";
    let mut script = reads();
    script.extend([
        (
            "GET /apis/keda.sh/v1alpha1".to_string(),
            404,
            status(404, "NotFound"),
        ),
        (
            "GET /apis/postgresql.cnpg.io/v1".to_string(),
            404,
            status(404, "NotFound"),
        ),
        (
            format!("GET {sandbox}/pods?&{selector}"),
            200,
            list("v1", "Pod", vec![]),
        ),
        (
            format!("GET {sandbox}/persistentvolumeclaims?&{selector}"),
            200,
            list("v1", "PersistentVolumeClaim", vec![]),
        ),
        (
            format!("PATCH {AFE}/agentflowengines/afe/status?"),
            200,
            example::example_engine(),
        ),
    ]);
    let (client, seen) = scripted(script, "afe");
    reconcile(Arc::new(engine("ffffffffffff")), context(client))
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 10, "every scripted exchange, and no other");
    let patch = &seen.last().unwrap().json()["status"];
    let pinned = patch["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "RevisionPinned")
        .unwrap();
    assert_eq!(pinned["reason"], "RevisionMismatch");
    assert!(
        pinned["message"]
            .as_str()
            .unwrap()
            .contains("04cf1cc0ea69d0ee")
    );
    assert_eq!(
        patch["revision"],
        Value::Null,
        "nothing ran before, nothing runs now"
    );
}

#[tokio::test]
async fn a_forbidden_read_stops_the_reconcile_with_what_to_grant() {
    let (client, seen) = scripted(
        vec![(format!("GET {AFE}/schemas?"), 403, status(403, "Forbidden"))],
        "afe",
    );
    let err = reconcile(Arc::new(engine("ffffffffffff")), context(client))
        .await
        .unwrap_err();
    assert!(matches!(err, ReconcileError::Forbidden { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("AFE-OPR-002") && text.contains("list the schemas"),
        "{text}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_failing_server_is_its_own_code_and_is_tried_again() {
    let mut script = reads();
    script.push((
        "GET /apis/keda.sh/v1alpha1".to_string(),
        500,
        status(500, "InternalError"),
    ));
    let (client, _) = scripted(script, "afe");
    let ctx = context(client);
    let engine = Arc::new(engine("ffffffffffff"));
    let err = reconcile(engine.clone(), ctx.clone()).await.unwrap_err();
    assert!(err.to_string().starts_with("AFE-OPR-003"), "{err}");
    let first = afe_operator::reconcile::error_policy(engine.clone(), &err, ctx.clone());
    let second = afe_operator::reconcile::error_policy(engine, &err, ctx);
    assert_eq!(
        first,
        kube::runtime::controller::Action::requeue(Duration::from_secs(5))
    );
    assert_eq!(
        second,
        kube::runtime::controller::Action::requeue(Duration::from_secs(10))
    );
}

#[tokio::test]
async fn without_afes_crds_the_operator_refuses_to_start_and_says_what_to_apply() {
    let (client, _) = scripted(
        vec![(
            "GET /apis/afe.dev/v1alpha1".to_string(),
            404,
            status(404, "NotFound"),
        )],
        "afe",
    );
    let err = afe_operator::controller::check_installed(&client)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("AFE-OPR-004") && text.contains("kubectl apply -k deploy/operator"),
        "{text}"
    );
    let (client, _) = scripted(
        vec![(
            "GET /apis/afe.dev/v1alpha1".to_string(),
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "afe.dev/v1alpha1",
                "resources": [{"name": "agentflowengines", "singularName": "agentflowengine",
                    "namespaced": true, "kind": "AgentFlowEngine", "verbs": ["get", "list", "watch"]}]}),
        )],
        "afe",
    );
    afe_operator::controller::check_installed(&client)
        .await
        .unwrap();
}
