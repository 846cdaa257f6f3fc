//! The client's side of ACP, answered in the ticket's sandbox: the agent's `fs/read_text_file`
//! and `fs/write_text_file` (paths confined to the workspace by the port), `terminal/*` (each
//! terminal a command attached in the sandbox, its output kept up to the agent's limit, killable),
//! and `session/request_permission`, answered by the node's policy. Each answer is also what the
//! ticket's `acp.request` event says of it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use afe_config::kinds::AcpPermissions;
use afe_sandbox::{ExecRequest, Opened, OutputChunk, Payload, Sandbox};
use agent_client_protocol_schema::v1 as acp;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{Mutex, oneshot, watch};

use super::rpc::{INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RpcError};

/// What a terminal keeps when the agent names no limit.
const DEFAULT_TERMINAL_OUTPUT: u64 = 1 << 20;

/// One terminal: its output so far (the newest kept), and its exit once it has one.
struct Terminal {
    output: Mutex<(String, bool)>,
    exit: watch::Receiver<Option<i64>>,
    kill: Mutex<Option<oneshot::Sender<()>>>,
}

/// The client's side of one session.
pub struct ClientSide {
    pub sandbox: Arc<dyn Sandbox>,
    pub opened: Opened,
    pub permissions: AcpPermissions,
    /// Set once the client has sent `session/cancel`: permission requests are then answered
    /// `cancelled`, as the protocol asks.
    pub cancelled: watch::Receiver<bool>,
    terminals: Mutex<HashMap<String, Arc<Terminal>>>,
    next_terminal: AtomicU64,
}

fn params<T: DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError {
        code: INVALID_PARAMS,
        message: e.to_string(),
    })
}

fn failed(message: impl std::fmt::Display) -> RpcError {
    RpcError {
        code: INTERNAL_ERROR,
        message: message.to_string(),
    }
}

fn value(response: impl serde::Serialize) -> Value {
    serde_json::to_value(response).unwrap_or(Value::Null)
}

/// Lines `line` (1-based) onwards, at most `limit` of them.
fn window(text: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return text.to_string();
    }
    let skip = line.map_or(0, |l| l.saturating_sub(1) as usize);
    let take = limit.map_or(usize::MAX, |l| l as usize);
    text.split_inclusive('\n').skip(skip).take(take).collect()
}

/// Keeps the newest `limit` bytes of `output`, cut at a character boundary; whether it cut.
pub fn keep_newest(output: &mut String, limit: usize) -> bool {
    if output.len() <= limit {
        return false;
    }
    let mut start = output.len() - limit;
    while !output.is_char_boundary(start) {
        start += 1;
    }
    output.drain(..start);
    true
}

/// An exit status as ACP says it: a code, or the signal of a command killed by one (128 + n).
fn exit_status(status: i64) -> acp::TerminalExitStatus {
    match status {
        129..=192 => {
            let signal = match status - 128 {
                9 => "SIGKILL".to_string(),
                15 => "SIGTERM".to_string(),
                2 => "SIGINT".to_string(),
                n => format!("SIG{n}"),
            };
            acp::TerminalExitStatus::new().signal(signal)
        }
        _ => acp::TerminalExitStatus::new().exit_code(u32::try_from(status).ok()),
    }
}

/// The option the policy picks: the first of the kinds it allows, in the agent's order.
pub fn choose_permission(
    policy: AcpPermissions,
    options: &[acp::PermissionOption],
) -> Option<acp::PermissionOptionId> {
    let wanted: &[acp::PermissionOptionKind] = match policy {
        AcpPermissions::Allow => &[
            acp::PermissionOptionKind::AllowOnce,
            acp::PermissionOptionKind::AllowAlways,
        ],
        AcpPermissions::Reject => &[
            acp::PermissionOptionKind::RejectOnce,
            acp::PermissionOptionKind::RejectAlways,
        ],
    };
    options
        .iter()
        .find(|o| wanted.contains(&o.kind))
        .map(|o| o.option_id.clone())
}

impl std::fmt::Debug for ClientSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSide")
            .field("sandbox", &self.opened.id)
            .field("permissions", &self.permissions)
            .finish()
    }
}

impl ClientSide {
    pub fn new(
        sandbox: Arc<dyn Sandbox>,
        opened: Opened,
        permissions: AcpPermissions,
        cancelled: watch::Receiver<bool>,
    ) -> ClientSide {
        ClientSide {
            sandbox,
            opened,
            permissions,
            cancelled,
            terminals: Mutex::new(HashMap::new()),
            next_terminal: AtomicU64::new(1),
        }
    }

    /// The capabilities the client offers in `initialize`.
    pub fn capabilities() -> acp::ClientCapabilities {
        acp::ClientCapabilities::new()
            .fs(acp::FileSystemCapabilities::new()
                .read_text_file(true)
                .write_text_file(true))
            .terminal(true)
    }

