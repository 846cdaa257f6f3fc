//! The decisions of applying (pure): whose an existing object is, and whether it already holds
//! everything the operator wants of it — so a second reconcile of an unchanged resource writes
//! nothing, although the API server stores more than was sent (defaults it fills: a Deployment's
//! strategy, a Service's clusterIP) and in its own spelling (quantities made canonical: `2048Mi`
//! is stored as `2Gi`).

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::build::MANAGED_BY;

/// The annotation carrying a digest of everything the operator last asked of an object. A field
/// it stops asking for (a Deployment's `replicas` once KEDA scales the workers) is in no live
/// object's difference — only the digest changes — and the apply that follows lets it go.
pub const APPLIED: &str = "afe.dev/applied";

/// `desired` with its digest in [`APPLIED`].
pub fn stamped(mut desired: Value) -> Value {
    let digest = Sha256::digest(afe_config::revision::canonical_json(&desired).as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    if let Some(metadata) = desired.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(APPLIED.to_string(), Value::String(hex));
        }
    }
    desired
}

/// Whose an existing object is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// The operator's, for this resource: it may be changed.
    Ours,
    /// Someone else's: left alone (no adoption), and named in a `ResourceConflict`.
    Foreign(String),
}

/// Whose `live` is. An object of the resource's namespace is ours only with both marks the
/// operator puts on it: its `managed-by` label and a controller ownerReference to the resource
/// (`owner_uid`). One in the sandbox namespace cannot carry an ownerReference across namespaces:
/// there the label and the instance label (`instance`) are the marks.
pub fn holder(live: &Value, owner_uid: &str, instance: &str, same_namespace: bool) -> Holder {
    let label = |key: &str| {
        live.pointer("/metadata/labels")
            .and_then(|labels| labels.get(key))
            .and_then(Value::as_str)
    };
    if label("app.kubernetes.io/managed-by") != Some(MANAGED_BY) {
        return Holder::Foreign(format!(
            "it has no label app.kubernetes.io/managed-by={MANAGED_BY}"
        ));
    }
    if !same_namespace {
        return if label("app.kubernetes.io/instance") == Some(instance) {
            Holder::Ours
        } else {
            Holder::Foreign(format!(
                "its label app.kubernetes.io/instance is not {instance}"
            ))
        };
    }
    let owned = live
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners.iter().any(|owner| {
                owner.get("uid").and_then(Value::as_str) == Some(owner_uid)
                    && owner.get("controller").and_then(Value::as_bool) == Some(true)
            })
        });
    if owned {
        Holder::Ours
    } else {
        Holder::Foreign("it has no controller ownerReference to this AgentFlowEngine".to_string())
    }
}

/// Whether `live` already holds everything in `desired`: every field desired is there with the
/// same value (a quantity in any spelling of the same amount), lists element by element; what
/// the server added beside them does not count.
pub fn covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => {
            desired.iter().all(|(key, want)| match live.get(key) {
                Some(have) => covers(have, want),
                None => want.is_null(),
            })
        }
        (Value::Array(live), Value::Array(desired)) => {
            live.len() == desired.len() && live.iter().zip(desired).all(|(h, w)| covers(h, w))
        }
        (Value::String(have), Value::String(want)) => {
            have == want
                || matches!((quantity(have), quantity(want)), (Some(h), Some(w)) if same_amount(h, w))
        }
        (Value::Number(have), Value::Number(want)) => have.as_f64() == want.as_f64(),
        (have, want) => have == want,
    }
}

fn same_amount(a: f64, b: f64) -> bool {
    (a - b).abs() <= f64::EPSILON * a.abs().max(b.abs()).max(1.0)
}

