//! The NetworkPolicies: deny everything in both directions; let workloads reach the sidecar (its
//! proxy, DNS and transparent listeners) and each other (selected by pod labels, never by
//! namespace, so the rule cannot match anything outside); let the sidecar take from workloads;
//! give the sidecar — and only it — a route off the cluster, without link-local (the metadata
//! endpoint) or the private ranges (the control plane, the operator's network), plus the cluster's
//! resolver for names inside the environment, and the environment's own workloads (webhook
//! delivery). With a domain, the ingress controller may reach the
//! web services.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::RenderInput;
use super::names::{ROLE_LABEL, WEB_LABEL, WORKLOAD_LABEL};
use super::service::sidecar_ports;

/// What the sidecar may never dial, IPv4: link-local (169.254.169.254 among it), the private
/// ranges, shared address space, loopback, "this network".
pub const EXCLUDED_V4: [&str; 7] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
];
/// The same for IPv6: unique local (fd00:ec2::254 among it), link-local, loopback.
pub const EXCLUDED_V6: [&str; 3] = ["fc00::/7", "fe80::/10", "::1/128"];

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

fn workloads() -> LabelSelector {
    selector(&[(WORKLOAD_LABEL, "true")])
}

fn sidecar() -> LabelSelector {
    selector(&[(ROLE_LABEL, "sidecar")])
}

fn pods(selector: LabelSelector) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(selector),
        ..Default::default()
    }
}

fn sidecar_policy_ports() -> Vec<NetworkPolicyPort> {
    sidecar_ports()
        .into_iter()
        .map(|port| NetworkPolicyPort {
            port: Some(IntOrString::Int(port.port)),
            protocol: port.protocol,
            ..Default::default()
        })
        .collect()
}

fn policy(
    input: &RenderInput<'_>,
    namespace: &str,
    name: &str,
    spec: NetworkPolicySpec,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: super::meta(input, namespace, name),
        spec: Some(spec),
    }
}

fn types(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|t| t.to_string()).collect())
}

pub fn all(input: &RenderInput<'_>, namespace: &str) -> Vec<NetworkPolicy> {
    let dns_ports = ["UDP", "TCP"].map(|protocol| NetworkPolicyPort {
        port: Some(IntOrString::Int(53)),
        protocol: Some(protocol.to_string()),
        ..Default::default()
    });
    let mut policies = vec![
        policy(
            input,
            namespace,
            "af-deny-all",
            NetworkPolicySpec {
                pod_selector: Some(LabelSelector::default()),
                policy_types: types(&["Ingress", "Egress"]),
                ..Default::default()
            },
        ),
        policy(
            input,
            namespace,
            "af-workloads-to-sidecar",
            NetworkPolicySpec {
                pod_selector: Some(workloads()),
                policy_types: types(&["Egress"]),
                egress: Some(vec![NetworkPolicyEgressRule {
                    to: Some(vec![pods(sidecar())]),
                    ports: Some(sidecar_policy_ports()),
                }]),
                ..Default::default()
            },
        ),
        policy(
            input,
            namespace,
            "af-workloads-to-workloads",
            NetworkPolicySpec {
                pod_selector: Some(workloads()),
                policy_types: types(&["Ingress", "Egress"]),
                // From each other, and from the sidecar, which delivers webhooks as a third party
                // would (`af webhook trigger`); both selected by pod labels in this namespace.
                ingress: Some(vec![NetworkPolicyIngressRule {
                    from: Some(vec![pods(workloads()), pods(sidecar())]),
                    ..Default::default()
                }]),
                egress: Some(vec![NetworkPolicyEgressRule {
                    to: Some(vec![pods(workloads())]),
                    ..Default::default()
                }]),
            },
        ),
        policy(
            input,
            namespace,
            "af-sidecar-from-workloads",
            NetworkPolicySpec {
                pod_selector: Some(sidecar()),
                policy_types: types(&["Ingress"]),
                ingress: Some(vec![NetworkPolicyIngressRule {
                    from: Some(vec![pods(workloads())]),
                    ports: Some(sidecar_policy_ports()),
                }]),
                ..Default::default()
            },
        ),
        policy(
            input,
            namespace,
            "af-sidecar-egress",
            NetworkPolicySpec {
                pod_selector: Some(sidecar()),
                policy_types: types(&["Egress"]),
                egress: Some(vec![
                    NetworkPolicyEgressRule {
                        to: Some(vec![
                            NetworkPolicyPeer {
                                ip_block: Some(IPBlock {
                                    cidr: "0.0.0.0/0".to_string(),
                                    except: Some(EXCLUDED_V4.map(String::from).to_vec()),
                                }),
                                ..Default::default()
                            },
                            NetworkPolicyPeer {
                                ip_block: Some(IPBlock {
                                    cidr: "::/0".to_string(),
                                    except: Some(EXCLUDED_V6.map(String::from).to_vec()),
                                }),
                                ..Default::default()
                            },
                        ]),
                        ..Default::default()
                    },
                    // The environment's own workloads, to deliver webhooks to them.
                    NetworkPolicyEgressRule {
                        to: Some(vec![pods(workloads())]),
                        ..Default::default()
                    },
                    // The cluster's resolver, for names inside the environment.
                    NetworkPolicyEgressRule {
                        to: Some(vec![NetworkPolicyPeer {
                            namespace_selector: Some(selector(&[(
                                "kubernetes.io/metadata.name",
                                "kube-system",
                            )])),
                            pod_selector: Some(selector(&[("k8s-app", "kube-dns")])),
                            ..Default::default()
                        }]),
                        ports: Some(dns_ports.to_vec()),
                    },
                ]),
                ..Default::default()
            },
        ),
    ];
    if input.manifest.runtime.domain.is_some() {
        policies.push(policy(
            input,
            namespace,
            "af-ingress-controller",
            NetworkPolicySpec {
                pod_selector: Some(selector(&[(WEB_LABEL, "true")])),
                policy_types: types(&["Ingress"]),
                ingress: Some(vec![NetworkPolicyIngressRule {
                    from: Some(vec![NetworkPolicyPeer {
                        namespace_selector: Some(selector(&[(
                            "kubernetes.io/metadata.name",
                            input.cluster.ingress_namespace.as_str(),
                        )])),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }]),
                ..Default::default()
            },
        ));
    }
    policies
}
