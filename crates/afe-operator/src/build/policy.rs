//! The NetworkPolicies the operator keeps (they act where the CNI enforces policies). In the
//! engine's namespace, what may reach each process (`engine_policies`). In the sandbox namespace,
//! the second layer: `afe-sandbox-ingress`, ingress only, default deny, for every ticket Pod —
//! made while `sandbox.networkPolicy.manage` is true (the default), and left to the admin
//! otherwise. It lives in the sandbox namespace, which an ownerReference cannot reach: it is found
//! by its labels.

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

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

fn peer(inputs: &Inputs<'_>, component: &str) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(inputs.selector(component)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn port(number: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(number)),
        protocol: Some("TCP".to_string()),
        ..Default::default()
    }
}

/// The policy of `component`'s Pods in the engine's namespace: ingress only from `ingress`.
fn ingress_policy(
    inputs: &Inputs<'_>,
    component: &str,
    ingress: Vec<NetworkPolicyIngressRule>,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: inputs.meta(&inputs.named(component), component),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(inputs.selector(component)),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(ingress),
            ..Default::default()
        }),
    }
}

/// Where a CNI enforces policies, what may reach each process of the engine's namespace: serve
/// on its API port from anywhere (the Ingress controller lives elsewhere); the workers from
/// nowhere (they only call out); a managed Redis — which has no password — from serve and the
/// workers alone, on 6379.
pub fn engine_policies(inputs: &Inputs<'_>) -> Vec<NetworkPolicy> {
    let mut policies = vec![
        ingress_policy(
            inputs,
            "serve",
            vec![NetworkPolicyIngressRule {
                ports: Some(vec![port(super::API_PORT)]),
                ..Default::default()
            }],
        ),
        ingress_policy(inputs, "worker", Vec::new()),
    ];
    if inputs.engine.spec.afe.broker.managed.is_some() {
        policies.push(ingress_policy(
            inputs,
            "redis",
            vec![NetworkPolicyIngressRule {
                from: Some(vec![peer(inputs, "serve"), peer(inputs, "worker")]),
                ports: Some(vec![port(6379)]),
            }],
        ));
    }
    policies
}