    /// Answers one request of the agent's; with it, what the `acp.request` event says.
    pub async fn answer(&self, method: &str, raw: Value) -> (Result<Value, RpcError>, Value) {
        let answered = match method {
            "fs/read_text_file" => self.read(raw).await,
            "fs/write_text_file" => self.write(raw).await,
            "terminal/create" => self.create_terminal(raw).await,
            "terminal/output" => self.terminal_output(raw).await,
            "terminal/wait_for_exit" => self.wait_for_exit(raw).await,
            "terminal/kill" => self.kill_terminal(raw).await,
            "terminal/release" => self.release_terminal(raw).await,
            "session/request_permission" => self.permission(raw).await,
            other => Err((
                RpcError {
                    code: METHOD_NOT_FOUND,
                    message: format!("this client does not offer {other}"),
                },
                json!({}),
            )),
        };
        match answered {
            Ok((result, said)) => (
                Ok(result),
                json!({"method": method, "ok": true, "detail": said}),
            ),
            Err((error, said)) => (
                Err(error.clone()),
                json!({"method": method, "ok": false, "error": error.message, "detail": said}),
            ),
        }
    }

    async fn read(&self, raw: Value) -> Result<(Value, Value), (RpcError, Value)> {
        let request: acp::ReadTextFileRequest = params(raw).map_err(|e| (e, json!({})))?;
        let path = request.path.to_string_lossy().into_owned();
        let said = json!({"path": path});
        let bytes = match self.sandbox.get(&self.opened, &path, false).await {
            Ok(Payload::File(bytes) | Payload::Tar(bytes)) => bytes,
            Err(err) => return Err((failed(err), said)),
        };
        let text = String::from_utf8_lossy(&bytes);
        let content = window(&text, request.line, request.limit);
        Ok((value(acp::ReadTextFileResponse::new(content)), said))
    }

    async fn write(&self, raw: Value) -> Result<(Value, Value), (RpcError, Value)> {
        let request: acp::WriteTextFileRequest = params(raw).map_err(|e| (e, json!({})))?;
        let path = request.path.to_string_lossy().into_owned();
        let said = json!({"path": path, "bytes": request.content.len()});
        self.sandbox
            .put(
                &self.opened,
                &path,
                Payload::File(request.content.into_bytes()),
            )
            .await
            .map_err(|err| (failed(err), said.clone()))?;
        Ok((value(acp::WriteTextFileResponse::new()), said))
    }

    async fn terminal(&self, id: &acp::TerminalId) -> Result<Arc<Terminal>, RpcError> {
        self.terminals
            .lock()
            .await
            .get(id.0.as_ref())
            .cloned()
            .ok_or_else(|| RpcError {
                code: INVALID_PARAMS,
                message: format!("no terminal {id} (never created, or released)"),
            })
    }

    async fn create_terminal(&self, raw: Value) -> Result<(Value, Value), (RpcError, Value)> {
        let request: acp::CreateTerminalRequest = params(raw).map_err(|e| (e, json!({})))?;
        let mut argv = vec![request.command.clone()];
        argv.extend(request.args.iter().cloned());
        let said = json!({"argv": argv});
        let mut exec = ExecRequest::new(argv);
        exec.env = request
            .env
            .iter()
            .map(|v| (v.name.clone(), v.value.clone()))
            .collect();
        exec.workdir = request.cwd.map(|cwd| cwd.to_string_lossy().into_owned());
        let attached = self
            .sandbox
            .attach(&self.opened, &exec)
            .await
            .map_err(|err| (failed(err), said.clone()))?;
        let limit = request
            .output_byte_limit
            .unwrap_or(DEFAULT_TERMINAL_OUTPUT)
            .min(DEFAULT_TERMINAL_OUTPUT * 16) as usize;
        let (exit_tx, exit_rx) = watch::channel(None);
        let terminal = Arc::new(Terminal {
            output: Mutex::new((String::new(), false)),
            exit: exit_rx,
            kill: Mutex::new(Some(attached.kill)),
        });
        // Nothing is written to a terminal: its stdin closes at once.
        drop(attached.stdin);
        let pumped = terminal.clone();
        let mut output = attached.output;
        let status = attached.status;
        tokio::spawn(async move {
            while let Some(chunk) = output.recv().await {
                let (OutputChunk::Stdout(bytes) | OutputChunk::Stderr(bytes)) = chunk;
                let mut kept = pumped.output.lock().await;
                kept.0.push_str(&String::from_utf8_lossy(&bytes));
                if keep_newest(&mut kept.0, limit) {
                    kept.1 = true;
                }
            }
            // A status the sandbox could not read is reported as a failure (-1): the agent
            // learns the command is over either way.
            let code = status.await.ok().and_then(Result::ok).unwrap_or(-1);
            let _ = exit_tx.send(Some(code));
        });
        let id = format!(
            "term-{}",
            self.next_terminal.fetch_add(1, Ordering::Relaxed)
        );
        self.terminals.lock().await.insert(id.clone(), terminal);
        let said = json!({"argv": said["argv"], "terminal": id});
        Ok((value(acp::CreateTerminalResponse::new(id)), said))
    }

