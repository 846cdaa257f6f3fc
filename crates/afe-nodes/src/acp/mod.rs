//! The `acp` node: an Agent Client Protocol agent started inside the ticket's sandbox (attached:
//! the worker holds its stdin and stdout) and driven by the worker as ACP's client — `initialize`,
//! `session/new` in the repository, one `session/prompt` rendered from the node's context — while
//! it answers the agent's requests in the sandbox ([`client`]), turns its `session/update`s into
//! ticket events (`acp.update`; the text of consecutive chunks in one event), and records the cost
//! it reports (`usage_update.cost`, cumulative) in the ledger as spent. A cost past the ticket's
//! budget, or a turn past the node's timeout, cancels the session (`session/cancel`); an agent that
//! does not stop within a grace after that is killed. Depends on the protocol's types only
//! (`agent-client-protocol-schema`), not on its SDK.
//!
//! - [`rpc`]: JSON-RPC 2.0 lines, pure.
//! - [`client`]: the client's side: files, terminals, permissions.

pub mod client;
pub mod rpc;

use std::sync::Arc;
use std::time::Duration;

use afe_config::kinds::AcpAgent;
use afe_sandbox::{Attached, ExecRequest, Opened, OutputChunk, Sandbox, SandboxError};
use afe_store::StoreError;
use afe_worker::NodeCall;
use agent_client_protocol_schema::v1 as acp;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::error::NodeFailure;
use crate::prompt;
use client::ClientSide;
use rpc::{Incoming, Lines, RpcError};

/// The node's turn, when its `timeoutSeconds` does not say.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long an agent has to end its turn after `session/cancel`, and to exit once its stdin is
/// closed, before it is killed.
const GRACE: Duration = Duration::from_secs(10);
/// The most of the agent's message text the node's output keeps, and of its stderr an error
/// quotes.
const TEXT_KEPT: usize = 64 << 10;
const STDERR_KEPT: usize = 4 << 10;

/// Why the session was cancelled by the client.
#[derive(Debug)]
enum Cancel {
    Timeout(Duration),
    Budget(StoreError),
}

/// A text update not yet recorded: consecutive chunks of one kind become one event.
#[derive(Debug, Default)]
struct PendingText {
    kind: String,
    text: String,
}

/// One running agent and what the node knows of it.
struct Session<'a> {
    call: &'a NodeCall,
    command: String,
    stdin: Option<mpsc::Sender<Vec<u8>>>,
    output: mpsc::Receiver<OutputChunk>,
    status: Option<tokio::sync::oneshot::Receiver<Result<i64, SandboxError>>>,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    lines: Lines,
    /// The newest of the agent's stderr: what it said last is what explains a crash.
    stderr: String,
    client: Arc<ClientSide>,
    answers_tx: mpsc::Sender<(Value, Result<Value, RpcError>, Value)>,
    answers_rx: mpsc::Receiver<(Value, Result<Value, RpcError>, Value)>,
    next_id: i64,
    deadline: Instant,
    timeout: Duration,
    cancel_sent: watch::Sender<bool>,
    cancelled: Option<Cancel>,
    session_id: Option<String>,
    pending: PendingText,
    /// The agent's message text, for the node's output.
    said: String,
    /// What the agent has reported spending so far, in micro-dollars, and what of it is in the
    /// ledger.
    cost_recorded: i64,
}

/// What a turn ended with.
enum Ended {
    Answer(Result<Value, RpcError>),
    /// The agent closed its stdout (exited) before it answered.
    Gone,
}

