//! The reconcile against a stateful API server (kube-fake-client behind a layer that fills
//! defaults and canonicalizes quantities as a real server does, and records every request):
//! every condition and reason seed 003 names reached, what is written and what is never touched.

mod cluster;
mod example;

use cluster::{Cluster, EVERYTHING, Installed, NS, SANDBOX_NS, condition};
use serde_json::{Value, json};

const READY: &str = "Ready";
/// Neither KEDA nor CloudNativePG installed.
const NOTHING: Installed = Installed {
    keda: false,
    cloudnative_pg: false,
};

fn no_pin(engine: &mut Value) {
    engine["spec"]["config"]
        .as_object_mut()
        .unwrap()
        .remove("revision");
}

/// The example, reconciled and rolled out: a running installation.
async fn running(installed: Installed, edit: impl FnOnce(&mut Value)) -> Cluster {
    let cluster = Cluster::example(installed, edit).await;
    cluster.reconcile().await.unwrap();
    cluster.roll_out().await;
    cluster.reconcile().await.unwrap();
    cluster
}

#[tokio::test]
async fn the_example_is_built_and_reports_every_condition() {
    let cluster = Cluster::example(EVERYTHING, |_| {}).await;
    cluster.reconcile().await.unwrap();
    for (api_version, kind, namespace, name) in [
        ("v1", "ConfigMap", NS, "afe-config"),
        ("apps/v1", "Deployment", NS, "afe-serve"),
        ("apps/v1", "Deployment", NS, "afe-worker"),
        ("v1", "Service", NS, "afe-api"),
        ("networking.k8s.io/v1", "Ingress", NS, "afe-api"),
        ("keda.sh/v1alpha1", "ScaledObject", NS, "afe-worker"),
        (
            "networking.k8s.io/v1",
            "NetworkPolicy",
            SANDBOX_NS,
            "afe-sandbox-ingress",
        ),
    ] {
        let object = cluster.object(api_version, kind, namespace, name).await;
        let object = object.unwrap_or_else(|| panic!("no {kind} {name}"));
        let fields = object["metadata"]["managedFields"].as_array().cloned();
        if let Some(fields) = fields {
            assert!(
                fields.iter().all(|f| f["manager"] == "afe-operator"),
                "one field manager: {fields:?}"
            );
        }
    }
    let engine = cluster.engine().await;
    let revision = engine.status.as_ref().unwrap().revision.clone().unwrap();
    assert!(
        revision.starts_with("04cf1cc0ea69"),
        "the example's pin names its revision: {revision}"
    );
    assert_eq!(condition(&engine, "ConfigValidated").1, "Valid");
    assert_eq!(condition(&engine, "RevisionPinned").1, "RevisionMatches");
    assert_eq!(condition(&engine, "AutoscalingReady").1, "ScaledObject");
    assert_eq!(
        condition(&engine, READY).0..condition(&engine, READY).1,
        "False".to_string().."Progressing".to_string()
    );
    let status = engine.status.clone().unwrap();
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(1))
    );
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(
        status.endpoints,
        vec![
            "http://afe-api.afe.svc".to_string(),
            "https://afe.internal".to_string()
        ]
    );
    // The configuration serve reads is the validated config: its resources, the source's keys and
    // the generated Runtime, and the revision it has.
    let config = cluster.get("ConfigMap", "afe-config").await;
    assert_eq!(
        config["metadata"]["annotations"]["afe.dev/revision"],
        revision.as_str()
    );
    let files = config["data"].as_object().unwrap();
    for key in [
        "triager.md",
        "generated.flow.fix-bug.yaml",
        "generated.runtime.afe.yaml",
    ] {
        assert!(files.contains_key(key), "{key} in {:?}", files.keys());
    }
    let folder = tempfile_folder(files);
    let loaded = afe_config::load_folder(folder.path()).expect("serve's folder is a valid config");
    assert_eq!(
        afe_config::Revision::of(&loaded).hash,
        revision,
        "serve computes the same revision"
    );
    assert!(loaded.runtime.is_some());

    cluster.roll_out().await;
    cluster.reconcile().await.unwrap();
    let engine = cluster.engine().await;
    assert_eq!(condition(&engine, READY).1, "Running");
}

