//! A real Kubernetes control plane for the tests, and a node of the project's own.
//!
//! The control plane is Kubernetes' own kube-apiserver, kube-controller-manager and kube-scheduler
//! (1.20.2, built from Debian bookworm's source package) with Debian's etcd, on loopback, started
//! by `scripts/control-plane` ([`cluster`]). Nothing here builds or runs the upstream kubelet or
//! kube-proxy: the kubelet's in-tree cloud credential code asks the metadata address from the host.
//!
//! The node ([`node`]) is a Node of that API server that runs the Pods the scheduler binds to it as
//! Docker containers in the pod's shape: a holder container owns each Pod's network namespace on
//! the node's pod network (a Docker network with no route off the machine), init containers run in
//! order, then the containers, restarted as the Pod's policy says; `securityContext` is honoured as
//! Docker can (user and group, capabilities, read-only root, no privilege escalation, the runtime's
//! seccomp profile, sysctls) and what it cannot is refused with the kubelet's reason. It writes Pod
//! status as a kubelet does, serves the endpoints the API server proxies to (exec over the v5 and
//! v4 channel protocols, logs, port-forward), and gives Pods ClusterIP routing (netfilter DNAT on
//! the pod network's way out of the pods) and cluster DNS. It enforces no NetworkPolicy: it is
//! the cluster of seed 000 whose policy is decorative. What it does not do is listed in
//! docs/runtimes.md ("The tests' Kubernetes").

pub mod cluster;
pub mod images;
pub mod node;

pub use cluster::TestCluster;
pub use node::{Node, NodeConfig};

/// The label every Docker object of a node carries: the id of the control plane it belongs to,
/// so that `scripts/control-plane stop` removes what a node left behind.
pub const CLUSTER_LABEL: &str = "dev.antifailure.testnode.cluster";