    async fn terminal_output(&self, raw: Value) -> Result<(Value, Value), (RpcError, Value)> {
        let request: acp::TerminalOutputRequest = params(raw).map_err(|e| (e, json!({})))?;
        let said = json!({"terminal": request.terminal_id.to_string()});
        let terminal = self
            .terminal(&request.terminal_id)
            .await
            .map_err(|e| (e, said.clone()))?;
        let (output, truncated) = terminal.output.lock().await.clone();
        let exit = *terminal.exit.borrow();
        let response =
            acp::TerminalOutputResponse::new(output, truncated).exit_status(exit.map(exit_status));
        Ok((value(response), said))
    }

    async fn wait_for_exit(&self, raw: Value) -> Result<(Value, Value), (RpcError, Value)> {
        let request: acp::WaitForTerminalExitRequest = params(raw).map_err(|e| (e, json!({})))?;
        let said = json!({"terminal": request.terminal_id.to_string()});
        let terminal = self
            .terminal(&request.terminal_id)
            .await
            .map_err(|e| (e, said.clone()))?;
        let mut exit = terminal.exit.clone();
        let code = match exit.wait_for(Option::is_some).await {
            Ok(code) => code.unwrap_or(-1),
            Err(_) => -1,
        };
        let status = value(exit_status(code));
        Ok((
            status,
            json!({"terminal": said["terminal"], "status": code}),
        ))
    }

    async fn kill_terminal(&self, raw: Value) -> Result<(Value, Value), (RpcError, Value)> {
        let request: acp::KillTerminalRequest = params(raw).map_err(|e| (e, json!({})))?;
        let said = json!({"terminal": request.terminal_id.to_string()});
        let terminal = self
            .terminal(&request.terminal_id)
            .await
            .map_err(|e| (e, said.clone()))?;
        if let Some(kill) = terminal.kill.lock().await.take() {
            let _ = kill.send(());
        }
        Ok((json!({}), said))
    }

    async fn release_terminal(&self, raw: Value) -> Result<(Value, Value), (RpcError, Value)> {
        let request: acp::ReleaseTerminalRequest = params(raw).map_err(|e| (e, json!({})))?;
        let said = json!({"terminal": request.terminal_id.to_string()});
        let terminal = self
            .terminals
            .lock()
            .await
            .remove(request.terminal_id.0.as_ref());
        // Released: killed if it still runs, and forgotten.
        if let Some(terminal) = terminal
            && let Some(kill) = terminal.kill.lock().await.take()
        {
            let _ = kill.send(());
        }
        Ok((json!({}), said))
    }

    async fn permission(&self, raw: Value) -> Result<(Value, Value), (RpcError, Value)> {
        let request: acp::RequestPermissionRequest = params(raw).map_err(|e| (e, json!({})))?;
        let tool = request.tool_call.tool_call_id.to_string();
        let outcome = if *self.cancelled.borrow() {
            acp::RequestPermissionOutcome::Cancelled
        } else {
            match choose_permission(self.permissions, &request.options) {
                Some(option) => acp::RequestPermissionOutcome::Selected(
                    acp::SelectedPermissionOutcome::new(option),
                ),
                // Nothing the policy may pick: not an allowance.
                None => acp::RequestPermissionOutcome::Cancelled,
            }
        };
        let said = json!({"tool_call": tool, "outcome": value(&outcome)});
        Ok((value(acp::RequestPermissionResponse::new(outcome)), said))
    }

    /// Kills every terminal still running: the session is over.
    pub async fn close(&self) {
        for (_, terminal) in self.terminals.lock().await.drain() {
            if let Some(kill) = terminal.kill.lock().await.take() {
                let _ = kill.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(id: &str, kind: acp::PermissionOptionKind) -> acp::PermissionOption {
        acp::PermissionOption::new(id.to_string(), id.to_string(), kind)
    }

    #[test]
    fn the_policy_picks_the_first_option_of_its_kind_and_never_allows_by_default() {
        let options = [
            option("no", acp::PermissionOptionKind::RejectOnce),
            option("always", acp::PermissionOptionKind::AllowAlways),
            option("once", acp::PermissionOptionKind::AllowOnce),
        ];
        assert_eq!(
            choose_permission(AcpPermissions::Allow, &options).map(|o| o.to_string()),
            Some("always".to_string())
        );
        assert_eq!(
            choose_permission(AcpPermissions::Reject, &options).map(|o| o.to_string()),
            Some("no".to_string())
        );
        let only_allow = [option("yes", acp::PermissionOptionKind::AllowOnce)];
        assert_eq!(choose_permission(AcpPermissions::Reject, &only_allow), None);
    }

    #[test]
    fn a_file_is_read_by_lines_and_a_terminal_keeps_its_newest_output() {
        assert_eq!(window("a\nb\nc\n", Some(2), Some(1)), "b\n");
        assert_eq!(window("a\nb\nc", Some(2), None), "b\nc");
        assert_eq!(window("a\nb", None, None), "a\nb");
        let mut output = "ééé".to_string();
        assert!(keep_newest(&mut output, 3));
        assert_eq!(output, "é");
        assert!(!keep_newest(&mut output, 10));
        assert_eq!(value(exit_status(137)), json!({"signal": "SIGKILL"}));
        assert_eq!(value(exit_status(3)), json!({"exitCode": 3}));
    }
}
