//! The `deep` node: a tool loop of the named Agent over the ticket's workspace. The model is given
//! the Agent's workspace tools; each call it asks for runs in the ticket's sandbox as its user
//! (every path confined to `/workspace` first); the results go back as tool messages; the loop
//! ends when the model answers without calling a tool, or the agent's budget (`usd`, `turns`)
//! ends it.
//!
//! Every turn is journaled: its answer with its settlement the moment it arrives, its tools'
//! results once they ran. An attempt after a crash starts in a new sandbox restored from the last
//! checkpoint, so it first replays the journaled turns' effects on the workspace (their writes and
//! commands, run again; nothing is paid again), then goes on from the first turn not finished.

use afe_config::BUILTIN_TOOLS;
use afe_config::kinds::AgentSpec;
use afe_model::{
    ChatRequest, ChatResponse, Message, ModelClient, Role, ToolCall, ToolChoice, ToolSpec,
};
use afe_sandbox::{ExecRequest, Opened, Payload, Sandbox};
use afe_worker::NodeCall;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::agent::{agent_spec, model_of, paid_turn, system_prompt};
use crate::call::Model;
use crate::error::NodeFailure;
use crate::plugins::Plugins;

/// The most of a file or a command's streams a tool result carries back to the model.
pub const TOOL_OUTPUT: usize = 16 << 10;
/// What `ws.test` runs when the model names no command.
pub const DEFAULT_TEST: [&str; 2] = ["make", "test"];

/// A tool's name on the wire: OpenAI-compatible function names allow no dot (`ws.read` →
/// `ws_read`).
pub fn wire_name(tool: &str) -> String {
    tool.replace('.', "_")
}

/// The workspace tools of `tools` (an Agent's list), as the model is offered them.
pub fn tool_specs(tools: &[String]) -> Vec<ToolSpec> {
    let path = json!({"type": "string", "description": "a path in the workspace; relative paths start at the repository"});
    let argv = json!({"type": "array", "items": {"type": "string"}, "description": "the program and its arguments, not a shell line"});
    tools
        .iter()
        .filter(|tool| BUILTIN_TOOLS.contains(&tool.as_str()))
        .map(|tool| {
            let (description, parameters) = match tool.as_str() {
                "ws.read" => (
                    "Read a file of the workspace.",
                    json!({"type": "object", "properties": {"path": path}, "required": ["path"]}),
                ),
                "ws.write" => (
                    "Write a file of the workspace (made, or replaced whole).",
                    json!({"type": "object", "properties": {"path": path, "content": {"type": "string"}},
                        "required": ["path", "content"]}),
                ),
                "ws.exec" => (
                    "Run a command in the repository; returns its status and output.",
                    json!({"type": "object", "properties": {"argv": argv}, "required": ["argv"]}),
                ),
                _ => (
                    "Run the tests (`make test` unless a command is given); returns whether they passed and their output.",
                    json!({"type": "object", "properties": {"argv": argv}}),
                ),
            };
            ToolSpec {
                name: wire_name(tool),
                description: description.to_string(),
                parameters,
            }
        })
        .collect()
}

