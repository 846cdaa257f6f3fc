//! The adapter against a stateful in-memory API server (`kube-fake-client`): what one ticket's
//! removal takes and what it leaves, and a second open of an unchanged sandbox that reuses it.

mod support;

use std::sync::Arc;

use afe_sandbox::Sandbox;
use afe_sandbox_kube::KubeSandbox;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};

async fn pod_of(client: &kube::Client, ticket: &str, name: &str) {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "afe-sandbox",
            "labels": {"afe.ticket": ticket, "app.kubernetes.io/managed-by": "afe"}},
        "spec": {"containers": [{"name": "sandbox", "image": "i"}]}}))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "afe-sandbox")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_tickets_removal_takes_its_objects_and_leaves_every_other() {
    let client = kube_fake_client::ClientBuilder::new()
        .build()
        .await
        .unwrap();
    let sandbox = KubeSandbox::with_suffixes(
        client.clone(),
        support::settings(),
        Arc::new(|| "abcde".into()),
    );
    let opened = sandbox.open(&support::spec(&[])).await.unwrap();
    assert!(opened.fresh);
    // Another ticket's Pod, and a Pod of the same ticket id that afe did not make.
    pod_of(&client, "other-ticket", "afe-other-ticket-12345").await;
    let pods = Api::<Pod>::namespaced(client.clone(), "afe-sandbox");
    let foreign: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "not-afes", "namespace": "afe-sandbox",
            "labels": {"afe.ticket": support::TICKET}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &foreign).await.unwrap();
    sandbox.remove(support::TICKET).await.unwrap();
    let mut left: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    left.sort();
    assert_eq!(left, ["afe-other-ticket-12345", "not-afes"]);
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "afe-sandbox");
    assert!(
        claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Removing again finds nothing, and that is not an error.
    sandbox.remove(support::TICKET).await.unwrap();
}

#[tokio::test]
async fn an_unchanged_sandbox_is_reused_and_its_marker_is_on_pod_and_claim() {
    let client = kube_fake_client::ClientBuilder::new()
        .build()
        .await
        .unwrap();
    let sandbox = KubeSandbox::with_suffixes(
        client.clone(),
        support::settings(),
        Arc::new(|| "abcde".into()),
    );
    let first = sandbox.open(&support::spec(&[])).await.unwrap();
    assert_eq!(
        sandbox.opened(support::TICKET).await.unwrap(),
        Some(afe_sandbox::Opened {
            fresh: false,
            ..first.clone()
        }),
        "found by its ticket alone"
    );
    let again = sandbox.open(&support::spec(&[])).await.unwrap();
    assert_eq!((again.id.as_str(), again.fresh), (first.id.as_str(), false));
    let marker = afe_sandbox::Marker::now(afe_sandbox::Lifecycle::Working, "w1");
    sandbox.mark(&first, &marker).await.unwrap();
    assert_eq!(
        sandbox.read_marker(&first).await.unwrap(),
        Some(marker.clone())
    );
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "afe-sandbox")
        .get(&first.id)
        .await
        .unwrap();
    let kept = &claim.metadata.annotations.unwrap()[afe_sandbox_kube::render::LIFECYCLE];
    assert_eq!(
        serde_json::from_str::<afe_sandbox::Marker>(kept).unwrap(),
        marker
    );
    // A changed sandbox (more memory) is made again, under a new name.
    let bigger = KubeSandbox::with_suffixes(
        client.clone(),
        support::settings(),
        Arc::new(|| "fghij".into()),
    );
    let mut spec = support::spec(&[]);
    spec.memory_bytes = Some(1 << 30);
    let remade = bigger.open(&spec).await.unwrap();
    assert!(remade.fresh && remade.id.ends_with("-fghij"), "{remade:?}");
    let pods = Api::<Pod>::namespaced(client, "afe-sandbox")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 1, "the old Pod went first");
}
