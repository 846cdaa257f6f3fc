//! The `Runtime` file: where one engine keeps its state and runs its sandboxes — store, broker,
//! tracer, sandbox. It is not part of a revision (moving the store does not change what a flow
//! means), and it is not a custom resource: on Kubernetes the operator generates it from an
//! `AgentFlowEngine`'s `spec.afe`.
//!
//! Credentials are named by environment variable, never written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The default SQLite file of one machine, relative to the config folder.
pub const DEFAULT_SQLITE_PATH: &str = ".afe/afe.db";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSpec {
    /// Default: SQLite at `.afe/afe.db`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreRuntime>,
    /// Default: the in-process queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<BrokerRuntime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracer: Option<TracerRuntime>,
    /// Default: a Docker container per ticket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxRuntime>,
}

/// Exactly one of the two.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreRuntime {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlite: Option<SqliteStore>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<UrlFromEnv>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqliteStore {
    pub path: String,
}

/// A connection URL read from an environment variable, because it carries a password.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UrlFromEnv {
    pub url_env: String,
}

/// Exactly one of the two.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrokerRuntime {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedded: Option<Embedded>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<UrlFromEnv>,
}

/// The in-process queue: nothing to configure.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Embedded {}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TracerRuntime {
    pub otlp: OtlpRuntime,
}

/// An OpenTelemetry collector (Langfuse takes OTLP too); its headers carry a key, so they come from
/// an environment variable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OtlpRuntime {
    /// The collector's base URL; spans are posted to `<endpoint>/v1/traces`.
    pub endpoint: String,
    /// The variable holding the headers (`key=value,…`, as `OTEL_EXPORTER_OTLP_HEADERS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_env: Option<String>,
    /// Put the prompts and the answers' text into model-call spans (off: tokens and cost only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capture_prompts: bool,
}

/// Exactly one of the two.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxRuntime {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerSandbox>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesSandbox>,
}

/// A volume and a container per ticket on the local Docker daemon.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DockerSandbox {}

/// A PVC and a pod per ticket in a namespace of their own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesSandbox {
    pub namespace: String,
    /// A Kubernetes quantity: each ticket's volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    /// `runc` (the default) or a Kata class; gVisor is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// The Secret in the sandbox namespace whose keys the sandboxes' `env` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_secret: Option<String>,
}