/// Runs one tool call in the sandbox. What the call got wrong (a path outside the workspace, a
/// missing file, arguments that are not what the tool takes) is the model's to see, as the
/// result; only a sandbox that is gone fails the node.
pub async fn run_tool(
    sandbox: &dyn Sandbox,
    opened: &Opened,
    call: &ToolCall,
    env: &[(String, String)],
) -> Result<Value, NodeFailure> {
    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
    let text = |key: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let argv = |default: &[&str]| -> Option<Vec<String>> {
        match arguments.get("argv").and_then(Value::as_array) {
            Some(items) => items
                .iter()
                .map(|a| a.as_str().map(str::to_string))
                .collect(),
            None if !default.is_empty() => Some(default.iter().map(|s| s.to_string()).collect()),
            None => None,
        }
    };
    let outcome = match call.name.as_str() {
        "ws_read" => match text("path") {
            Some(path) => sandbox
                .get(opened, &path, false)
                .await
                .map(|payload| match payload {
                    Payload::File(bytes) | Payload::Tar(bytes) => {
                        let kept = &bytes[..bytes.len().min(TOOL_OUTPUT)];
                        json!({"content": String::from_utf8_lossy(kept), "bytes": bytes.len(),
                        "truncated": bytes.len() > TOOL_OUTPUT})
                    }
                }),
            None => return Ok(json!({"error": "ws.read takes {\"path\": ...}"})),
        },
        "ws_write" => match (text("path"), text("content")) {
            (Some(path), Some(content)) => {
                let bytes = content.len();
                sandbox
                    .put(opened, &path, Payload::File(content.into_bytes()))
                    .await
                    .map(|()| json!({"written": bytes}))
            }
            _ => return Ok(json!({"error": "ws.write takes {\"path\": ..., \"content\": ...}"})),
        },
        "ws_exec" | "ws_test" => {
            let default: &[&str] = if call.name == "ws_test" {
                &DEFAULT_TEST
            } else {
                &[]
            };
            let Some(argv) = argv(default).filter(|a| !a.is_empty()) else {
                return Ok(
                    json!({"error": format!("{} takes {{\"argv\": [program, arguments...]}}", call.name.replace('_', "."))}),
                );
            };
            let mut request = ExecRequest::new(argv);
            request.env = env.to_vec();
            request.output_limit = TOOL_OUTPUT;
            sandbox.exec(opened, &request, &mut |_| {}).await.map(|ran| {
                let mut result = json!({"status": ran.status, "stdout": ran.stdout.text(), "stderr": ran.stderr.text()});
                if call.name == "ws_test" {
                    result["passed"] = json!(ran.succeeded());
                }
                result
            })
        }
        other => return Ok(json!({"error": format!("there is no tool {other}")})),
    };
    match outcome {
        Ok(result) => Ok(result),
        Err(err) if err.is_gone() => Err(err.into()),
        Err(err) => Ok(json!({"error": err.to_string()})),
    }
}

/// Whether a tool call changes the workspace (and so is replayed on a resumed attempt).
fn has_effects(call: &ToolCall) -> bool {
    matches!(call.name.as_str(), "ws_write" | "ws_exec" | "ws_test")
}

/// A tool's name as the config writes it (`ws.read`, `PLUGIN.TOOL`), from its wire name.
fn tool_name(plugins: &Plugins, wire: &str) -> String {
    match plugins.tool(wire) {
        Some(p) => format!("{}.{}", p.plugin, p.tool),
        None => wire.replace('_', "."),
    }
}

/// The assistant message an answer is in the conversation.
fn assistant(answer: &ChatResponse) -> Message {
    Message {
        role: Role::Assistant,
        content: (!answer.content.is_empty()).then(|| answer.content.clone()),
        tool_calls: answer.tool_calls.clone(),
        tool_call_id: None,
    }
}

/// Runs the node in `opened`; its output.
pub async fn run(
    client: &ModelClient,
    call: &NodeCall,
    name: &str,
    sandbox: &dyn Sandbox,
    opened: &Opened,
    env: &[(String, String)],
) -> Result<Value, NodeFailure> {
    let spec = agent_spec(call, name)?;
    let model = model_of(client, &spec)?;
    if call.attempt > 1 {
        model.settle_earlier_attempts(&call.wallet).await?;
    }
    let plugins = Plugins::connect(
        call.revision.get("plugins").unwrap_or(&Value::Null),
        &spec.tools,
        |name| std::env::var(name).ok(),
    )
    .await?;
    let agent = Agent {
        name,
        spec: &spec,
        model: &model,
        plugins: &plugins,
    };
    let result = tool_loop(call, &agent, sandbox, opened, env).await;
    plugins.close().await;
    result
}

/// The node's agent as the loop uses it: its spec, its model, its plugins connected.
struct Agent<'a> {
    name: &'a str,
    spec: &'a AgentSpec,
    model: &'a Model<'a>,
    plugins: &'a Plugins,
}

