//! Scaling (step 4): with `workers.autoscaling` and KEDA installed, a ScaledObject on the lag of
//! the workers' consumer group on the broker's stream (KEDA's redis-streams scaler), using the
//! admin's TriggerAuthentication; the operator then writes no `replicas` on the workers.

use serde_json::{Value, json};

use super::Inputs;

/// The broker's stream and the workers' consumer group (afe-queue's names, prefix `afe`; a test
/// holds them to afe-queue's).
pub const STREAM: &str = "afe:tickets";
pub const GROUP: &str = "workers";

/// The ScaledObject (a custom resource, as JSON), when autoscaling is asked for and KEDA is there.
pub fn scaled_object(inputs: &Inputs<'_>) -> Option<Value> {
    let autoscaling = inputs
        .engine
        .spec
        .deployment
        .as_ref()?
        .workers
        .as_ref()?
        .autoscaling
        .as_ref()?;
    if !inputs.keda {
        return None;
    }
    let meta = serde_json::to_value(inputs.meta(&inputs.named("worker"), "worker")).ok()?;
    let mut trigger = json!({
        "type": "redis-streams",
        "metadata": {
            "addressFromEnv": "AFE_BROKER_URL",
            "stream": STREAM,
            "consumerGroup": GROUP,
            "lagCount": "5",
        },
    });
    if let Some(auth) = &autoscaling.trigger_authentication {
        trigger["authenticationRef"] = json!({"name": auth});
    }
    Some(json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"name": inputs.named("worker")},
            "minReplicaCount": autoscaling.min_replicas,
            "maxReplicaCount": autoscaling.max_replicas,
            "triggers": [trigger],
        },
    }))
}