impl Session<'_> {
    async fn send(&mut self, line: String) -> Result<(), NodeFailure> {
        let Some(stdin) = &self.stdin else {
            return Ok(());
        };
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        if stdin.send(bytes).await.is_err() {
            return Err(self.broken("its stdin closed").await);
        }
        Ok(())
    }

    /// The agent broke off: what it said last on stderr, and how it ended if it did.
    async fn broken(&mut self, what: &str) -> NodeFailure {
        let mut detail = format!("the ACP agent {} {what}", self.command);
        if let Some(status) = self.status.take()
            && let Ok(Ok(Ok(code))) = tokio::time::timeout(GRACE, status).await
        {
            detail.push_str(&format!(" (it exited with status {code})"));
        }
        let stderr = self.stderr.trim();
        if !stderr.is_empty() {
            detail.push_str(&format!("; its stderr ended: {stderr}"));
        }
        NodeFailure::AcpProtocol(detail)
    }

    async fn record(&self, kind: &str, payload: Value) -> Result<(), NodeFailure> {
        if matches!(self.cancelled, Some(Cancel::Budget(_))) {
            // The ticket has stopped: its lease is gone, and nothing more is written.
            return Ok(());
        }
        self.call.journal.record(kind, payload).await?;
        Ok(())
    }

    async fn flush_text(&mut self) -> Result<(), NodeFailure> {
        let pending = std::mem::take(&mut self.pending);
        if pending.text.is_empty() {
            return Ok(());
        }
        let text: String = pending.text.chars().take(TEXT_KEPT).collect();
        self.record(
            "acp.update",
            json!({"node": self.call.node.id, "update": pending.kind, "text": text}),
        )
        .await
    }

    /// Asks the agent to stop its turn, once.
    async fn cancel(&mut self, why: Cancel) -> Result<(), NodeFailure> {
        if self.cancelled.is_some() {
            return Ok(());
        }
        self.cancelled = Some(why);
        let _ = self.cancel_sent.send(true);
        // From now on the agent has the grace to answer.
        self.deadline = Instant::now() + GRACE;
        if let Some(session) = self.session_id.clone() {
            self.send(rpc::notification(
                "session/cancel",
                serde_json::to_value(acp::CancelNotification::new(session)).unwrap_or_default(),
            ))
            .await?;
        }
        Ok(())
    }

    /// One `session/update`: an event, and the cost in the ledger.
    async fn update(&mut self, params: Value) -> Result<(), NodeFailure> {
        let node = self.call.node.id.clone();
        let Ok(notification) = serde_json::from_value::<acp::SessionNotification>(params.clone())
        else {
            let kind = params["update"]["sessionUpdate"]
                .as_str()
                .unwrap_or("unknown");
            self.flush_text().await?;
            return self
                .record(
                    "acp.update",
                    json!({"node": node, "update": kind, "unread": true}),
                )
                .await;
        };
        let text_of = |chunk: &acp::ContentChunk| match &chunk.content {
            acp::ContentBlock::Text(text) => text.text.clone(),
            _ => String::new(),
        };
        let (kind, text) = match &notification.update {
            acp::SessionUpdate::AgentMessageChunk(chunk) => ("agent_message_chunk", text_of(chunk)),
            acp::SessionUpdate::AgentThoughtChunk(chunk) => ("agent_thought_chunk", text_of(chunk)),
            acp::SessionUpdate::UserMessageChunk(chunk) => ("user_message_chunk", text_of(chunk)),
            _ => ("", String::new()),
        };
        if !kind.is_empty() {
            if self.pending.kind != kind {
                self.flush_text().await?;
                self.pending.kind = kind.to_string();
            }
            if kind == "agent_message_chunk" && self.said.len() < TEXT_KEPT {
                self.said.push_str(&text);
            }
            self.pending.text.push_str(&text);
            return Ok(());
        }
        self.flush_text().await?;
        let raw = &params["update"];
        let kind = raw["sessionUpdate"]
            .as_str()
            .unwrap_or("unknown")
            .to_string();
        let payload = match &notification.update {
            acp::SessionUpdate::ToolCall(call) => json!({"node": node, "update": kind,
                "tool_call": call.tool_call_id.to_string(), "title": call.title,
                "kind": raw["kind"], "status": raw["status"]}),
            acp::SessionUpdate::ToolCallUpdate(update) => json!({"node": node, "update": kind,
                "tool_call": update.tool_call_id.to_string(), "status": raw["status"], "title": raw["title"]}),
            acp::SessionUpdate::Plan(_) => {
                json!({"node": node, "update": kind, "entries": raw["entries"]})
            }
            acp::SessionUpdate::UsageUpdate(usage) => {
                let counted = match &usage.cost {
                    Some(cost) if cost.currency.eq_ignore_ascii_case("USD") => {
                        self.spend(cost.amount).await?;
                        true
                    }
                    _ => false,
                };
                json!({"node": node, "update": kind, "used": usage.used, "size": usage.size,
                    "cost": raw["cost"], "counted": counted})
            }
            _ => json!({"node": node, "update": kind}),
        };
        self.record("acp.update", payload).await
    }

    /// The agent's cumulative cost is `amount` dollars: what is new of it goes in the ledger, and
    /// a ledger past the budget cancels the session.
    async fn spend(&mut self, amount: f64) -> Result<(), NodeFailure> {
        let total = (amount * 1e6).round() as i64;
        let new = total - self.cost_recorded;
        if new <= 0 || matches!(self.cancelled, Some(Cancel::Budget(_))) {
            return Ok(());
        }
        self.cost_recorded = total;
        match self.call.wallet.spent("acp", new).await {
            Ok(()) => Ok(()),
            Err(err @ StoreError::BudgetExceeded { .. }) => self.cancel(Cancel::Budget(err)).await,
            Err(err) => Err(err.into()),
        }
    }

    /// Sends `method` and serves the agent until it answers: its requests answered, its updates
    /// recorded, the deadline kept.
    async fn call_agent(&mut self, method: &str, params: Value) -> Result<Ended, NodeFailure> {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(rpc::request(self.next_id, method, params))
            .await?;
        loop {
            tokio::select! {
                chunk = self.output.recv() => {
                    let Some(chunk) = chunk else { return Ok(Ended::Gone) };
                    let bytes = match chunk {
                        OutputChunk::Stderr(bytes) => {
                            self.stderr.push_str(&String::from_utf8_lossy(&bytes));
                            client::keep_newest(&mut self.stderr, STDERR_KEPT);
                            continue;
                        }
                        OutputChunk::Stdout(bytes) => bytes,
                    };
                    let lines = match self.lines.push(&bytes) {
                        Ok(lines) => lines,
                        Err(why) => return Err(self.broken(&format!("wrote {why}")).await),
                    };
                    for line in lines {
                        match rpc::parse(&line) {
                            Err(why) => {
                                let quoted: String = line.chars().take(200).collect();
                                return Err(self.broken(&format!("wrote {why}: {quoted}")).await);
                            }
                            Ok(Incoming::Response { id: answered, outcome }) if answered == id => {
                                self.flush_text().await?;
                                return Ok(Ended::Answer(outcome));
                            }
                            Ok(Incoming::Response { .. }) => {}
                            Ok(Incoming::Notification { method, params }) => {
                                if method == "session/update" {
                                    self.update(params).await?;
                                }
                            }
                            Ok(Incoming::Request { id, method, params }) => {
                                let client = self.client.clone();
                                let answers = self.answers_tx.clone();
                                tokio::spawn(async move {
                                    let (outcome, said) = client.answer(&method, params).await;
                                    let _ = answers.send((id, outcome, said)).await;
                                });
                            }
                        }
                    }
                }
                Some((id, outcome, said)) = self.answers_rx.recv() => {
                    self.flush_text().await?;
                    let mut said = said;
                    said["node"] = json!(self.call.node.id);
                    self.record("acp.request", said).await?;
                    self.send(rpc::response(&id, outcome)).await?;
                }
                _ = tokio::time::sleep_until(self.deadline) => {
                    if self.cancelled.is_some() {
                        // The grace after a cancel is over: the agent is stopped.
                        self.stop().await;
                        return Err(self.failure_of_cancel());
                    }
                    let timeout = self.timeout;
                    self.cancel(Cancel::Timeout(timeout)).await?;
                }
            }
        }
    }

    /// Why the node failed, once the session was cancelled by the client.
    fn failure_of_cancel(&mut self) -> NodeFailure {
        match self.cancelled.take() {
            Some(Cancel::Budget(err)) => NodeFailure::Store(err),
            Some(Cancel::Timeout(after)) => NodeFailure::AcpTimeout(format!(
                "the ACP agent {} did not end its turn within {} s; it was cancelled",
                self.command,
                after.as_secs()
            )),
            None => NodeFailure::AcpProtocol(format!("the ACP agent {} stopped", self.command)),
        }
    }

    /// The session is over: terminals killed, stdin closed, the agent given the grace to exit and
    /// killed if it does not.
    async fn stop(&mut self) {
        self.client.close().await;
        self.stdin = None;
        let exited = match self.status.take() {
            Some(status) => tokio::time::timeout(GRACE, status).await.is_ok(),
            None => true,
        };
        if !exited && let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }
}

