//! An Agent's plugin tools: MCP servers (seed 003, "Limiti") reached by the worker — over stdio,
//! started in the worker's own container with only the variables the Plugin names, or over HTTP
//! (MCP's streamable HTTP) with the headers its `headersSecretRef` holds — through the maintained
//! `rmcp` crate. Their tools are listed to the model under wire names (`PLUGIN__TOOL`), and each
//! call the model makes is executed by the worker, bounded in time and in what comes back. A
//! plugin that cannot be started or listed fails the node before anything is paid; what a call
//! gets wrong is its result, for the model to see, as with the workspace tools.

use std::collections::BTreeMap;
use std::time::Duration;

use afe_config::kinds::{HttpPlugin, PluginSpec, StdioPlugin};
use afe_model::ToolSpec;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::deep::TOOL_OUTPUT;
use crate::error::NodeFailure;

/// How long one plugin call may take before its result is a timeout, unless the Plugin says.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a plugin may take to start and list its tools.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The worker's variables a stdio plugin gets besides the ones it names: what finding and running
/// a program needs, nothing else.
const BASE_ENV: [&str; 3] = ["PATH", "HOME", "LANG"];

/// One tool as the model is offered it, and where it goes.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginTool {
    pub plugin: String,
    pub tool: String,
    pub spec: ToolSpec,
}

/// A tool's wire name: `PLUGIN__TOOL`, only the characters function names may hold, at most 64.
pub fn wire_name(plugin: &str, tool: &str) -> String {
    format!("{plugin}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// Which of a plugin's tools an agent wants: every one (`PLUGIN`, narrowed by the Plugin's own
/// `tools` when it lists them) or the ones it names (`PLUGIN.TOOL`). Pure.
pub fn wanted(agent_tools: &[String]) -> BTreeMap<String, Option<Vec<String>>> {
    let mut wanted: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    for entry in agent_tools.iter().filter(|t| !t.starts_with("ws.")) {
        match entry.split_once('.') {
            None => {
                wanted.insert(entry.clone(), None);
            }
            Some((plugin, tool)) => {
                let slot = wanted.entry(plugin.to_string()).or_insert(Some(Vec::new()));
                if let Some(tools) = slot {
                    tools.push(tool.to_string());
                }
            }
        }
    }
    wanted
}

/// What a call's content says, as text kept up to the bound the workspace tools have.
fn text_of(result: &rmcp::model::CallToolResult) -> (String, bool) {
    let mut text = String::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(t) => text.push_str(&t.text),
            other => text.push_str(&serde_json::to_string(other).unwrap_or_default()),
        }
    }
    if text.is_empty()
        && let Some(structured) = &result.structured_content
    {
        text = structured.to_string();
    }
    let truncated = text.len() > TOOL_OUTPUT;
    if truncated {
        let mut end = TOOL_OUTPUT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    (text, truncated)
}

/// The plugins one node run uses, connected.
pub struct Plugins {
    sessions: BTreeMap<String, RunningService<RoleClient, ()>>,
    tools: Vec<PluginTool>,
    /// Each plugin's bound on one call.
    timeouts: BTreeMap<String, Duration>,
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugins")
            .field("plugins", &self.sessions.keys().collect::<Vec<_>>())
            .field("tools", &self.tools)
            .finish()
    }
}

fn failure(plugin: &str, what: impl std::fmt::Display) -> NodeFailure {
    NodeFailure::Plugin(format!("plugin {plugin}: {what}"))
}

