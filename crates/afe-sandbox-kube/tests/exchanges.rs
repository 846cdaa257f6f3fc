//! The exact exchanges with the API server (`tower-test`): every request the adapter makes, in
//! order, with its query — a request nobody scripted fails the test — and the bodies it applies.

mod support;

use std::sync::Arc;

use afe_sandbox::{Opened, Sandbox, SandboxError};
use afe_sandbox_kube::{KubeSandbox, render};
use afe_testkit::kube_script::{Log, Step};
use serde_json::{Value, json};

fn scripted(script: Vec<Step>) -> (kube::Client, Log) {
    afe_testkit::kube_script::scripted(script, "default")
}

const PODS: &str = "/api/v1/namespaces/afe-sandbox/pods";
const CLAIMS: &str = "/api/v1/namespaces/afe-sandbox/persistentvolumeclaims";

fn selected(collection: &str) -> String {
    format!(
        "{collection}?&labelSelector=afe.ticket%3D{}%2Capp.kubernetes.io%2Fmanaged-by%3Dafe",
        support::TICKET
    )
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": "v1", "metadata": {}, "items": items})
}

fn adapter(client: kube::Client) -> KubeSandbox {
    KubeSandbox::with_suffixes(
        client,
        support::settings(),
        Arc::new(|| "abcde".to_string()),
    )
}

fn name() -> String {
    render::name(support::TICKET, "abcde")
}

fn pod(signature: &str, phase: &str, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name(), "namespace": "afe-sandbox",
            "labels": {"afe.ticket": support::TICKET, "app.kubernetes.io/managed-by": "afe",
                "afe.signature": signature}},
        "spec": {"containers": [{"name": "sandbox"}]},
        "status": {"phase": phase,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

/// The list of the ticket's Pods, answered with `pods`.
fn listed(pods: Vec<Value>) -> Step {
    (
        format!("GET {}", selected(PODS)),
        200,
        list("PodList", pods),
    )
}

/// The removal by label: the Pods (answered with `pods`), then the PVCs.
fn removal(pods: Vec<Value>) -> Vec<Step> {
    vec![
        (
            format!("DELETE {}", selected(PODS)),
            200,
            list("PodList", pods),
        ),
        (
            format!("DELETE {}", selected(CLAIMS)),
            200,
            list("PersistentVolumeClaimList", vec![]),
        ),
    ]
}

/// The server-side apply of the object at `collection`, answered `status` with `body` (null:
/// what was sent).
fn applied(collection: &str, status: u16, body: Value) -> Step {
    (
        format!("PATCH {collection}/{}?&fieldManager=afe-worker", name()),
        status,
        body,
    )
}

/// A new sandbox after the list answered `pods`: whatever is left removed, claim and Pod applied.
fn creating(pods: Vec<Value>) -> Vec<Step> {
    let mut script = vec![listed(pods.clone())];
    script.extend(removal(pods));
    script.push(applied(CLAIMS, 200, Value::Null));
    script.push(applied(PODS, 200, Value::Null));
    script
}

#[tokio::test]
async fn a_new_sandbox_removes_what_is_left_then_applies_its_claim_and_pod() {
    let spec = support::spec(&[]);
    let (client, seen) = scripted(creating(vec![]));
    let opened = adapter(client).open(&spec).await.unwrap();
    assert_eq!(
        opened,
        Opened {
            ticket: support::TICKET.into(),
            id: name(),
            fresh: true
        }
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5);
    // Server-side apply, with the rendered objects as they are.
    for applied in &seen[3..] {
        assert_eq!(applied.content_type, "application/apply-patch+yaml");
    }
    let signature = spec.signature();
    let claim: Value = serde_json::from_slice(&seen[3].body).unwrap();
    assert_eq!(
        claim,
        serde_json::to_value(render::claim(
            &spec,
            &signature,
            &name(),
            &support::settings()
        ))
        .unwrap()
    );
    let pod: Value = serde_json::from_slice(&seen[4].body).unwrap();
    assert_eq!(
        pod,
        serde_json::to_value(render::pod(
            &spec,
            &signature,
            &name(),
            &support::settings(),
            None
        ))
        .unwrap()
    );
}

#[tokio::test]
async fn a_running_pod_of_the_same_signature_is_reused_with_one_read() {
    let spec = support::spec(&[]);
    let (client, seen) = scripted(vec![listed(vec![pod(&spec.signature(), "Running", true)])]);
    let opened = adapter(client).open(&spec).await.unwrap();
    assert!(
        !opened.fresh,
        "reused: its workspace holds the earlier nodes' work"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_pod_of_another_signature_is_removed_and_made_again() {
    let spec = support::spec(&[]);
    let (client, seen) = scripted(creating(vec![pod("0000000000000000", "Running", true)]));
    let opened = adapter(client).open(&spec).await.unwrap();
    assert!(opened.fresh);
    assert_eq!(seen.lock().unwrap().len(), 5);
}

#[tokio::test]
async fn removal_is_by_label_and_nothing_left_is_not_an_error() {
    let (client, seen) = scripted(removal(vec![]));
    adapter(client).remove(support::TICKET).await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_pod_deleted_under_the_engine_is_gone() {
    let opened = Opened {
        ticket: support::TICKET.into(),
        id: name(),
        fresh: true,
    };
    let (client, _) = scripted(vec![(
        format!("GET {PODS}/{}", name()),
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
            "code": 404, "message": format!("pods \"{}\" not found", name())}),
    )]);
    let err = adapter(client).wait_ready(&opened).await.unwrap_err();
    assert!(err.is_gone(), "{err}");
}

#[tokio::test]
async fn a_pod_that_is_not_ready_in_time_is_gone_and_says_what_it_waited_on() {
    let opened = Opened {
        ticket: support::TICKET.into(),
        id: name(),
        fresh: true,
    };
    let mut unscheduled = pod("s", "Pending", false);
    unscheduled["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient cpu."}]);
    let (client, _) = scripted(vec![(format!("GET {PODS}/{}", name()), 200, unscheduled)]);
    // The time given is none: the first read decides, whatever the machine's speed.
    let settings = afe_sandbox_kube::KubeSandboxSettings {
        ready_timeout: std::time::Duration::ZERO,
        ..support::settings()
    };
    let sandbox = KubeSandbox::with_suffixes(client, settings, Arc::new(|| "abcde".to_string()));
    let err = sandbox.wait_ready(&opened).await.unwrap_err();
    assert!(err.is_gone(), "{err}");
    assert!(err.to_string().contains("Insufficient cpu"), "{err}");
}