fn tempfile_folder(files: &serde_json::Map<String, Value>) -> TempDir {
    let dir = TempDir::new();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text.as_str().unwrap()).unwrap();
    }
    dir
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "afe-operator-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn a_second_reconcile_of_an_unchanged_installation_writes_nothing() {
    for managed in [false, true] {
        let cluster = running(EVERYTHING, |engine| {
            if managed {
                // 2048Mi is stored as 2Gi: the same amount, in the server's spelling.
                engine["spec"]["afe"]["store"] =
                    json!({"managed": {"instances": 1, "storage": "2048Mi"}});
                engine["spec"]["afe"]["broker"] = json!({"managed": {"storage": "1024Mi"}});
            }
        })
        .await;
        if managed {
            let store = cluster.get("Cluster", "afe-store").await;
            assert_eq!(
                store["spec"]["storage"]["size"], "2Gi",
                "the fake canonicalized it"
            );
        }
        let before = cluster.engine().await;
        assert_eq!(condition(&before, READY).1, "Running");
        cluster.clear();
        cluster.reconcile().await.unwrap();
        assert_eq!(
            cluster.writes(),
            Vec::<String>::new(),
            "managed data: {managed}"
        );
        assert!(!cluster.sent().is_empty(), "it did read");
        assert_eq!(cluster.engine().await.status, before.status);
    }
}

#[tokio::test]
async fn without_keda_workers_run_at_max_replicas_and_autoscaling_is_not_ready() {
    let cluster = Cluster::example(NOTHING, |_| {}).await;
    cluster.reconcile().await.unwrap();
    let engine = cluster.engine().await;
    let (status, reason, message) = condition(&engine, "AutoscalingReady");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "KEDAAbsent"));
    assert!(message.contains("(20)"), "{message}");
    let worker = cluster.get("Deployment", "afe-worker").await;
    assert_eq!(worker["spec"]["replicas"], 20);
    assert!(
        cluster
            .sent()
            .iter()
            .all(|s| !s.path.contains("/scaledobjects")),
        "a kind the server does not serve is never asked for: {:?}",
        cluster.sent()
    );
}

#[tokio::test]
async fn keda_cannot_reach_an_external_broker_without_a_trigger_authentication() {
    let cluster = Cluster::example(EVERYTHING, |engine| {
        let autoscaling = &mut engine["spec"]["deployment"]["workers"]["autoscaling"];
        autoscaling
            .as_object_mut()
            .unwrap()
            .remove("triggerAuthentication");
    })
    .await;
    cluster.reconcile().await.unwrap();
    let (status, reason, message) = condition(&cluster.engine().await, "AutoscalingReady");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "TriggerAuthenticationMissing")
    );
    assert!(message.contains("triggerAuthentication"), "{message}");
    assert!(!cluster.has("ScaledObject", "afe-worker").await);
    assert_eq!(
        cluster.get("Deployment", "afe-worker").await["spec"]["replicas"],
        20
    );
}

#[tokio::test]
async fn keda_installed_later_takes_the_workers_over() {
    let cluster = Cluster::example(NOTHING, |_| {}).await;
    cluster.reconcile().await.unwrap();
    cluster.installed.lock().unwrap().keda = true;
    cluster.clear();
    cluster.reconcile().await.unwrap();
    let applied = cluster.applied("/deployments/afe-worker");
    assert_eq!(
        applied["spec"]["replicas"],
        Value::Null,
        "applied again, without the replicas it no longer asks for"
    );
    assert!(cluster.has("ScaledObject", "afe-worker").await);
    assert_eq!(
        condition(&cluster.engine().await, "AutoscalingReady").1,
        "ScaledObject"
    );
}

#[tokio::test]
async fn with_keda_the_worker_deployment_carries_no_replicas() {
    let cluster = Cluster::example(EVERYTHING, |_| {}).await;
    cluster.reconcile().await.unwrap();
    let applied = cluster.applied("/deployments/afe-worker");
    assert_eq!(
        applied["spec"]["replicas"],
        Value::Null,
        "the operator writes no replicas: KEDA does"
    );
    let scaled = cluster.get("ScaledObject", "afe-worker").await;
    assert_eq!(scaled["spec"]["maxReplicaCount"], 20);
}

