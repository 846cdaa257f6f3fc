//! Every object the operator builds, as reviewed files (`tests/golden/`), for the example
//! installation (external data; with KEDA and without) and a managed one; and what must hold
//! whatever the goldens say. `AFE_UPDATE_GOLDEN=1` rewrites the goldens.

use std::collections::BTreeMap;
use std::path::Path;

use afe_config::engine::AgentFlowEngine;
use afe_operator::build::{self, Inputs};
use serde_json::Value;

fn example() -> AgentFlowEngine {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/afe/cluster/engine.yaml"),
    )
    .unwrap();
    let mut engine: AgentFlowEngine = serde_saphyr::from_str(&text).unwrap();
    engine.metadata.uid = Some("0b6e2c1a-7f00-4c5e-9a61-000000000001".to_string());
    engine
}

fn managed() -> AgentFlowEngine {
    let mut engine = example();
    engine.spec.afe.store =
        serde_json::from_value(serde_json::json!({"managed": {"instances": 3, "storage": "20Gi"}}))
            .unwrap();
    engine.spec.afe.broker =
        serde_json::from_value(serde_json::json!({"managed": {"storage": "2Gi"}})).unwrap();
    engine.spec.afe.sandbox.network_policy =
        Some(serde_json::from_value(serde_json::json!({"manage": false})).unwrap());
    engine
}

fn files() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "flow.yaml".to_string(),
        "apiVersion: afe.dev/v1alpha1\nkind: Flow\n".to_string(),
    )])
}

/// Every object built, as JSON values, in the order they are applied.
fn built(engine: &AgentFlowEngine, keda: bool) -> Vec<Value> {
    let files = files();
    build::desired(&Inputs {
        engine,
        revision: "04cf1cc0ea69d1",
        files: &files,
        keda,
        cloudnative_pg: true,
    })
}

fn yaml(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| {
            let o = afe_sandbox_kube::render::sorted_keys(o.clone());
            format!("---\n{}", serde_saphyr::to_string(&o).unwrap())
        })
        .collect()
}

fn golden(name: &str, text: &str) {
    afe_testkit::golden(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden"),
        name,
        text,
    );
}

#[test]
fn the_built_objects_match_their_goldens() {
    golden("external-keda.yaml", &yaml(&built(&example(), true)));
    golden("external-no-keda.yaml", &yaml(&built(&example(), false)));
    golden("managed.yaml", &yaml(&built(&managed(), true)));
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn serve_gets_no_worker_secret_and_no_secret_value_is_anywhere() {
    let objects = built(&example(), true);
    let serve = container(find(&objects, "Deployment", "afe-serve"));
    let worker = container(find(&objects, "Deployment", "afe-worker"));
    let names = |c: &Value| -> Vec<String> {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    for secret in ["OPENROUTER_API_KEY", "GITHUB_TOKEN"] {
        assert!(
            names(worker).contains(&secret.to_string()),
            "{secret} reaches the workers"
        );
        assert!(
            !names(serve).contains(&secret.to_string()),
            "{secret} never reaches serve"
        );
    }
    assert!(serve.get("envFrom").is_none());
    assert!(names(serve).contains(&"AFE_API_TOKEN".to_string()));
    // Every variable that comes from a Secret comes by reference.
    for c in [serve, worker] {
        for e in c["env"].as_array().unwrap() {
            let name = e["name"].as_str().unwrap();
            if [
                "AFE_STORE_URL",
                "AFE_BROKER_URL",
                "AFE_API_TOKEN",
                "AFE_OTLP_HEADERS",
                "OPENROUTER_API_KEY",
                "GITHUB_TOKEN",
            ]
            .contains(&name)
            {
                assert!(
                    e.get("value").is_none() && e["valueFrom"]["secretKeyRef"].is_object(),
                    "{e}"
                );
            }
        }
    }
}

#[test]
fn keda_present_scales_the_workers_and_absent_runs_them_at_their_maximum() {
    let with = built(&example(), true);
    assert!(
        find(&with, "Deployment", "afe-worker")["spec"]
            .get("replicas")
            .is_none(),
        "no replicas under KEDA"
    );
    let scaled = find(&with, "ScaledObject", "afe-worker");
    assert_eq!(scaled["spec"]["maxReplicaCount"], 20);
    assert_eq!(
        scaled["spec"]["triggers"][0]["authenticationRef"]["name"],
        "keda-redis"
    );
    // The stream and group KEDA reads are the queue's own.
    assert_eq!(
        scaled["spec"]["triggers"][0]["metadata"]["consumerGroup"],
        afe_queue::CONSUMER_GROUP
    );
    assert_eq!(
        scaled["spec"]["triggers"][0]["metadata"]["stream"],
        "afe:tickets"
    );
    let without = built(&example(), false);
    assert_eq!(
        find(&without, "Deployment", "afe-worker")["spec"]["replicas"],
        20
    );
    assert!(!without.iter().any(|o| o["kind"] == "ScaledObject"));
}

#[test]
fn managed_data_is_one_cnpg_cluster_and_one_redis_read_by_reference() {
    let objects = built(&managed(), true);
    assert_eq!(
        find(&objects, "Cluster", "afe-store")["spec"]["instances"],
        3
    );
    assert_eq!(
        find(&objects, "StatefulSet", "afe-redis")["spec"]["replicas"],
        1
    );
    let serve = container(find(&objects, "Deployment", "afe-serve"));
    let env = |name: &str| {
        serve["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        env("AFE_STORE_URL")["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "afe-store-app", "key": "uri", "optional": false})
    );
    assert_eq!(env("AFE_BROKER_URL")["value"], "redis://afe-redis:6379/");
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "NetworkPolicy" && o["metadata"]["namespace"] == "afe-sandbox"),
        "sandbox.networkPolicy.manage false: the sandbox namespace's policy is the admin's"
    );
    // Redis has no password: where policies are enforced, only serve and the workers reach it.
    let redis = find(&objects, "NetworkPolicy", "afe-redis");
    let from = &redis["spec"]["ingress"][0]["from"];
    let components: Vec<&str> = from
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(components, ["serve", "worker"]);
    assert_eq!(redis["spec"]["ingress"][0]["ports"][0]["port"], 6379);
    let worker = find(&objects, "NetworkPolicy", "afe-worker");
    assert_eq!(
        worker["spec"]["ingress"],
        serde_json::json!([]),
        "nothing reaches a worker"
    );
}