#[tokio::test]
async fn an_apply_that_conflicts_is_someone_elses_object_and_nothing_of_ours_is_left() {
    let spec = support::spec(&[]);
    let mut script = vec![listed(vec![])];
    script.extend(removal(vec![]));
    script.push(applied(
        CLAIMS,
        409,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
            "code": 409, "message": "Apply failed with 1 conflict: conflict with \"someone\""}),
    ));
    // What was made of the ticket is removed again.
    script.extend(removal(vec![]));
    let (client, seen) = scripted(script);
    let err = adapter(client).open(&spec).await.unwrap_err();
    assert!(matches!(err, SandboxError::NotOurs { .. }), "{err}");
    assert_eq!(
        seen.lock().unwrap().len(),
        6,
        "the removal after the refusal was made"
    );
}

#[tokio::test]
async fn gvisor_and_unnamed_secrets_are_refused_before_any_request() {
    let (client, seen) = scripted(vec![]);
    let mut spec = support::spec(&[]);
    spec.runtime_class = Some("gvisor".into());
    let err = adapter(client.clone()).open(&spec).await.unwrap_err();
    assert_eq!(err.code(), "AFE-SBX-007", "{err}");
    let settings = afe_sandbox_kube::KubeSandboxSettings {
        env_secret: None,
        ..support::settings()
    };
    let err = KubeSandbox::new(client, settings)
        .open(&support::spec(&[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "AFE-SBX-003", "{err}");
    assert!(seen.lock().unwrap().is_empty());
}