#[tokio::test]
async fn managed_data_is_a_cloudnativepg_cluster_and_a_redis_and_external_is_by_reference() {
    let cluster = Cluster::example(EVERYTHING, |engine| {
        engine["spec"]["afe"]["store"] = json!({"managed": {"instances": 3}});
        engine["spec"]["afe"]["broker"] = json!({"managed": {}});
    })
    .await;
    cluster.reconcile().await.unwrap();
    let store = cluster.get("Cluster", "afe-store").await;
    assert_eq!(store["spec"]["instances"], 3);
    assert!(cluster.has("StatefulSet", "afe-redis").await);
    assert!(cluster.has("Service", "afe-redis").await);
    let serve = cluster.get("Deployment", "afe-serve").await;
    let env = serve["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
    assert!(
        env.contains("afe-store-app") && env.contains("redis://afe-redis:6379/"),
        "{env}"
    );

    // Back to external: the managed services are the operator's, and go.
    cluster
        .edit_engine(|engine| {
            engine["spec"]["afe"]["store"] =
                json!({"external": {"secretRef": {"name": "afe-postgres", "key": "dsn"}}});
            engine["spec"]["afe"]["broker"] =
                json!({"external": {"secretRef": {"name": "afe-redis", "key": "AFE_REDIS_URL"}}});
        })
        .await;
    cluster.reconcile().await.unwrap();
    assert!(!cluster.has("Cluster", "afe-store").await);
    assert!(!cluster.has("StatefulSet", "afe-redis").await);
    let serve = cluster.get("Deployment", "afe-serve").await;
    let env = &serve["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(env.to_string().contains("afe-postgres"), "{env}");
    assert!(
        cluster.sent().iter().all(|s| !s.path.contains("/secrets")),
        "the operator never reads a Secret"
    );
}

#[tokio::test]
async fn a_managed_store_without_cloudnativepg_says_so() {
    let cluster = Cluster::example(
        Installed {
            keda: true,
            cloudnative_pg: false,
        },
        |engine| engine["spec"]["afe"]["store"] = json!({"managed": {}}),
    )
    .await;
    cluster.reconcile().await.unwrap();
    let engine = cluster.engine().await;
    assert_eq!(condition(&engine, READY).1, "CloudNativePGAbsent");
    assert!(cluster.sent().iter().all(|s| !s.path.contains("/clusters")));
}

#[tokio::test]
async fn an_object_that_is_not_the_operators_is_left_alone_named_and_the_rest_goes_on() {
    let cluster = Cluster::example(EVERYTHING, |_| {}).await;
    let foreign = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "afe-api", "namespace": NS, "labels": {"team": "web"}},
        "spec": {"ports": [{"port": 8443}]},
    });
    cluster.create(foreign).await;
    let before = cluster.get("Service", "afe-api").await;
    cluster.reconcile().await.unwrap();
    let after = cluster.get("Service", "afe-api").await;
    assert_eq!(after, before, "the foreign Service is untouched");
    assert!(
        cluster
            .sent()
            .iter()
            .all(|s| !(s.writes() && s.path.ends_with("/services/afe-api"))),
        "no write was even tried on it"
    );
    let engine = cluster.engine().await;
    let (status, reason, message) = condition(&engine, READY);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ResourceConflict")
    );
    assert!(message.contains("Service/afe-api"), "{message}");
    assert!(
        cluster.has("Deployment", "afe-serve").await,
        "the rest went on"
    );
    let events: kube::api::ObjectList<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(cluster.direct.clone(), NS)
            .list(&Default::default())
            .await
            .unwrap();
    let event = events
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("ResourceConflict"))
        .expect("an Event");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.note.as_deref().unwrap().contains("Service/afe-api"));
    assert_eq!(
        event.regarding.as_ref().unwrap().name.as_deref(),
        Some("afe")
    );
    assert_eq!(
        event.related.as_ref().unwrap().name.as_deref(),
        Some("afe-api")
    );
}

