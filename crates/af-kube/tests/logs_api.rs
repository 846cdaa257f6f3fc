//! `af logs` on Kubernetes (exact exchanges): every pod of the service, each line with its pod's
//! name, following when asked.

mod api;

use af_kube::KubeRuntime;
use af_kube::render::Cluster;
use af_runtime::Runtime;
use api::scripted;
use futures_util::StreamExt;
use serde_json::json;

#[tokio::test]
async fn every_pod_of_the_service_is_read_each_line_named_by_its_pod() {
    let client = scripted(vec![
        (
            "GET",
            "/api/v1/namespaces/af-shop-main/pods",
            200,
            json!({"apiVersion": "v1", "kind": "PodList",
            "metadata": {}, "items": [{"metadata": {"name": "web-1"}}]}),
        ),
        (
            "GET",
            "/api/v1/namespaces/af-shop-main/pods/web-1/log",
            200,
            json!("listening on 0.0.0.0:8080\nGET /healthz\n"),
        ),
    ]);
    let runtime = KubeRuntime::new(
        client,
        "test",
        "test".into(),
        "af-".into(),
        "engine".into(),
        Vec::new(),
        Cluster::default(),
    );
    let id = af_manifest::EnvironmentId::derive("shop", "main");
    let lines: Vec<_> = runtime
        .logs(&id, "web", true)
        .await
        .unwrap()
        .collect()
        .await;
    let lines: Vec<(String, String)> = lines
        .into_iter()
        .map(|l| {
            let l = l.unwrap();
            (l.instance, l.line)
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("web-1".to_string(), "listening on 0.0.0.0:8080".to_string()),
            ("web-1".to_string(), "GET /healthz".to_string())
        ]
    );
}