/// The amount a Kubernetes quantity means (`2Gi`, `500m`, `1e3`, `0.5`), or `None` when the text
/// is not one.
pub fn quantity(text: &str) -> Option<f64> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || !number.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    let number: f64 = number.parse().ok()?;
    let binary = |power: i32| Some(1024f64.powi(power));
    let decimal = |power: i32| Some(10f64.powi(power));
    let factor = match suffix {
        "" => Some(1.0),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        exponent => exponent
            .strip_prefix(['e', 'E'])
            .and_then(|e| e.parse::<i32>().ok())
            .map(|e| 10f64.powi(e)),
    }?;
    Some(number * factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UID: &str = "0b6e2c1a";

    fn object(labels: Value, owners: Value) -> Value {
        json!({"metadata": {"name": "afe-serve", "labels": labels, "ownerReferences": owners}})
    }

    #[test]
    fn ours_needs_both_the_label_and_the_controller_reference() {
        let label = json!({"app.kubernetes.io/managed-by": "afe-operator", "app.kubernetes.io/instance": "afe"});
        let owner = json!([{"uid": UID, "controller": true}]);
        assert_eq!(
            holder(&object(label.clone(), owner.clone()), UID, "afe", true),
            Holder::Ours
        );
        assert!(matches!(
            holder(&object(json!({}), owner), UID, "afe", true),
            Holder::Foreign(_)
        ));
        assert!(matches!(
            holder(&object(label.clone(), json!([])), UID, "afe", true),
            Holder::Foreign(_)
        ));
        assert!(matches!(
            holder(
                &object(label.clone(), json!([{"uid": "other", "controller": true}])),
                UID,
                "afe",
                true
            ),
            Holder::Foreign(_)
        ));
        assert!(matches!(
            holder(
                &object(label.clone(), json!([{"uid": UID, "controller": false}])),
                UID,
                "afe",
                true
            ),
            Holder::Foreign(_)
        ));
    }

    #[test]
    fn across_namespaces_the_labels_are_the_marks() {
        let ours = object(
            json!({"app.kubernetes.io/managed-by": "afe-operator", "app.kubernetes.io/instance": "afe"}),
            Value::Null,
        );
        assert_eq!(holder(&ours, UID, "afe", false), Holder::Ours);
        assert!(matches!(
            holder(&ours, UID, "other", false),
            Holder::Foreign(_)
        ));
    }

    #[test]
    fn what_the_server_adds_is_not_a_difference() {
        let desired = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "serve"}]}}}});
        let live = json!({"spec": {"replicas": 2, "revisionHistoryLimit": 10, "template": {"spec": {
            "containers": [{"name": "serve", "terminationMessagePath": "/dev/termination-log"}],
            "dnsPolicy": "ClusterFirst"}}}, "status": {"replicas": 2}});
        assert!(covers(&live, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_is_a_difference() {
        let live = json!({"spec": {"replicas": 2, "list": ["a", "b"]}});
        assert!(!covers(&live, &json!({"spec": {"replicas": 3}})));
        assert!(!covers(&live, &json!({"spec": {"image": "x"}})));
        assert!(!covers(&live, &json!({"spec": {"list": ["a"]}})));
        assert!(!covers(&live, &json!({"spec": {"list": ["a", "c"]}})));
        assert!(covers(&live, &json!({"spec": {"gone": null}})));
    }

    #[test]
    fn a_field_no_longer_asked_for_changes_the_stamp() {
        let with = stamped(json!({"metadata": {"name": "w"}, "spec": {"replicas": 20}}));
        let without = stamped(json!({"metadata": {"name": "w"}, "spec": {}}));
        assert!(covers(
            &with,
            &json!({"metadata": {"name": "w"}, "spec": {}})
        ));
        assert!(
            !covers(&with, &without),
            "the live object still holds replicas; the stamp says so"
        );
        assert_eq!(
            with,
            stamped(json!({"metadata": {"name": "w"}, "spec": {"replicas": 20}}))
        );
    }

    #[test]
    fn a_quantity_in_another_spelling_is_the_same_amount() {
        assert!(covers(&json!("2Gi"), &json!("2048Mi")));
        assert!(covers(&json!("500m"), &json!("0.5")));
        assert!(covers(&json!("1k"), &json!("1e3")));
        assert!(!covers(&json!("2Gi"), &json!("2G")));
        assert!(!covers(&json!("redis"), &json!("valkey")));
        assert_eq!(quantity("20Gi"), Some(20.0 * 1024f64.powi(3)));
        assert_eq!(quantity("Gi"), None);
        assert_eq!(quantity("kata"), None);
    }
}
