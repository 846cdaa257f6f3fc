//! What rendering needs of the cluster, read off it (exact exchanges): k3s's resolver address and
//! its traefik in kube-system; and, where nothing can be read, the defaults with a note for each.

mod api;

use af_kube::apply::cluster::discover;
use api::{scripted, status};
use serde_json::json;

#[tokio::test]
async fn a_k3s_cluster_gives_its_resolver_and_traefik_in_kube_system() {
    let client = scripted(vec![
        (
            "GET",
            "/api/v1/namespaces/kube-system/services/kube-dns",
            200,
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                "spec": {"clusterIP": "10.43.0.10"}}),
        ),
        (
            "GET",
            "/api/v1/namespaces/ingress-nginx",
            404,
            status(404, "NotFound", "namespaces \"ingress-nginx\" not found"),
        ),
        (
            "GET",
            "/apis/apps/v1/namespaces/kube-system/deployments/traefik",
            200,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "traefik", "namespace": "kube-system"}}),
        ),
    ]);
    let (cluster, notes) = discover(client).await;
    assert_eq!(cluster.dns.to_string(), "10.43.0.10:53");
    assert_eq!(cluster.ingress_namespace, "kube-system");
    assert!(notes.is_empty(), "{notes:?}");
}

#[tokio::test]
async fn what_cannot_be_read_keeps_the_default_and_says_so() {
    let forbidden = || status(403, "Forbidden", "forbidden");
    let client = scripted(vec![
        (
            "GET",
            "/api/v1/namespaces/kube-system/services/kube-dns",
            403,
            forbidden(),
        ),
        ("GET", "/api/v1/namespaces/ingress-nginx", 403, forbidden()),
        (
            "GET",
            "/apis/apps/v1/namespaces/kube-system/deployments/traefik",
            403,
            forbidden(),
        ),
    ]);
    let (cluster, notes) = discover(client).await;
    assert_eq!(cluster, af_kube::render::Cluster::default());
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("kube-dns") && notes[0].contains("10.96.0.10:53"));
    assert!(notes[1].contains("no ingress controller found"));
}