#[tokio::test]
async fn a_pin_that_does_not_match_rotates_nothing_and_names_both_hashes() {
    let cluster = running(EVERYTHING, no_pin).await;
    let running_revision = cluster.engine().await.status.unwrap().revision.unwrap();
    let serve_before = cluster.get("Deployment", "afe-serve").await;
    // The user pins the running revision, then changes a prompt: a new revision, not the pinned one.
    cluster
        .edit_engine(|engine| engine["spec"]["config"]["revision"] = json!(running_revision[..12]))
        .await;
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(cluster.direct.clone(), NS);
    api.patch(
        "afe-source",
        &Default::default(),
        &kube::api::Patch::Merge(
            json!({"data": {"triager.md": "Triage {{ bug_report.title }} briefly."}}),
        ),
    )
    .await
    .unwrap();
    cluster.clear();
    cluster.reconcile().await.unwrap();
    let engine = cluster.engine().await;
    let (status, reason, message) = condition(&engine, "RevisionPinned");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RevisionMismatch")
    );
    let computed = condition(&engine, "ConfigValidated")
        .2
        .strip_prefix("revision ")
        .unwrap()
        .to_string();
    assert_ne!(computed, running_revision);
    assert!(
        message.contains(&running_revision[..12]) && message.contains(&computed),
        "{message}"
    );
    assert_eq!(
        engine.status.as_ref().unwrap().revision.as_deref(),
        Some(running_revision.as_str())
    );
    assert_eq!(condition(&engine, READY).1, "RevisionMismatch");
    let writes = cluster.writes();
    assert_eq!(
        writes,
        vec!["PATCH /apis/afe.dev/v1alpha1/namespaces/afe/agentflowengines/afe/status"],
        "only the status"
    );
    let serve_after = cluster.get("Deployment", "afe-serve").await;
    assert_eq!(serve_after, serve_before);

    // The pin moved to the new revision: it rolls.
    cluster
        .edit_engine(|engine| engine["spec"]["config"]["revision"] = json!(computed))
        .await;
    cluster.reconcile().await.unwrap();
    let serve = cluster.get("Deployment", "afe-serve").await;
    assert_eq!(
        serve["spec"]["template"]["metadata"]["annotations"]["afe.dev/revision"],
        computed.as_str()
    );
}

#[tokio::test]
async fn an_invalid_config_changes_nothing_and_says_why_field_by_field() {
    let cluster = running(EVERYTHING, no_pin).await;
    let config_before = cluster.get("ConfigMap", "afe-config").await;
    let flows: kube::Api<afe_config::kinds::Flow> =
        kube::Api::namespaced(cluster.direct.clone(), NS);
    flows
        .patch(
            "fix-bug",
            &Default::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"nodes": [{"id": "only", "agent": "nobody"}]}}),
            ),
        )
        .await
        .unwrap();
    cluster.clear();
    cluster.reconcile().await.unwrap();
    let engine = cluster.engine().await;
    let (status, reason, message) = condition(&engine, "ConfigValidated");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Invalid"));
    assert!(
        message.contains("Flow/fix-bug") && message.contains("nobody"),
        "{message}"
    );
    assert!(message.contains("AFE-CFG-"), "{message}");
    assert_eq!(condition(&engine, READY).1, "ConfigInvalid");
    assert_eq!(
        cluster.writes(),
        vec!["PATCH /apis/afe.dev/v1alpha1/namespaces/afe/agentflowengines/afe/status"]
    );
    assert_eq!(cluster.get("ConfigMap", "afe-config").await, config_before);
}

#[tokio::test]
async fn a_missing_source_configmap_is_named() {
    let cluster = Cluster::example(EVERYTHING, |engine| {
        engine["spec"]["config"]["configMapRef"]["name"] = json!("not-there");
    })
    .await;
    cluster.reconcile().await.unwrap();
    let engine = cluster.engine().await;
    let (status, reason, message) = condition(&engine, "ConfigValidated");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ConfigMapMissing")
    );
    assert!(message.contains("not-there"), "{message}");
    assert!(!cluster.has("Deployment", "afe-serve").await);
}

#[tokio::test]
async fn what_is_no_longer_asked_for_is_removed_when_it_is_the_operators() {
    let cluster = running(EVERYTHING, no_pin).await;
    assert!(cluster.has("Ingress", "afe-api").await);
    cluster
        .edit_engine(|engine| {
            let deployment = engine["spec"]["deployment"].as_object_mut().unwrap();
            deployment.remove("ingress");
            engine["spec"]["afe"]["sandbox"]["networkPolicy"] = json!({"manage": false});
        })
        .await;
    cluster.reconcile().await.unwrap();
    assert!(!cluster.has("Ingress", "afe-api").await);
    assert!(
        cluster
            .object(
                "networking.k8s.io/v1",
                "NetworkPolicy",
                SANDBOX_NS,
                "afe-sandbox-ingress"
            )
            .await
            .is_none()
    );
    let engine = cluster.engine().await;
    assert_eq!(
        engine.status.unwrap().endpoints,
        vec!["http://afe-api.afe.svc".to_string()]
    );
}

