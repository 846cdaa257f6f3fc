//! What the Kubernetes sandbox is told by whoever runs the worker: where tickets' Pods go, what
//! they are made from, and how long one may take to become ready.

use std::time::Duration;

use af_manifest::HostRule;

/// The Kubernetes adapter's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeSandboxSettings {
    /// The namespace of every ticket's Pod and PVC (the worker's Role reaches this one only).
    pub namespace: String,
    /// The engine image (netlock, the proxy): af's, with `/af-proxy` as its entrypoint, already
    /// on the nodes or pullable by them.
    pub engine_image: String,
    /// Each ticket's volume (a ReadWriteOnce PVC), as a quantity (`2Gi`).
    pub storage: String,
    /// The volume's storage class; none: the cluster's default.
    pub storage_class: Option<String>,
    /// The Pod's RuntimeClass (Kata, say); none: the node's default runtime (runc). A class whose
    /// name says gVisor is refused ([`crate::refuse_gvisor`]): netlock needs netfilter's owner
    /// match, which gVisor does not implement.
    pub runtime_class: Option<String>,
    /// The Secret in the sandbox namespace that holds the variables a flow names, one key per
    /// variable (the operator manages it). The Pod reads them by `secretKeyRef`; the worker never
    /// reads their values. None: a flow that names a variable is refused on this platform.
    pub env_secret: Option<String>,
    /// How long a new Pod may take to become Ready (scheduling, pulling, netlock, the proxy)
    /// before it is given up as gone.
    pub ready_timeout: Duration,
    /// `imagePullPolicy` of every container: `IfNotPresent` (images already on the nodes are
    /// used as they are).
    pub image_pull_policy: String,
    /// Addresses or ranges that are not public and that the proxy may still dial for a name the
    /// flow allows (an internal mirror's).
    pub dialable: Vec<HostRule>,
}

impl Default for KubeSandboxSettings {
    fn default() -> KubeSandboxSettings {
        KubeSandboxSettings {
            namespace: "afe-sandbox".to_string(),
            engine_image: "af-engine:latest".to_string(),
            storage: "2Gi".to_string(),
            storage_class: None,
            runtime_class: None,
            env_secret: None,
            ready_timeout: Duration::from_secs(180),
            image_pull_policy: "IfNotPresent".to_string(),
            dialable: Vec::new(),
        }
    }
}