/// The variables the agent gets: the node's own, and those its `env` names, from the worker's
/// environment (`lookup`); a named one the worker does not have is refused.
pub fn agent_env(
    spec: &AcpAgent,
    base: &[(String, String)],
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, SandboxError> {
    let mut env = base.to_vec();
    for name in &spec.env {
        let value = lookup(name).ok_or_else(|| SandboxError::VariableRefused {
            name: name.clone(),
            why: "the acp node names it in env, and the worker's environment does not have it"
                .to_string(),
        })?;
        env.push((name.clone(), value));
    }
    Ok(env)
}

/// The variables the agent gets where the platform holds their values (Kubernetes): the node's
/// own; each one its `env` names is already in the sandbox, by reference, when the flow's
/// `sandbox.env` names it too — and refused otherwise, since the sandbox cannot have it.
pub fn agent_env_by_reference(
    spec: &AcpAgent,
    base: &[(String, String)],
    sandbox_env: &[String],
) -> Result<Vec<(String, String)>, SandboxError> {
    if let Some(missing) = spec.env.iter().find(|name| !sandbox_env.contains(name)) {
        return Err(SandboxError::VariableRefused {
            name: missing.clone(),
            why: "on Kubernetes an acp agent's variables come from the sandbox's Secret: name it in the flow's spec.sandbox.env too".to_string(),
        });
    }
    Ok(base.to_vec())
}

/// The prompt the agent is given: the node's, rendered from its context, or the context itself.
pub fn prompt_of(call: &NodeCall, spec: &AcpAgent) -> Result<String, NodeFailure> {
    match &spec.prompt {
        Some(template) => {
            prompt::render(template, &call.context).map_err(|missing| NodeFailure::PromptValues {
                agent: format!("of node {}", call.node.id),
                missing,
            })
        }
        None => Ok(format!(
            "The ticket's input and the outputs of the nodes before this one:\n{}",
            call.context
        )),
    }
}

/// Runs the node's agent in `opened`; its output: how its turn ended and what it said.
pub async fn run(
    call: &NodeCall,
    spec: &AcpAgent,
    sandbox: Arc<dyn Sandbox>,
    opened: &Opened,
    base_env: &[(String, String)],
    variables: crate::executor::Variables,
) -> Result<Value, NodeFailure> {
    let text = prompt_of(call, spec)?;
    let mut request = ExecRequest::new(spec.command.clone());
    request.env = match variables {
        crate::executor::Variables::FromWorker => {
            agent_env(spec, base_env, |name| std::env::var(name).ok())?
        }
        crate::executor::Variables::ByReference => {
            agent_env_by_reference(spec, base_env, &call.flow.sandbox.env)?
        }
    };
    let Attached {
        stdin,
        output,
        status,
        kill,
    } = sandbox.attach(opened, &request).await?;
    let (cancel_sent, cancelled) = watch::channel(false);
    let client = Arc::new(ClientSide::new(
        sandbox.clone(),
        opened.clone(),
        spec.permissions,
        cancelled,
    ));
    let (answers_tx, answers_rx) = mpsc::channel(16);
    let timeout = spec
        .timeout_seconds
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let mut session = Session {
        call,
        command: spec.command.join(" "),
        stdin: Some(stdin),
        output,
        status: Some(status),
        kill: Some(kill),
        lines: Lines::default(),
        stderr: String::new(),
        client,
        answers_tx,
        answers_rx,
        next_id: 0,
        deadline: Instant::now() + timeout,
        timeout,
        cancel_sent,
        cancelled: None,
        session_id: None,
        pending: PendingText::default(),
        said: String::new(),
        cost_recorded: 0,
    };
    let ended = drive(&mut session, text).await;
    session.stop().await;
    ended
}

/// Initialize, a session in the repository, the prompt: the output, or why it failed.
async fn drive(session: &mut Session<'_>, text: String) -> Result<Value, NodeFailure> {
    let initialize = acp::InitializeRequest::new(agent_client_protocol_schema::ProtocolVersion::V1)
        .client_capabilities(ClientSide::capabilities());
    let initialized = answered(session, "initialize", json!(initialize)).await?;
    let version = initialized["protocolVersion"].as_u64().unwrap_or(0);
    if version != 1 {
        return Err(NodeFailure::AcpProtocol(format!(
            "the ACP agent {} speaks protocol version {version}; this afe speaks 1",
            session.command
        )));
    }
    let new = acp::NewSessionRequest::new(afe_sandbox::workspace::REPO);
    let created = answered(session, "session/new", json!(new)).await?;
    let session_id = created["sessionId"]
        .as_str()
        .ok_or_else(|| {
            NodeFailure::AcpProtocol(format!(
                "the ACP agent {} answered session/new without a sessionId",
                session.command
            ))
        })?
        .to_string();
    session.session_id = Some(session_id.clone());
    let prompt = acp::PromptRequest::new(
        session_id,
        vec![acp::ContentBlock::Text(acp::TextContent::new(text))],
    );
    let result = answered(session, "session/prompt", json!(prompt)).await?;
    let stop = result["stopReason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if session.cancelled.is_some() {
        return Err(session.failure_of_cancel());
    }
    match stop.as_str() {
        "end_turn" | "max_tokens" | "max_turn_requests" => Ok(json!({
            "stop_reason": stop,
            "text": session.said,
            "cost_usd_micros": session.cost_recorded,
        })),
        "refusal" => Err(NodeFailure::AcpRefused(format!(
            "the ACP agent {} refused the prompt",
            session.command
        ))),
        other => Err(NodeFailure::AcpProtocol(format!(
            "the ACP agent {} ended its turn with stop reason {other:?} without being asked to stop",
            session.command
        ))),
    }
}

/// `method`'s result; the agent's error answer, or its going away, as the node's failure.
async fn answered(
    session: &mut Session<'_>,
    method: &str,
    params: Value,
) -> Result<Value, NodeFailure> {
    match session.call_agent(method, params).await? {
        Ended::Answer(Ok(result)) => Ok(result),
        Ended::Answer(Err(_)) if session.cancelled.is_some() => Err(session.failure_of_cancel()),
        Ended::Answer(Err(error)) => Err(NodeFailure::AcpRefused(format!(
            "the ACP agent {} answered {method} with error {}: {}",
            session.command, error.code, error.message
        ))),
        Ended::Gone if session.cancelled.is_some() => Err(session.failure_of_cancel()),
        Ended::Gone => Err(session
            .broken(&format!("exited before it answered {method}"))
            .await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_reference_an_agents_variables_must_be_the_sandboxes_and_no_value_is_read() {
        let spec = AcpAgent {
            command: vec!["agent".into()],
            env: vec!["MODEL_KEY".into()],
            prompt: None,
            permissions: Default::default(),
            timeout_seconds: Some(5),
        };
        let base = vec![("AFE_TICKET".to_string(), "t".to_string())];
        assert_eq!(
            agent_env_by_reference(&spec, &base, &["MODEL_KEY".into()]).unwrap(),
            base,
            "the Pod has MODEL_KEY from its Secret: nothing to pass"
        );
        let refused = agent_env_by_reference(&spec, &base, &[]).unwrap_err();
        assert!(
            matches!(refused, SandboxError::VariableRefused { ref name, .. } if name == "MODEL_KEY")
        );
    }
}