fn sandbox_pod(name: &str, marker: Option<(&str, i64)>) -> Value {
    let mut meta = json!({"name": name, "namespace": SANDBOX_NS,
        "labels": {"afe.ticket": name, "app.kubernetes.io/managed-by": "afe"}});
    if let Some((state, minutes_ago)) = marker {
        meta["annotations"] = json!({"afe.dev/lifecycle": json!({
            "state": state, "heartbeat_ms": cluster::NOW_MS - minutes_ago * 60_000, "worker": "w1"}).to_string()});
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "sandbox", "image": "afe-sandbox"}]}})
}

#[tokio::test]
async fn the_reaper_runs_in_every_reconcile_and_its_removals_are_counted() {
    let cluster = Cluster::example(EVERYTHING, no_pin).await;
    for pod in [
        sandbox_pod("terminal", Some(("ended", 1))),
        sandbox_pod("stale", Some(("working", 31))),
        sandbox_pod("fresh", Some(("working", 1))),
        sandbox_pod("paused", Some(("paused", 600))),
    ] {
        cluster.create(pod).await;
    }
    cluster.reconcile().await.unwrap();
    for (name, kept) in [
        ("terminal", false),
        ("stale", false),
        ("fresh", true),
        ("paused", true),
    ] {
        assert_eq!(
            cluster
                .object("v1", "Pod", SANDBOX_NS, name)
                .await
                .is_some(),
            kept,
            "{name}"
        );
    }
    assert_eq!(
        cluster.engine().await.status.unwrap().orphans_removed,
        Some(2)
    );
    cluster.reconcile().await.unwrap();
    assert_eq!(
        cluster.engine().await.status.unwrap().orphans_removed,
        Some(2),
        "counted once"
    );

    // A grace of its own: the fresh one (1 minute) is now stale.
    cluster
        .edit_engine(|engine| engine["spec"]["afe"]["sandbox"]["orphanGrace"] = json!("30s"))
        .await;
    cluster.reconcile().await.unwrap();
    assert!(
        cluster
            .object("v1", "Pod", SANDBOX_NS, "fresh")
            .await
            .is_none()
    );
    assert!(
        cluster
            .object("v1", "Pod", SANDBOX_NS, "paused")
            .await
            .is_some()
    );
    assert_eq!(
        cluster.engine().await.status.unwrap().orphans_removed,
        Some(3)
    );
}

#[tokio::test]
async fn an_unreadable_orphan_grace_is_a_config_problem_and_nothing_is_reaped() {
    let cluster = Cluster::example(EVERYTHING, |engine| {
        engine["spec"]["afe"]["sandbox"]["orphanGrace"] = json!("soon");
    })
    .await;
    cluster
        .create(sandbox_pod("terminal", Some(("ended", 1))))
        .await;
    cluster.reconcile().await.unwrap();
    let engine = cluster.engine().await;
    let (_, reason, message) = condition(&engine, "ConfigValidated");
    assert_eq!(reason, "Invalid");
    assert!(message.contains("orphanGrace"), "{message}");
    assert!(
        cluster
            .object("v1", "Pod", SANDBOX_NS, "terminal")
            .await
            .is_some()
    );
}

/// The verb, API group, resource (with its subresource) and namespace a request is checked for.
fn authorized_as(method: &http::Method, path: &str) -> Option<(String, String, String, String)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match *parts.first()? {
        "api" => ("", &parts[2..]),
        "apis" => (parts[1], &parts[3..]),
        _ => return None,
    };
    // Discovery (`/apis/keda.sh/v1alpha1`) is open to every authenticated account.
    let ["namespaces", namespace, resource, rest @ ..] = rest else {
        return None;
    };
    let resource = match rest {
        [_, sub] => format!("{resource}/{sub}"),
        _ => resource.to_string(),
    };
    let verb = match (method.as_str(), rest.is_empty()) {
        ("GET", true) => "list",
        ("GET", false) => "get",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", _) => "delete",
        (other, _) => panic!("{other} {path}"),
    };
    Some((verb.into(), group.into(), resource, namespace.to_string()))
}

/// Whether the Role in `file` allows `verb` on `group`/`resource`.
fn allows(file: &str, verb: &str, group: &str, resource: &str) -> bool {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/operator")
        .join(file);
    let role: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let has = |list: &Value, item: &str| list.as_array().unwrap().iter().any(|v| v == item);
    role["rules"].as_array().unwrap().iter().any(|rule| {
        has(&rule["apiGroups"], group)
            && has(&rule["resources"], resource)
            && has(&rule["verbs"], verb)
    })
}