#[test]
fn everything_in_the_engines_namespace_is_owned_and_the_sandbox_policy_is_found_by_label() {
    for object in built(&example(), true) {
        let owners = &object["metadata"]["ownerReferences"];
        if object["metadata"]["namespace"] == "afe" {
            assert_eq!(owners[0]["kind"], "AgentFlowEngine", "{object}");
            assert_eq!(owners[0]["controller"], true);
        } else {
            assert_eq!(object["kind"], "NetworkPolicy");
            assert!(owners.is_null(), "no ownerReference across namespaces");
            assert_eq!(
                object["metadata"]["labels"]["app.kubernetes.io/managed-by"],
                "afe-operator"
            );
        }
    }
}

/// Every built object of a kind the official schemas know (not CloudNativePG's or KEDA's custom
/// resources) passes `kubernetes-validate --strict` on every version from 1.30.
#[test]
fn every_built_object_passes_the_official_schemas_strictly() {
    let mut documents = Vec::new();
    for (engine, keda) in [(example(), true), (example(), false), (managed(), true)] {
        for object in built(&engine, keda) {
            if !["Cluster", "ScaledObject"].contains(&object["kind"].as_str().unwrap()) {
                documents.push(serde_saphyr::to_string(&object).unwrap());
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("afe-operator-schemas-{}", std::process::id()));
    afe_testkit::kubernetes_validate::assert_strict_on_every_version(
        &afe_testkit::kubernetes_validate::write_each(&dir, &documents),
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What a change of the spec can take away is in `optional` (so the reconcile can remove it),
/// and what is always built is not: every object of the fullest installation is one or the other.
#[test]
fn every_object_that_can_come_and_go_is_one_the_reconcile_can_remove() {
    let mut fullest = managed();
    fullest.spec.afe.sandbox.network_policy = None;
    let files = files();
    let inputs = Inputs {
        engine: &fullest,
        revision: "04cf1cc0ea69d1",
        files: &files,
        keda: true,
        cloudnative_pg: true,
    };
    let optional: Vec<(String, String)> = build::optional(&inputs)
        .into_iter()
        .map(|t| (t.kind.to_string(), t.name))
        .collect();
    let always = [
        ("ConfigMap", "afe-config"),
        ("Deployment", "afe-serve"),
        ("Deployment", "afe-worker"),
        ("Service", "afe-api"),
        ("NetworkPolicy", "afe-serve"),
        ("NetworkPolicy", "afe-worker"),
    ];
    for object in build::desired(&inputs) {
        let kind = object["kind"].as_str().unwrap().to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let is_always = always.contains(&(kind.as_str(), name.as_str()));
        let is_optional = optional.contains(&(kind.clone(), name.clone()));
        assert!(
            is_always != is_optional,
            "{kind}/{name}: always {is_always}, optional {is_optional}"
        );
    }
    assert_eq!(optional.len(), 7, "{optional:?}");
}
