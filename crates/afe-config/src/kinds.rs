//! The config's four kinds — `Schema`, `Agent`, `Flow`, `Plugin` — as Kubernetes custom
//! resources (group `afe.dev`, version `v1alpha1`). The same types read a folder's files and a
//! cluster's objects, so both sources mean exactly the same thing.
//!
//! Every struct rejects unknown keys: a misspelt key is an error with its place, never a setting
//! silently ignored.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every afe kind.
pub const GROUP: &str = "afe.dev";
/// `apiVersion` of every afe document.
pub const API_VERSION: &str = "afe.dev/v1alpha1";
/// Where a description lives: an annotation, because `metadata.description` is not a Kubernetes
/// field and the API server drops it.
pub const DESCRIPTION_ANNOTATION: &str = "afe.dev/description";

/// A secret named, never held: a Secret's name and, optionally, one key in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The data a flow takes or an agent returns: named fields, each a type name (`topic: string`) or
/// a JSON Schema fragment (`priority: {type: integer, minimum: 1}`).
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "afe.dev",
    version = "v1alpha1",
    kind = "Schema",
    root = "SchemaResource",
    namespaced,
    shortname = "afeschema",
    doc = "afe: the fields of a flow's input or of an agent's structured output"
)]
#[serde(deny_unknown_fields)]
pub struct SchemaSpec {
    pub fields: BTreeMap<String, FieldType>,
    /// The fields that may be left out; every other field is required.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub optional: Vec<String>,
}

/// One field of a Schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FieldType {
    /// `string`, `integer`, `number`, `boolean`, `object` or `array`.
    Name(String),
    /// A JSON Schema fragment.
    Fragment(serde_json::Map<String, serde_json::Value>),
}

/// A value that is a string or a mapping has no structural schema in Kubernetes (a node's type is
/// one type, and `anyOf` branches may not set one), so the CRD keeps it as written, unchecked;
/// `afe validate` checks it (see `structure::kind_schema`, which narrows the type to string or
/// mapping, and `fields::field_schema`).
impl JsonSchema for FieldType {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FieldType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A type name (string, integer, number, boolean, object, array) or a JSON Schema fragment.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

/// A model with a prompt, tools and a budget.
// kube's printcolumn(...) attributes repeat their keys by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "afe.dev",
    version = "v1alpha1",
    kind = "Agent",
    namespaced,
    shortname = "afeagent",
    printcolumn(
        name = "Provider",
        type_ = "string",
        json_path = ".spec.model.provider"
    ),
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model.name"),
    doc = "afe: a model with a prompt, tools and a budget"
)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentSpec {
    pub model: Model,
    /// The prompt, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The prompt, from a file beside the config (a folder) or a key of the config's ConfigMap
    /// (custom resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ref: Option<PromptRef>,
    /// Built-in workspace tools (`ws.read`, `ws.write`, `ws.exec`, `ws.test`) and plugin tools
    /// (`PLUGIN` for all of a plugin's tools, `PLUGIN.TOOL` for one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// One of `tools` the model must call on its first turn of a `deep` node (`tool_choice`
    /// naming it); later turns choose freely. For a loop that must start by looking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_tool: Option<String>,
    /// How many times an `agent` node asks again when an answer does not match its output Schema
    /// (default 2: three answers in all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// An OpenAI-compatible model endpoint. Its key is named, never written: a Secret reference
/// (Kubernetes) or an environment variable name (one machine).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Model {
    pub provider: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_ref: Option<SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// What the model costs, for the reservation made before each call (the provider's reported
    /// cost settles it after). Without it a call reserves the engine's default
    /// (docs/afe-models.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// How a structured answer is asked for: `jsonSchema` (OpenAI's
    /// `response_format: {type: json_schema}`, the default) or `jsonObject`
    /// (`{type: json_object, schema}`, what llama.cpp's server takes instead).
    #[serde(default, skip_serializing_if = "StructuredOutput::is_default")]
    pub structured_output: StructuredOutput,
}

