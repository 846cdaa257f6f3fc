//! The sandbox namespace's second layer: `afe-sandbox-ingress`, ingress only, default deny, for
//! every ticket Pod — made while `sandbox.networkPolicy.manage` is true (the default), and left to
//! the admin otherwise. It lives in the sandbox namespace, which an ownerReference cannot reach:
//! it is found by its labels.

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::Inputs;

pub fn sandbox_ingress_policy(inputs: &Inputs<'_>) -> Option<NetworkPolicy> {
    let sandbox = &inputs.engine.spec.afe.sandbox;
    if sandbox.network_policy.as_ref().is_some_and(|p| !p.manage) {
        return None;
    }
    Some(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some("afe-sandbox-ingress".to_string()),
            namespace: Some(sandbox.namespace.clone()),
            labels: Some(inputs.labels("sandbox-policy")),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_string(),
                        "afe".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ..Default::default()
        }),
    })
}
