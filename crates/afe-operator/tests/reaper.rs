//! The reaper on synthetic objects in a stateful in-memory API server (`kube-fake-client`): the
//! four cases (terminal, stale, fresh, paused) on Pods and PVCs, a Pod that is merely
//! unschedulable kept while its worker is heard from, and what is not afe's left alone.

use std::time::Duration;

use afe_operator::reaper::{self, Verdict};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "afe-sandbox";
const NOW: i64 = 1_800_000_000_000;
const GRACE: Duration = Duration::from_secs(30 * 60);

fn marker(state: &str, minutes_ago: i64) -> String {
    json!({"state": state, "heartbeat_ms": NOW - minutes_ago * 60_000, "worker": "w1"}).to_string()
}

fn meta(name: &str, ticket: &str, marker: Option<String>, ours: bool) -> Value {
    let mut labels = json!({"afe.ticket": ticket});
    if ours {
        labels["app.kubernetes.io/managed-by"] = "afe".into();
    }
    let mut meta = json!({"name": name, "namespace": NS, "labels": labels});
    if let Some(marker) = marker {
        meta["annotations"] = json!({"afe.dev/lifecycle": marker});
    }
    meta
}

async fn pod(
    client: &kube::Client,
    name: &str,
    ticket: &str,
    marker: Option<String>,
    status: Value,
) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": meta(name, ticket, marker, true),
        "spec": {"containers": [{"name": "sandbox", "image": "afe-sandbox"}]},
        "status": status,
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

async fn claim(
    client: &kube::Client,
    name: &str,
    ticket: &str,
    marker: Option<String>,
    ours: bool,
) {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": meta(name, ticket, marker, ours),
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

async fn names<K>(client: &kube::Client) -> Vec<String>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let mut names: Vec<String> = Api::<K>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn terminal_and_stale_go_fresh_and_paused_stay_and_nothing_else_is_touched() {
    let client = kube_fake_client::ClientBuilder::new()
        .build()
        .await
        .unwrap();
    let running = json!({"phase": "Running"});
    pod(
        &client,
        "afe-ended-aaaaa",
        "ended",
        Some(marker("ended", 1)),
        running.clone(),
    )
    .await;
    pod(
        &client,
        "afe-stale-bbbbb",
        "stale",
        Some(marker("working", 45)),
        running.clone(),
    )
    .await;
    pod(
        &client,
        "afe-fresh-ccccc",
        "fresh",
        Some(marker("working", 2)),
        running.clone(),
    )
    .await;
    pod(
        &client,
        "afe-paused-ddddd",
        "paused",
        Some(marker("paused", 600)),
        running,
    )
    .await;
    // Unschedulable for an hour, its worker still waiting on it: kept.
    pod(
        &client,
        "afe-pending-eeeee",
        "pending",
        Some(marker("open", 1)),
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available"}]}),
    )
    .await;
    claim(
        &client,
        "afe-ended-aaaaa",
        "ended",
        Some(marker("ended", 1)),
        true,
    )
    .await;
    claim(
        &client,
        "afe-paused-ddddd",
        "paused",
        Some(marker("paused", 600)),
        true,
    )
    .await;
    // Someone else's claim with an afe.ticket label but not afe's managed-by: never looked at.
    claim(
        &client,
        "not-afes",
        "ended",
        Some(marker("ended", 1)),
        false,
    )
    .await;

    let judged = reaper::sweep(&client, NS, NOW, GRACE).await.unwrap();
    assert_eq!(reaper::removed(&judged), 3, "{judged:#?}");
    let verdict = |object: &str| {
        judged
            .iter()
            .find(|j| j.object == object)
            .unwrap()
            .verdict
            .clone()
    };
    assert_eq!(
        verdict("Pod/afe-ended-aaaaa"),
        Verdict::Remove("its ticket ended".into())
    );
    assert!(matches!(verdict("Pod/afe-stale-bbbbb"), Verdict::Remove(why) if why.contains("45m")));
    assert!(matches!(verdict("Pod/afe-fresh-ccccc"), Verdict::Keep(_)));
    assert!(matches!(verdict("Pod/afe-paused-ddddd"), Verdict::Keep(_)));
    assert!(matches!(verdict("Pod/afe-pending-eeeee"), Verdict::Keep(_)));
    assert!(!judged.iter().any(|j| j.object.ends_with("not-afes")));

    assert_eq!(
        names::<Pod>(&client).await,
        ["afe-fresh-ccccc", "afe-paused-ddddd", "afe-pending-eeeee"]
    );
    assert_eq!(
        names::<PersistentVolumeClaim>(&client).await,
        ["afe-paused-ddddd", "not-afes"]
    );
    // A second sweep finds nothing more to remove.
    let again = reaper::sweep(&client, NS, NOW, GRACE).await.unwrap();
    assert_eq!(reaper::removed(&again), 0);
}

/// The reaper's error code is the one docs/errors.md lists, and says what stopped it.
#[test]
fn the_reapers_error_is_documented() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md"),
    )
    .unwrap();
    assert!(doc.contains("### AFE-OPR-001 "));
    let err = reaper::ReapError {
        operation: "list the Pods".into(),
        namespace: NS.into(),
        detail: "403".into(),
    };
    assert!(
        err.to_string()
            .starts_with("AFE-OPR-001 the reaper could not list the Pods")
    );
}