/// The loop itself.
async fn tool_loop(
    call: &NodeCall,
    agent: &Agent<'_>,
    sandbox: &dyn Sandbox,
    opened: &Opened,
    env: &[(String, String)],
) -> Result<Value, NodeFailure> {
    let Agent {
        name,
        spec,
        model,
        plugins,
    } = *agent;
    let mut tools = tool_specs(&spec.tools);
    tools.extend(plugins.specs());
    let max_turns = spec.budget.as_ref().and_then(|b| b.turns);
    let mut messages = vec![
        Message::text(Role::System, system_prompt(call, name, spec)?),
        Message::text(
            Role::User,
            format!(
                "The ticket's input and the outputs of the nodes before this one:\n{}\nThe repository is your working directory; use the tools to read, change and test it, and answer without a tool call when you are done.",
                call.context
            ),
        ),
    ];
    let journaled = call.wallet.turns().await?;
    let mut turn: i64 = 0;
    loop {
        let earlier = journaled.iter().find(|t| t.turn == turn);
        let answer = match earlier
            .and_then(|t| serde_json::from_value::<ChatResponse>(t.payload["answer"].clone()).ok())
        {
            Some(answer) => answer,
            None => {
                if max_turns.is_some_and(|max| turn >= i64::from(max)) {
                    return Err(NodeFailure::AgentBudget(format!(
                        "node {} used its agent's {} turns without finishing",
                        call.node.id,
                        max_turns.unwrap_or_default()
                    )));
                }
                let mut request = ChatRequest::new(&model.name, messages.clone());
                request.tools = tools.clone();
                if turn == 0
                    && let Some(first) = &spec.first_tool
                {
                    request.tool_choice = Some(ToolChoice::Named(wire_name(first)));
                }
                paid_turn(call, spec, model, turn, request).await?
            }
        };
        messages.push(assistant(&answer));
        if answer.tool_calls.is_empty() {
            return Ok(json!({"text": answer.content, "turns": turn + 1}));
        }
        let journaled_results = earlier
            .and_then(|t| t.payload.get("results"))
            .and_then(Value::as_array)
            .cloned();
        let results = match journaled_results {
            // A turn finished by an earlier attempt: its results are what the model saw; its
            // effects are made again on this attempt's new workspace.
            Some(results) => {
                for tool_call in answer.tool_calls.iter().filter(|c| has_effects(c)) {
                    run_tool(sandbox, opened, tool_call, env).await?;
                }
                results
            }
            None => {
                let mut results = Vec::with_capacity(answer.tool_calls.len());
                for tool_call in &answer.tool_calls {
                    let span = tracing::info_span!(
                        target: "afe",
                        "afe.tool_call",
                        afe.tool = %tool_name(plugins, &tool_call.name),
                        afe.turn = turn,
                        afe.error = tracing::field::Empty,
                    );
                    let result = match plugins.tool(&tool_call.name) {
                        Some(_) => {
                            plugins
                                .call(&tool_call.name, &tool_call.arguments)
                                .instrument(span.clone())
                                .await
                        }
                        None => {
                            run_tool(sandbox, opened, tool_call, env)
                                .instrument(span.clone())
                                .await?
                        }
                    };
                    if let Some(error) = result.get("error").and_then(Value::as_str) {
                        span.record("afe.error", error);
                    }
                    results.push(result);
                }
                let calls: Vec<Value> = answer
                    .tool_calls
                    .iter()
                    .zip(&results)
                    .map(|(c, r)| json!({"tool": tool_name(plugins, &c.name), "error": r.get("error")}))
                    .collect();
                call.wallet
                    .save_turn(
                        turn,
                        &json!({"answer": answer, "results": results}),
                        &[],
                        (
                            "tool.results",
                            json!({"node": call.node.id, "turn": turn, "calls": calls}),
                        ),
                    )
                    .await?;
                results
            }
        };
        for (tool_call, result) in answer.tool_calls.iter().zip(&results) {
            messages.push(Message::tool_result(&tool_call.id, result.to_string()));
        }
        turn += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_workspace_tools_are_offered_under_wire_names() {
        let specs = tool_specs(&[
            "ws.read".to_string(),
            "ws.exec".to_string(),
            "code-search.search".to_string(),
        ]);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ws_read", "ws_exec"]);
        assert_eq!(specs[0].parameters["required"][0], "path");
        assert_eq!(wire_name("ws.test"), "ws_test");
    }
}
