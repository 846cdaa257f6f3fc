//! The namespace's lifecycle against the fake API, as exact request/response exchanges
//! (`tower-test`): every read, create and delete af makes, in order, and nothing else — a write
//! the script does not expect fails the test. (`kube-fake-client` cannot serve Namespace objects:
//! it reads `/api/v1/namespaces/NAME` as a namespaced path and answers "Invalid path".)

use std::time::Duration;

use af_kube::apply::Patience;
use af_kube::apply::namespace::{NamespaceState, delete, ensure, state_of};
use af_manifest::EnvironmentId;
use af_runtime::RunCode;
use k8s_openapi::api::core::v1::Namespace;

mod api;
use api::{scripted, scripted_with_bodies};

fn env() -> EnvironmentId {
    EnvironmentId::derive("shop", "main")
}

fn quick() -> Patience {
    Patience {
        timeout: Duration::from_millis(300),
        interval: Duration::from_millis(50),
    }
}

fn ours() -> Namespace {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "af-shop-main", "labels": {
            "dev.antifailure.managed": "true", "dev.antifailure.environment": "shop-main"}}
    }))
    .unwrap()
}

fn foreign() -> Namespace {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "af-shop-main", "labels": {"team": "payments"}}
    }))
    .unwrap()
}

#[test]
fn ownership_is_the_label_and_the_environment_id_together() {
    assert_eq!(state_of(None, &env()), NamespaceState::Absent);
    assert_eq!(state_of(Some(&ours()), &env()), NamespaceState::Ours);
    assert_eq!(state_of(Some(&foreign()), &env()), NamespaceState::Foreign);
    // Ours in form, but another environment's.
    let other = EnvironmentId::derive("shop", "other");
    assert_eq!(state_of(Some(&ours()), &other), NamespaceState::Foreign);
    let mut terminating = ours();
    terminating.status =
        Some(serde_json::from_value(serde_json::json!({"phase": "Terminating"})).unwrap());
    terminating.spec =
        Some(serde_json::from_value(serde_json::json!({"finalizers": ["kubernetes"]})).unwrap());
    assert_eq!(
        state_of(Some(&terminating), &env()),
        NamespaceState::Terminating {
            finalizers: vec!["kubernetes".into()]
        }
    );
}

#[tokio::test]
async fn up_creates_the_namespace_with_our_labels_in_the_create_call_and_reuses_it() {
    let path = "/api/v1/namespaces/af-shop-main";
    let (client, bodies) = scripted_with_bodies(vec![
        ("GET", path, 404, not_found()),
        (
            "POST",
            "/api/v1/namespaces",
            201,
            serde_json::to_value(ours()).unwrap(),
        ),
        // The second up: a read to judge it, a read to compare its labels with what is
        // rendered now, and no write (the script ends here).
        ("GET", path, 200, serde_json::to_value(ours()).unwrap()),
        ("GET", path, 200, serde_json::to_value(ours()).unwrap()),
    ]);
    ensure(client.clone(), &ours(), &env(), quick())
        .await
        .unwrap();
    let created: Namespace = serde_json::from_slice(&bodies.lock().unwrap()[1]).unwrap();
    assert_eq!(
        state_of(Some(&created), &env()),
        NamespaceState::Ours,
        "labelled in the create call"
    );
    ensure(client, &ours(), &env(), quick()).await.unwrap();
}

#[tokio::test]
async fn a_foreign_namespace_is_refused_by_up_and_by_down_and_left_alone() {
    let path = "/api/v1/namespaces/af-shop-main";
    let foreign = serde_json::to_value(foreign()).unwrap();
    // One read each; no create, no delete.
    let client = scripted(vec![
        ("GET", path, 200, foreign.clone()),
        ("GET", path, 200, foreign),
    ]);
    let up = ensure(client.clone(), &ours(), &env(), quick())
        .await
        .unwrap_err();
    assert_eq!(up.code(), RunCode::NotOurs, "{up}");
    assert!(up.to_string().contains("af-shop-main"), "{up}");
    let down = delete(client, "af-shop-main", &env(), quick())
        .await
        .unwrap_err();
    assert_eq!(down.code(), RunCode::NotOurs, "{down}");
}

