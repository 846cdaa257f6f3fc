//! Scaling (step 4): with `workers.autoscaling` and KEDA installed, a ScaledObject on the lag of
//! the workers' consumer group on the broker's stream (KEDA's redis-streams scaler); the operator
//! then writes no `replicas` on the workers. KEDA reaches Redis by `host:port`, not by the URL the
//! workers use: a managed broker's address is its Service; an external broker's address and
//! password reach KEDA only through the admin's TriggerAuthentication (parameters `address` and
//! `password`), so without one the workers run at `maxReplicas`, as without KEDA.

use afe_config::engine::{AgentFlowEngine, EngineAutoscaling};
use serde_json::{Value, json};

use super::Inputs;

/// The broker's stream and the workers' consumer group (afe-queue's names, prefix `afe`; a test
/// holds them to afe-queue's).
pub const STREAM: &str = "afe:tickets";
pub const GROUP: &str = "workers";

/// How the workers are scaled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scaling<'a> {
    /// `workers.replicas` (default 1): no autoscaling asked for.
    Fixed(u32),
    /// KEDA scales them.
    Keda(&'a EngineAutoscaling),
    /// Autoscaling asked for, but KEDA is not installed: `maxReplicas`.
    KedaAbsent(&'a EngineAutoscaling),
    /// Autoscaling asked for with an external broker and no TriggerAuthentication to reach it:
    /// `maxReplicas`.
    NoTriggerAuthentication(&'a EngineAutoscaling),
}

/// How `engine`'s workers are scaled, given whether KEDA is installed.
pub fn scaling(engine: &AgentFlowEngine, keda: bool) -> Scaling<'_> {
    let workers = engine
        .spec
        .deployment
        .as_ref()
        .and_then(|d| d.workers.as_ref());
    match workers.and_then(|w| w.autoscaling.as_ref()) {
        None => Scaling::Fixed(workers.and_then(|w| w.replicas).unwrap_or(1)),
        Some(autoscaling) if !keda => Scaling::KedaAbsent(autoscaling),
        Some(autoscaling)
            if engine.spec.afe.broker.managed.is_none()
                && autoscaling.trigger_authentication.is_none() =>
        {
            Scaling::NoTriggerAuthentication(autoscaling)
        }
        Some(autoscaling) => Scaling::Keda(autoscaling),
    }
}

/// The ScaledObject (a custom resource, as JSON), when KEDA scales the workers.
pub fn scaled_object(inputs: &Inputs<'_>) -> Option<Value> {
    let Scaling::Keda(autoscaling) = scaling(inputs.engine, inputs.keda) else {
        return None;
    };
    let meta = serde_json::to_value(inputs.meta(&inputs.named("worker"), "worker")).ok()?;
    let mut trigger = json!({
        "type": "redis-streams",
        "metadata": {
            "stream": STREAM,
            "consumerGroup": GROUP,
            "lagCount": "5",
        },
    });
    if inputs.engine.spec.afe.broker.managed.is_some() {
        trigger["metadata"]["address"] = json!(format!("{}:6379", inputs.named("redis")));
    }
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