/// The `response_format` a structured answer is asked with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum StructuredOutput {
    #[default]
    JsonSchema,
    JsonObject,
}

impl StructuredOutput {
    fn is_default(&self) -> bool {
        *self == StructuredOutput::default()
    }
}

/// A model's price in US dollars per million tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million tokens sent (the prompt).
    pub input: f64,
    /// Per million tokens received (the answer).
    pub output: f64,
}

/// Where a prompt's text is: exactly one of the two.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PromptRef {
    /// A file relative to the config folder (folders only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// A key of the ConfigMap the config comes from (custom resources only: an object in a
    /// cluster has no files beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key: Option<String>,
}

/// A spending limit: dollars and model turns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
}

/// A graph of nodes run on one input inside one sandbox.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "afe.dev",
    version = "v1alpha1",
    kind = "Flow",
    namespaced,
    shortname = "afeflow",
    printcolumn(name = "Input", type_ = "string", json_path = ".spec.input"),
    doc = "afe: a graph of nodes run on one input inside one sandbox"
)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FlowSpec {
    /// The name of the Schema the input must match.
    pub input: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    pub nodes: Vec<FlowNode>,
    /// The ticket's budget across every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// The ticket's workspace: one container or pod per ticket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Sandbox {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// A Kubernetes quantity (`4Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Host names the sandbox may reach through its proxy (exact, or `*.` wildcards). Empty: no
    /// proxy, nothing leaves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
    /// `runc` (the default) or a Kata class; gVisor is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// Names of environment variables passed in (values come from the platform's secret).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

/// One node of a flow: an id, what it waits for, an optional CEL condition, and exactly one kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlowNode {
    pub id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// CEL over the input (by its Schema's name, `-` written `_`) and the outputs of the nodes
    /// this one needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// `clone` or `push`, through bundles; the token stays in the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitAction>,
    /// One model call by the named Agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A tool-using loop of the named Agent over the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deep: Option<String>,
    /// An Agent Client Protocol agent run in the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp: Option<AcpAgent>,
    /// A command run in the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<Vec<String>>,
    /// The Schema an `agent` node's structured output must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// What a `git` node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GitAction {
    Clone,
    Push,
}

/// An ACP agent: its command in the sandbox, the names of the variables it gets, what it is asked,
/// how its requests for permission are answered, and how long its turn may take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AcpAgent {
    pub command: Vec<String>,
    /// Variables of the worker's environment the agent gets (its model key, say), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The prompt, rendered from the node's context as an Agent's is; without it, the context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// How `session/request_permission` is answered: `allow` (the default: the sandbox is the
    /// boundary) or `reject`.
    #[serde(default, skip_serializing_if = "AcpPermissions::is_default")]
    pub permissions: AcpPermissions,
    /// The longest the prompt turn may take, in seconds (default 3600); then it is cancelled and
    /// the node fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

/// The answer to an ACP agent's requests for permission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AcpPermissions {
    #[default]
    Allow,
    Reject,
}

impl AcpPermissions {
    fn is_default(&self) -> bool {
        *self == AcpPermissions::default()
    }
}

/// Tools from outside the engine: an MCP server over stdio (run in the worker) or over HTTP.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "afe.dev",
    version = "v1alpha1",
    kind = "Plugin",
    namespaced,
    shortname = "afeplugin",
    doc = "afe: tools from an MCP server over stdio or HTTP"
)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdio: Option<StdioPlugin>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpPlugin>,
    /// The tools it offers; agents may name only these (empty: any tool it lists at run time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The longest one call of its tools may take, in seconds (default 60); then the call's
    /// result is a timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

/// A plugin started as a process of the worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StdioPlugin {
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

/// A plugin reached over HTTP; its headers (a token, say) come from a Secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpPlugin {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_secret_ref: Option<SecretRef>,
}
