//! A migration Job against the API (exact exchanges): applied once with af's field manager, waited
//! for; a failed Job stops `up` with the migration's last log lines and is not retried; a Job that
//! already ran as desired is not written again; one whose template changed is deleted and made
//! anew, never patched (a real API server refuses the patch: `field is immutable`).

mod api;

use std::time::Duration;

use af_kube::apply::Patience;
use af_kube::apply::job::run;
use af_runtime::RunCode;
use api::scripted_with_bodies;
use k8s_openapi::api::batch::v1::Job;
use serde_json::json;

const JOB: &str = "/apis/batch/v1/namespaces/af-shop-main/jobs/af-migrate-web";

fn job() -> Job {
    serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "af-migrate-web", "namespace": "af-shop-main"},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "migrate", "image": "shop"}]}}}}))
    .unwrap()
}

fn with_status(status: serde_json::Value) -> serde_json::Value {
    let mut job = serde_json::to_value(job()).unwrap();
    job["status"] = status;
    job
}

fn quick() -> Patience {
    Patience {
        timeout: Duration::from_secs(5),
        interval: Duration::from_millis(10),
    }
}

#[tokio::test]
async fn a_migration_that_completes_lets_up_go_on() {
    let (client, bodies) = scripted_with_bodies(vec![
        ("GET", JOB, 404, api::status(404, "NotFound", "not found")),
        ("GET", JOB, 404, api::status(404, "NotFound", "not found")),
        ("PATCH", JOB, 200, with_status(json!({}))),
        ("GET", JOB, 200, with_status(json!({"active": 1}))),
        // While it runs, its pod is looked at for a problem that would never go away.
        (
            "GET",
            "/api/v1/namespaces/af-shop-main/pods",
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {},
                "items": [{"metadata": {"name": "af-migrate-web-x7k2p"},
                    "status": {"phase": "Running"}}]}),
        ),
        ("GET", JOB, 200, with_status(json!({"succeeded": 1}))),
    ]);
    run(client, "af-shop-main", &job(), quick()).await.unwrap();
    let applied: serde_json::Value = serde_json::from_slice(&bodies.lock().unwrap()[2]).unwrap();
    assert_eq!(applied["spec"]["backoffLimit"], 0, "never retried");
}

#[tokio::test]
async fn a_failed_migration_stops_up_with_its_last_lines() {
    let (client, _) = scripted_with_bodies(vec![
        ("GET", JOB, 404, api::status(404, "NotFound", "not found")),
        ("GET", JOB, 404, api::status(404, "NotFound", "not found")),
        ("PATCH", JOB, 200, with_status(json!({}))),
        ("GET", JOB, 200, with_status(json!({"failed": 1}))),
        (
            "GET",
            "/api/v1/namespaces/af-shop-main/pods",
            200,
            json!({"apiVersion": "v1", "kind": "PodList",
            "metadata": {}, "items": [{"metadata": {"name": "af-migrate-web-x7k2p"}}]}),
        ),
        (
            "GET",
            "/api/v1/namespaces/af-shop-main/pods/af-migrate-web-x7k2p/log",
            200,
            json!("applying 0001_orders\nERROR: relation \"orders\" already exists\n"),
        ),
    ]);
    let err = run(client, "af-shop-main", &job(), quick())
        .await
        .unwrap_err();
    assert_eq!(err.code(), RunCode::MigrationFailed);
    let text = err.to_string();
    assert!(
        text.contains("the migration of service") && text.contains("it is not retried"),
        "{text}"
    );
    assert!(!err.help().contains("docker info"), "{}", err.help());
    assert!(
        text.contains("relation \"orders\" already exists"),
        "{text}"
    );
}

#[tokio::test]
async fn a_migration_that_already_ran_is_not_written_again() {
    let done = with_status(json!({"succeeded": 1}));
    let (client, _) = scripted_with_bodies(vec![
        ("GET", JOB, 200, done.clone()),
        ("GET", JOB, 200, done.clone()),
        ("GET", JOB, 200, done),
    ]);
    let wrote = run(client, "af-shop-main", &job(), quick()).await.unwrap();
    assert!(!wrote, "no write: the script has no PATCH");
}

#[tokio::test]
async fn a_finished_migration_whose_template_changed_is_replaced_never_patched() {
    let mut earlier = with_status(json!({"succeeded": 1}));
    earlier["metadata"]["uid"] = json!("old-uid");
    earlier["spec"]["template"]["spec"]["containers"][0]["command"] = json!(["/shop", "migrate"]);
    let mut desired = job();
    desired
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .command = Some(vec!["/shop".into(), "migrate".into(), "--second".into()]);
    let (client, bodies) = scripted_with_bodies(vec![
        ("GET", JOB, 200, earlier.clone()),
        // It finished: nothing to wait for.
        ("GET", JOB, 200, earlier.clone()),
        ("DELETE", JOB, 200, earlier),
        ("GET", JOB, 404, api::status(404, "NotFound", "not found")),
        ("GET", JOB, 404, api::status(404, "NotFound", "not found")),
        ("PATCH", JOB, 200, with_status(json!({}))),
        ("GET", JOB, 200, with_status(json!({"succeeded": 1}))),
    ]);
    let wrote = run(client, "af-shop-main", &desired, quick())
        .await
        .unwrap();
    assert!(wrote);
    let sent = bodies.lock().unwrap();
    let deletion: serde_json::Value = serde_json::from_slice(&sent[2]).unwrap();
    assert_eq!(
        deletion["propagationPolicy"], "Foreground",
        "its pods go with it: {deletion}"
    );
    let applied: serde_json::Value = serde_json::from_slice(&sent[5]).unwrap();
    assert_eq!(
        applied["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["/shop", "migrate", "--second"])
    );
}
