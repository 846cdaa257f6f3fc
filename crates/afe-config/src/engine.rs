//! `AgentFlowEngine`: one installation of afe on a cluster, as seed 003 describes it —
//! `spec.config` (the ConfigMap the flows come from and an optional revision pin), `spec.afe` (the
//! Runtime's meaning: store, broker, tracer, sandbox), `spec.deployment` (the workloads' knobs),
//! and the operator's `status`. Every secret is a `*Ref`; no value ever enters the resource.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::kinds::SecretRef;

// kube's printcolumn(...) attributes repeat their keys by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "afe.dev",
    version = "v1alpha1",
    kind = "AgentFlowEngine",
    namespaced,
    shortname = "afe",
    status = "AgentFlowEngineStatus",
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.revision"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    doc = "afe: one installation of the agent flow engine, reconciled by afe-operator"
)]
#[serde(deny_unknown_fields)]
pub struct AgentFlowEngineSpec {
    pub config: EngineConfig,
    pub afe: EngineRuntime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<EngineDeployment>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineConfig {
    /// The ConfigMap, in the resource's namespace, whose keys are the config's files.
    pub config_map_ref: NameRef,
    /// An optional pin: workloads roll only while it matches the computed revision (a prefix of
    /// at least 12 hex digits counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameRef {
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineRuntime {
    pub store: EngineStore,
    pub broker: EngineBroker,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracer: Option<EngineTracer>,
    pub sandbox: EngineSandbox,
}

/// Exactly one of the two: an external Postgres named by a Secret, or a managed CloudNativePG
/// Cluster (opt-in, never a default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineStore {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<External>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed: Option<ManagedStore>,
}

/// Exactly one of the two: an external Redis named by a Secret, or a managed StatefulSet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineBroker {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<External>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed: Option<ManagedBroker>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct External {
    pub secret_ref: SecretRef,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ManagedStore {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u32>,
    /// A Kubernetes quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ManagedBroker {
    /// A Kubernetes quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineTracer {
    pub otlp: EngineOtlp,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineOtlp {
    pub endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_secret_ref: Option<SecretRef>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineSandbox {
    pub namespace: String,
    /// A Kubernetes quantity: each ticket's volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    /// `runc` (the default) or a Kata class; gVisor is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_secret: Option<String>,
    /// How long a running sandbox may go without a heartbeat before the reaper removes it
    /// (default `30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphan_grace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkPolicyKnob>,
    /// The engine image the sandboxes' netlock and proxy run from (af's, `/af-proxy`). Default:
    /// afe's own image, which carries `/af-proxy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_image: Option<EngineImage>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicyKnob {
    /// Whether the operator owns the sandbox namespace's ingress policy (default true).
    pub manage: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineDeployment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<EngineImage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<EngineApi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<EngineWorkers>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<EngineIngress>,
}

/// A tag or a digest, not both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineImage {
    pub repository: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineApi {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_token_secret_ref: Option<SecretRef>,
}

/// The workers hold the model keys and the Git token; `serve` never gets them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineWorkers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_secret_refs: Vec<SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<EngineAutoscaling>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineAutoscaling {
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// A KEDA TriggerAuthentication the admin provides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_authentication: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineIngress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    pub host: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls: Vec<EngineTls>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineTls {
    pub secret_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

/// What the operator reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentFlowEngineStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<EngineCondition>,
    /// The revision the workloads run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<EngineComponent>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphans_removed: Option<u64>,
}

/// A Kubernetes-style condition (`ConfigValidated`, `RevisionPinned`, `AutoscalingReady`, `Ready`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineComponent {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
}