#[tokio::test]
async fn down_deletes_our_namespace_and_returns_only_when_it_is_gone() {
    let path = "/api/v1/namespaces/af-shop-main";
    let client = scripted(vec![
        ("GET", path, 200, serde_json::to_value(ours()).unwrap()),
        ("DELETE", path, 200, terminating_json()),
        ("GET", path, 200, terminating_json()),
        ("GET", path, 404, not_found()),
        // Down of what is not there is done already.
        ("GET", path, 404, not_found()),
    ]);
    delete(client.clone(), "af-shop-main", &env(), quick())
        .await
        .unwrap();
    delete(client, "af-shop-main", &env(), quick())
        .await
        .unwrap();
}

fn terminating_json() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "af-shop-main", "deletionTimestamp": "2026-11-30T00:00:00Z",
            "labels": {"dev.antifailure.managed": "true", "dev.antifailure.environment": "shop-main"}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Terminating"}
    })
}

fn not_found() -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "NotFound", "code": 404, "message": "namespaces \"af-shop-main\" not found"})
}

#[tokio::test]
async fn up_waits_out_a_namespace_still_terminating_then_creates_it() {
    let path = "/api/v1/namespaces/af-shop-main";
    let client = scripted(vec![
        ("GET", path, 200, terminating_json()),
        ("GET", path, 200, terminating_json()),
        ("GET", path, 404, not_found()),
        (
            "POST",
            "/api/v1/namespaces",
            201,
            serde_json::to_value(ours()).unwrap(),
        ),
    ]);
    let patience = Patience {
        timeout: Duration::from_secs(5),
        interval: Duration::from_millis(10),
    };
    ensure(client, &ours(), &env(), patience).await.unwrap();
}

#[tokio::test]
async fn down_names_the_finalizers_of_a_namespace_that_stays_terminating() {
    let path = "/api/v1/namespaces/af-shop-main";
    let mut script = vec![("GET", path, 200, terminating_json())];
    script.extend(std::iter::repeat_n(
        ("GET", path, 200, terminating_json()),
        40,
    ));
    let client = scripted(script);
    let err = delete(client, "af-shop-main", &env(), quick())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("still terminating") && text.contains("kubernetes"),
        "{text}"
    );
}

#[tokio::test]
async fn a_forbidden_read_is_af_run_065_naming_what_was_read_and_how_to_check_the_permission() {
    let client = scripted(vec![(
        "GET",
        "/api/v1/namespaces/af-shop-main",
        403,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
            "code": 403, "message": "namespaces \"af-shop-main\" is forbidden: User \"dev\" cannot get resource"}),
    )]);
    let err = ensure(client, &ours(), &env(), quick()).await.unwrap_err();
    assert_eq!(err.code(), RunCode::NotAllowed, "{err}");
    assert_eq!(err.category(), af_runtime::Category::Manifest);
    assert!(
        err.to_string().contains("reading namespace af-shop-main")
            && err.to_string().contains("not allowed")
            && err.to_string().contains("cannot get resource"),
        "{err}"
    );
    assert!(err.help().contains("kubectl auth can-i"), "{}", err.help());
}

#[tokio::test]
async fn a_namespace_gone_between_read_and_delete_is_done() {
    let path = "/api/v1/namespaces/af-shop-main";
    let client = scripted(vec![
        ("GET", path, 200, serde_json::to_value(ours()).unwrap()),
        ("DELETE", path, 404, not_found()),
    ]);
    delete(client, "af-shop-main", &env(), quick())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_namespace_created_by_someone_else_between_read_and_create_is_refused() {
    let path = "/api/v1/namespaces/af-shop-main";
    let client = scripted(vec![
        ("GET", path, 404, not_found()),
        (
            "POST",
            "/api/v1/namespaces",
            409,
            serde_json::json!({"kind": "Status", "apiVersion": "v1",
            "status": "Failure", "reason": "AlreadyExists", "code": 409, "message": "already exists"}),
        ),
        ("GET", path, 200, serde_json::to_value(foreign()).unwrap()),
    ]);
    let err = ensure(client, &ours(), &env(), quick()).await.unwrap_err();
    assert_eq!(err.code(), RunCode::NotOurs, "{err}");
}