/// Least privilege, one way: every request of a reconcile that goes through everything — managed
/// data, KEDA, a foreign object, pruning, the reaper — is one the operator's two Roles allow (a
/// request they do not allow would be a 403 on a real cluster). docs/afe-operator.md lists them.
#[tokio::test]
async fn every_request_the_reconcile_makes_is_one_its_roles_allow() {
    let cluster = Cluster::example(EVERYTHING, |engine| {
        engine["spec"]["afe"]["store"] = json!({"managed": {}});
        engine["spec"]["afe"]["broker"] = json!({"managed": {}});
    })
    .await;
    cluster
        .create(sandbox_pod("terminal", Some(("ended", 1))))
        .await;
    cluster
        .create(json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "afe-api", "namespace": NS}, "spec": {"defaultBackend": {"service": {"name": "x", "port": {"number": 80}}}}}))
        .await;
    cluster.reconcile().await.unwrap();
    cluster
        .edit_engine(|engine| {
            engine["spec"]["afe"]["broker"] =
                json!({"external": {"secretRef": {"name": "afe-redis"}}});
            engine["spec"]["afe"]["store"] =
                json!({"external": {"secretRef": {"name": "afe-postgres"}}});
            engine["spec"]["afe"]["sandbox"]["networkPolicy"] = json!({"manage": false});
            engine["spec"]["deployment"]["workers"]
                .as_object_mut()
                .unwrap()
                .remove("autoscaling");
        })
        .await;
    cluster.reconcile().await.unwrap();
    let mut checked = std::collections::BTreeSet::new();
    for sent in cluster.sent() {
        let Some((verb, group, resource, namespace)) = authorized_as(&sent.method, &sent.path)
        else {
            continue;
        };
        let role = match namespace.as_str() {
            NS => "role.yaml",
            SANDBOX_NS => "role-sandbox.yaml",
            other => panic!(
                "a request in namespace {other}: {} {}",
                sent.method, sent.path
            ),
        };
        assert!(
            allows(role, &verb, &group, &resource),
            "{role} does not allow {verb} {group}/{resource}: {} {}",
            sent.method,
            sent.path
        );
        checked.insert(format!("{namespace} {verb} {group}/{resource}"));
    }
    for expected in [
        "afe patch afe.dev/agentflowengines/status",
        "afe create events.k8s.io/events",
        "afe delete apps/statefulsets",
        "afe delete keda.sh/scaledobjects",
        "afe delete postgresql.cnpg.io/clusters",
        "afe-sandbox delete /pods",
        "afe-sandbox delete networking.k8s.io/networkpolicies",
    ] {
        assert!(
            checked.contains(expected),
            "{expected} not exercised: {checked:#?}"
        );
    }
}

/// The controller itself, run on the resource's namespace: its watches start (the afe kinds, the
/// source ConfigMap, what it owns — never KEDA's or CloudNativePG's), and the resource it lists is
/// reconciled without anyone calling the reconcile.
#[tokio::test]
async fn the_controller_reconciles_what_it_finds_in_its_namespace() {
    let cluster = Cluster::example(NOTHING, no_pin).await;
    let ctx = std::sync::Arc::new(afe_operator::reconcile::Context::new(
        cluster.client.clone(),
        kube::runtime::events::Recorder::new(
            cluster.client.clone(),
            kube::runtime::events::Reporter {
                controller: "afe-operator".to_string(),
                instance: None,
            },
        ),
        std::sync::Arc::new(|| cluster::NOW_MS),
        std::time::Duration::from_secs(60),
    ));
    let running = tokio::spawn(afe_operator::controller::run(
        cluster.client.clone(),
        NS,
        ctx,
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let engine = loop {
        let engine = cluster.engine().await;
        let reconciled = engine
            .status
            .as_ref()
            .is_some_and(|s| !s.conditions.is_empty());
        if reconciled {
            break engine;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the controller never reconciled the AgentFlowEngine: {:?}",
            cluster.sent()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    running.abort();
    assert_eq!(condition(&engine, "ConfigValidated").1, "Valid");
    assert!(cluster.has("Deployment", "afe-serve").await);
    let watched: Vec<String> = cluster
        .sent()
        .iter()
        .filter(|s| s.path.contains("/namespaces/afe/"))
        .map(|s| s.path.clone())
        .collect();
    assert!(
        watched
            .iter()
            .all(|p| !p.contains("scaledobjects") && !p.contains("clusters")),
        "{watched:?}"
    );
}
