//! The example installation (`examples/afe/cluster/`) as the API server holds it once applied:
//! what the reconcile's tests start from.

use std::path::Path;

use serde_json::{Value, json};

pub const NS: &str = "afe";
pub const SANDBOX_NS: &str = "afe-sandbox";
pub const UID: &str = "0b6e2c1a-7f00-4c5e-9a61-000000000001";
/// The time the reaper judges at.
pub const NOW_MS: i64 = 1_800_000_000_000;

fn example(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/afe/cluster")
            .join(file),
    )
    .unwrap();
    serde_saphyr::from_multiple::<Value>(&text).unwrap()
}

/// The example installation (`examples/afe/cluster/`), as applied: its AgentFlowEngine (with a
/// uid and a generation, as the server gives it), the source ConfigMap and the config's resources.
pub fn example_engine() -> Value {
    let mut engine = example("engine.yaml").remove(0);
    engine["metadata"]["uid"] = json!(UID);
    engine["metadata"]["generation"] = json!(1);
    // An object with a status makes the fake serve it as a subresource, as the CRD declares it.
    engine["status"] = json!({});
    engine
}

pub fn example_source() -> Value {
    example("configmap.yaml").remove(0)
}

/// The config's resources, in the engine's namespace (`kubectl apply -n afe`).
pub fn example_resources() -> Vec<Value> {
    let mut resources = example("resources.yaml");
    for resource in &mut resources {
        resource["metadata"]["namespace"] = json!(NS);
    }
    resources
}