async fn start_stdio(
    name: &str,
    stdio: &StdioPlugin,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<RunningService<RoleClient, ()>, NodeFailure> {
    let Some((program, args)) = stdio.command.split_first() else {
        return Err(failure(name, "its command is empty"));
    };
    let mut command = tokio::process::Command::new(program);
    command.args(args).env_clear();
    for variable in BASE_ENV {
        if let Some(value) = lookup(variable) {
            command.env(variable, value);
        }
    }
    for variable in &stdio.env {
        let value = lookup(variable).ok_or_else(|| {
            failure(
                name,
                format!(
                    "it names {variable} in env, and the worker's environment does not have it"
                ),
            )
        })?;
        command.env(variable, value);
    }
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| failure(name, format!("{program} could not be started: {e}")))?;
    ().serve(transport)
        .await
        .map_err(|e| failure(name, format!("{program} did not begin an MCP session: {e}")))
}

/// The headers a plugin's `headersSecretRef` holds: the variable named by the reference's key (or
/// its name), one `Name: value` a line — projected into the worker by the operator on Kubernetes.
pub fn headers_of(text: &str) -> Result<Vec<(String, String)>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| "a line that is not `Name: value`".to_string())?;
            Ok((name.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

async fn start_http(
    name: &str,
    http: &HttpPlugin,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<RunningService<RoleClient, ()>, NodeFailure> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(http.url.clone());
    if let Some(reference) = &http.headers_secret_ref {
        let variable = reference
            .key
            .clone()
            .unwrap_or_else(|| reference.name.clone());
        let text = lookup(&variable).ok_or_else(|| {
            failure(
                name,
                format!("its headers' variable {variable} is not in the worker's environment"),
            )
        })?;
        let headers = headers_of(&text)
            .map_err(|why| failure(name, format!("its headers' variable {variable} has {why}")))?;
        for (header, value) in headers {
            let header = reqwest::header::HeaderName::from_bytes(header.as_bytes())
                .map_err(|_| failure(name, format!("{header:?} is not a header name")))?;
            // The value is a secret: not repeated in the error.
            let value = reqwest::header::HeaderValue::from_str(&value)
                .map_err(|_| failure(name, format!("the value of header {header} is not valid")))?;
            config.custom_headers.insert(header, value);
        }
    }
    // One TLS provider for the process (the model client uses the same).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| failure(name, format!("no HTTP client: {e}")))?;
    let transport = StreamableHttpClientTransport::with_client(client, config);
    ().serve(transport).await.map_err(|e| {
        failure(
            name,
            format!("{} did not begin an MCP session: {e}", http.url),
        )
    })
}

impl Plugins {
    /// Connects to the plugins `agent_tools` names (their specs in the ticket's revision,
    /// `plugins`) and lists their tools; `lookup` reads the worker's environment.
    pub async fn connect(
        plugins: &Value,
        agent_tools: &[String],
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Plugins, NodeFailure> {
        let mut connected = Plugins {
            sessions: BTreeMap::new(),
            tools: Vec::new(),
            timeouts: BTreeMap::new(),
        };
        for (name, only) in wanted(agent_tools) {
            let spec: PluginSpec = plugins
                .get(&name)
                .cloned()
                .and_then(|v| serde_json::from_value(v).ok())
                .ok_or_else(|| {
                    NodeFailure::Revision(format!("the revision has no plugin {name:?}"))
                })?;
            let session = tokio::time::timeout(START_TIMEOUT, async {
                match (&spec.stdio, &spec.http) {
                    (Some(stdio), _) => start_stdio(&name, stdio, &lookup).await,
                    (None, Some(http)) => start_http(&name, http, &lookup).await,
                    (None, None) => Err(NodeFailure::Revision(format!(
                        "plugin {name:?} has neither stdio nor http"
                    ))),
                }
            })
            .await
            .map_err(|_| failure(&name, "it did not start within a minute"))??;
            let listed = tokio::time::timeout(START_TIMEOUT, session.list_all_tools())
                .await
                .map_err(|_| failure(&name, "it did not list its tools within a minute"))?
                .map_err(|e| failure(&name, format!("listing its tools: {e}")))?;
            for tool in listed {
                let tool_name = tool.name.to_string();
                let allowed_by_plugin = spec.tools.is_empty() || spec.tools.contains(&tool_name);
                let asked = only.as_ref().is_none_or(|o| o.contains(&tool_name));
                if !(allowed_by_plugin && asked) {
                    continue;
                }
                connected.tools.push(PluginTool {
                    plugin: name.clone(),
                    tool: tool_name.clone(),
                    spec: ToolSpec {
                        name: wire_name(&name, &tool_name),
                        description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                        parameters: Value::Object((*tool.input_schema).clone()),
                    },
                });
            }
            if let Some(only) = &only
                && let Some(missing) = only.iter().find(|t| {
                    !connected
                        .tools
                        .iter()
                        .any(|p| p.plugin == name && &p.tool == *t)
                })
            {
                return Err(failure(&name, format!("it does not offer {missing:?}")));
            }
            connected.timeouts.insert(
                name.clone(),
                spec.timeout_seconds
                    .map_or(CALL_TIMEOUT, Duration::from_secs),
            );
            connected.sessions.insert(name, session);
        }
        Ok(connected)
    }

    /// The tools as the model is offered them.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec.clone()).collect()
    }

    /// The plugin tool a wire name is, if it is one.
    pub fn tool(&self, wire: &str) -> Option<&PluginTool> {
        self.tools.iter().find(|t| t.spec.name == wire)
    }

    /// Calls the tool the wire name is; the result the model sees (an error among them).
    pub async fn call(&self, wire: &str, arguments: &str) -> Value {
        let Some(tool) = self.tool(wire) else {
            return json!({"error": format!("there is no tool {wire}")});
        };
        let arguments = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(map)) => map,
            Ok(Value::Null) | Err(_) if arguments.trim().is_empty() => Default::default(),
            _ => {
                return json!({"error": format!("{}.{} takes an object of arguments", tool.plugin, tool.tool)});
            }
        };
        let Some(session) = self.sessions.get(&tool.plugin) else {
            return json!({"error": format!("plugin {} is not connected", tool.plugin)});
        };
        let request = CallToolRequestParams::new(tool.tool.clone()).with_arguments(arguments);
        let bound = self
            .timeouts
            .get(&tool.plugin)
            .copied()
            .unwrap_or(CALL_TIMEOUT);
        match tokio::time::timeout(bound, session.call_tool(request)).await {
            Err(_) => json!({"error": format!("{}.{} did not answer within {} s",
                tool.plugin, tool.tool, bound.as_secs())}),
            Ok(Err(err)) => json!({"error": format!("{}.{}: {err}", tool.plugin, tool.tool)}),
            Ok(Ok(result)) => {
                let (text, truncated) = text_of(&result);
                if result.is_error == Some(true) {
                    json!({"error": text, "truncated": truncated})
                } else {
                    json!({"content": text, "truncated": truncated})
                }
            }
        }
    }

    /// Ends every session (a stdio plugin's process exits with it).
    pub async fn close(self) {
        for (_, session) in self.sessions {
            let _ = session.cancel().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_wants_whole_plugins_or_named_tools_and_wire_names_are_function_names() {
        let tools: Vec<String> = ["ws.read", "search", "git-hub.open-pr", "git-hub.comment"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let wanted = wanted(&tools);
        assert_eq!(wanted["search"], None);
        assert_eq!(
            wanted["git-hub"],
            Some(vec!["open-pr".to_string(), "comment".to_string()])
        );
        assert_eq!(wire_name("git-hub", "open pr/v2"), "git-hub__open_pr_v2");
        assert_eq!(wire_name("p", &"t".repeat(100)).len(), 64);
    }

    #[test]
    fn headers_are_name_value_lines() {
        assert_eq!(
            headers_of("Authorization: Bearer a:b\n\nX-Team:  core \n").unwrap(),
            [
                ("Authorization".to_string(), "Bearer a:b".to_string()),
                ("X-Team".to_string(), "core".to_string())
            ]
        );
        assert!(headers_of("no colon").is_err());
    }
}
