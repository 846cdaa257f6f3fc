//! The Node object as a kubelet registers it (pure), and its heartbeat: the Lease in
//! `kube-node-lease` renewed every ten seconds, and the status with its conditions, addresses,
//! capacity and allocatable, and the port the API server proxies exec, logs and port-forward to.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

/// The annotation that says which Docker daemon's images the node runs: a client that builds
/// images on that daemon needs to copy nothing onto this node.
pub const DOCKER_DAEMON_ANNOTATION: &str = "dev.antifailure/docker-daemon";

/// The kubelet version the node reports: the control plane's own.
pub const KUBELET_VERSION: &str = "v1.20.2";

/// What the node says of itself.
#[derive(Clone, Debug)]
pub struct NodeFacts {
    pub name: String,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub max_pods: u32,
    pub kubelet_port: u16,
    pub docker_daemon: String,
    pub docker_version: String,
    pub kernel: String,
}

/// The Node object to create: labels as a kubelet sets them, and the daemon's identity.
pub fn node(facts: &NodeFacts) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(facts.name.clone()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), facts.name.clone()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
                ("beta.kubernetes.io/arch".to_string(), "amd64".to_string()),
            ])),
            annotations: Some(BTreeMap::from([(
                DOCKER_DAEMON_ANNOTATION.to_string(),
                facts.docker_daemon.clone(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> NodeCondition {
    NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The status to write: ready, no pressure, the node's room, and where its API is.
pub fn status(facts: &NodeFacts, previous: Option<&NodeStatus>, now: Timestamp) -> NodeStatus {
    let room = BTreeMap::from([
        (
            "cpu".to_string(),
            Quantity(format!("{}m", facts.cpu_millis)),
        ),
        (
            "memory".to_string(),
            Quantity(facts.memory_bytes.to_string()),
        ),
        ("pods".to_string(), Quantity(facts.max_pods.to_string())),
        (
            "ephemeral-storage".to_string(),
            Quantity("20Gi".to_string()),
        ),
    ]);
    let mut conditions = vec![
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            now,
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            now,
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            now,
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            now,
        ),
    ];
    // A condition that did not change keeps the time it last changed.
    for condition in &mut conditions {
        if let Some(before) = previous
            .and_then(|p| p.conditions.as_ref())
            .and_then(|c| c.iter().find(|b| b.type_ == condition.type_))
            .filter(|b| b.status == condition.status)
        {
            condition.last_transition_time = before.last_transition_time.clone();
        }
    }
    NodeStatus {
        capacity: Some(room.clone()),
        allocatable: Some(room),
        conditions: Some(conditions),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_string(),
                address: "127.0.0.1".to_string(),
            },
            NodeAddress {
                type_: "Hostname".to_string(),
                address: facts.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(facts.kubelet_port),
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".to_string(),
            operating_system: "linux".to_string(),
            os_image: "the tests' node (af-testcluster)".to_string(),
            kernel_version: facts.kernel.clone(),
            container_runtime_version: format!("docker://{}", facts.docker_version),
            kubelet_version: KUBELET_VERSION.to_string(),
            kube_proxy_version: KUBELET_VERSION.to_string(),
            machine_id: facts.name.clone(),
            system_uuid: facts.name.clone(),
            boot_id: facts.docker_daemon.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The node's Lease, renewed now.
pub fn lease(name: &str, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("kube-node-lease".to_string()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_reports_its_room_its_api_port_and_keeps_condition_times() {
        let facts = NodeFacts {
            name: "af-node".into(),
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            max_pods: 110,
            kubelet_port: 41234,
            docker_daemon: "ABCD".into(),
            docker_version: "20.10.24".into(),
            kernel: "6.18".into(),
        };
        let start = Timestamp::from_second(1_800_000_000).unwrap();
        let first = status(&facts, None, start);
        assert_eq!(first.allocatable.as_ref().unwrap()["cpu"].0, "4000m");
        assert_eq!(
            first
                .daemon_endpoints
                .as_ref()
                .unwrap()
                .kubelet_endpoint
                .as_ref()
                .unwrap()
                .port,
            41234
        );
        let later = status(
            &facts,
            Some(&first),
            start + std::time::Duration::from_secs(10),
        );
        let ready = |s: &NodeStatus| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .cloned()
                .unwrap()
        };
        assert_eq!(ready(&later).status, "True");
        assert_eq!(ready(&later).last_transition_time, Some(Time(start)));
        assert_ne!(ready(&later).last_heartbeat_time, Some(Time(start)));
        assert_eq!(
            node(&facts).metadata.annotations.unwrap()[DOCKER_DAEMON_ANNOTATION],
            "ABCD"
        );
    }
}
