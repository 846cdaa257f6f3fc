//! A scripted Agent Client Protocol agent, run inside a real sandbox by the `acp` node's tests: it
//! speaks newline-delimited JSON-RPC 2.0 on stdin and stdout as an ACP agent does, and what it
//! does is chosen by the first word of the prompt it is given:
//!
//! - `echo`: says what it heard (in two chunks), reports a tool call, reads a file of the
//!   workspace and one outside it, writes a file, runs a command in a terminal to its end and
//!   kills another, asks for permission, reports its cost twice (cumulative), and ends its turn
//!   with a JSON report of every answer it got, for the test to check;
//! - `overspend`: reports a cost of five dollars, then waits for `session/cancel`;
//! - `wait-for-cancel`: waits for `session/cancel` and ends its turn `cancelled`;
//! - `crash`: writes to stderr and exits 1 in the middle of its turn.

use std::io::{BufRead, Write};

use serde_json::{Value, json};

struct Peer {
    lines: std::io::Lines<std::io::StdinLock<'static>>,
    next_id: i64,
    /// Notifications that arrived while it waited for an answer.
    heard: Vec<Value>,
}

impl Peer {
    fn send(&self, message: Value) {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{message}").unwrap();
        out.flush().unwrap();
    }

    fn read(&mut self) -> Option<Value> {
        let line = self.lines.next()?.ok()?;
        Some(serde_json::from_str(&line).expect("the client sent a line that is not JSON"))
    }

    /// A request to the client; its result, or its error as `{"error": ...}`.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.read().expect("the client hung up before it answered");
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                return match message.get("error") {
                    Some(error) => json!({"error": error}),
                    None => message["result"].clone(),
                };
            }
            self.heard.push(message);
        }
    }

    fn update(&self, session: &str, update: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": session, "update": update}}));
    }

    fn say(&self, session: &str, text: &str) {
        self.update(
            session,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
        );
    }

    fn wait_for_cancel(&mut self) {
        while !self.heard.iter().any(|m| m["method"] == "session/cancel") {
            match self.read() {
                Some(message) => self.heard.push(message),
                None => std::process::exit(2),
            }
        }
    }
}

fn echo(peer: &mut Peer, session: &str, prompt: &str) -> Value {
    peer.say(session, "heard: ");
    peer.say(session, prompt);
    peer.update(
        session,
        json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "look around", "kind": "read", "status": "pending"}),
    );
    let readme = peer.call(
        "fs/read_text_file",
        json!({"sessionId": session, "path": "/workspace/repo/README"}),
    );
    let outside = peer.call(
        "fs/read_text_file",
        json!({"sessionId": session, "path": "/etc/passwd"}),
    );
    let written = peer.call(
        "fs/write_text_file",
        json!({"sessionId": session, "path": "/workspace/repo/notes.txt", "content": "written by acp\n"}),
    );
    let terminal = peer.call(
        "terminal/create",
        json!({"sessionId": session, "command": "sh", "args": ["-c", "cat notes.txt; echo oops >&2; exit 3"],
            "cwd": "/workspace/repo", "outputByteLimit": 1000}),
    );
    let id = terminal["terminalId"].clone();
    let exit = peer.call(
        "terminal/wait_for_exit",
        json!({"sessionId": session, "terminalId": id}),
    );
    let output = peer.call(
        "terminal/output",
        json!({"sessionId": session, "terminalId": id}),
    );
    peer.call(
        "terminal/release",
        json!({"sessionId": session, "terminalId": id}),
    );
    let endless = peer.call(
        "terminal/create",
        json!({"sessionId": session, "command": "sleep", "args": ["100000"]}),
    );
    let endless_id = endless["terminalId"].clone();
    peer.call(
        "terminal/kill",
        json!({"sessionId": session, "terminalId": endless_id}),
    );
    let killed = peer.call(
        "terminal/wait_for_exit",
        json!({"sessionId": session, "terminalId": endless_id}),
    );
    peer.call(
        "terminal/release",
        json!({"sessionId": session, "terminalId": endless_id}),
    );
    let released = peer.call(
        "terminal/output",
        json!({"sessionId": session, "terminalId": endless_id}),
    );
    let permission = peer.call(
        "session/request_permission",
        json!({"sessionId": session, "toolCall": {"toolCallId": "t1"}, "options": [
            {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
            {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}),
    );
    peer.update(
        session,
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}),
    );
    for amount in [0.25, 0.4] {
        peer.update(
            session,
            json!({"sessionUpdate": "usage_update", "used": 1000, "size": 200000,
                "cost": {"amount": amount, "currency": "USD"}}),
        );
    }
    json!({"readme": readme, "outside": outside, "written": written, "exit": exit, "output": output,
        "killed": killed, "released": released, "permission": permission,
        "acp_key": std::env::var("ACP_KEY").ok(), "ticket": std::env::var("AFE_TICKET").ok()})
}

fn main() {
    let mut peer = Peer {
        lines: std::io::stdin().lock().lines(),
        next_id: 0,
        heard: Vec::new(),
    };
    let session = "s-1";
    let mut initialized = json!(null);
    while let Some(message) = peer.read() {
        let (Some(id), Some(method)) = (message.get("id").cloned(), message["method"].as_str())
        else {
            continue;
        };
        let result = match method {
            "initialize" => {
                initialized = message["params"].clone();
                json!({"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []})
            }
            "session/new" => {
                assert_eq!(message["params"]["cwd"], "/workspace/repo");
                json!({"sessionId": session})
            }
            "session/prompt" => {
                let prompt = message["params"]["prompt"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                match prompt.split_whitespace().next().unwrap_or_default() {
                    "echo" => {
                        let mut report = echo(&mut peer, session, &prompt);
                        report["initialize"] = initialized.clone();
                        peer.say(session, &format!("\nREPORT {report}"));
                        json!({"stopReason": "end_turn"})
                    }
                    "overspend" => {
                        peer.update(
                            session,
                            json!({"sessionUpdate": "usage_update", "used": 10, "size": 100,
                                "cost": {"amount": 5.0, "currency": "USD"}}),
                        );
                        peer.wait_for_cancel();
                        json!({"stopReason": "cancelled"})
                    }
                    "wait-for-cancel" => {
                        peer.wait_for_cancel();
                        json!({"stopReason": "cancelled"})
                    }
                    "crash" => {
                        eprintln!("scripted crash: the agent gave up");
                        std::process::exit(1);
                    }
                    other => panic!("no script {other:?}"),
                }
            }
            other => {
                peer.send(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": format!("{other} is not scripted")}}));
                continue;
            }
        };
        peer.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
}
