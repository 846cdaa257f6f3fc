//! JSON-RPC 2.0 as ACP carries it over stdio: one message per line, UTF-8, no embedded newlines.
//! Pure: a line in, what it is; what to send, as a line. Which side asked decides which id space a
//! message's id is in, so a request and a response are told apart by `method`, not by id.

use serde_json::{Value, json};

/// The most one line may hold: an agent that writes a message larger than this is broken (a file
/// it reads comes back through the client, not through its own output).
pub const LINE_LIMIT: usize = 16 << 20;

/// JSON-RPC's own codes, as the client answers with them.
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// An error object, as it came or as it goes.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

/// What a line from the agent is.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// The agent asks the client (`fs/*`, `terminal/*`, `session/request_permission`).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// The agent tells the client (`session/update`).
    Notification { method: String, params: Value },
    /// The agent answers one of the client's requests.
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
}

/// Reads one line; what is wrong with it when it is not a JSON-RPC 2.0 message.
pub fn parse(line: &str) -> Result<Incoming, String> {
    let message: Value =
        serde_json::from_str(line).map_err(|e| format!("a line that is not JSON ({e})"))?;
    if message.get("jsonrpc") != Some(&json!("2.0")) {
        return Err("a message without \"jsonrpc\": \"2.0\"".to_string());
    }
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match (message.get("method"), message.get("id")) {
        (Some(Value::String(method)), Some(id)) => Ok(Incoming::Request {
            id: id.clone(),
            method: method.clone(),
            params,
        }),
        (Some(Value::String(method)), None) => Ok(Incoming::Notification {
            method: method.clone(),
            params,
        }),
        (Some(_), _) => Err("a method that is not a string".to_string()),
        (None, Some(id)) => {
            let outcome = match (message.get("result"), message.get("error")) {
                (_, Some(error)) => Err(RpcError {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("(no message)")
                        .to_string(),
                }),
                (Some(result), None) => Ok(result.clone()),
                (None, None) => return Err("a response with neither result nor error".to_string()),
            };
            Ok(Incoming::Response {
                id: id.clone(),
                outcome,
            })
        }
        (None, None) => Err("a message with neither method nor id".to_string()),
    }
}

/// A request of the client's, as a line.
pub fn request(id: i64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A notification of the client's (`session/cancel`), as a line.
pub fn notification(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// The client's answer to the agent's request `id`.
pub fn response(id: &Value, outcome: Result<Value, RpcError>) -> String {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": error.code, "message": error.message}}),
    }
    .to_string()
}

/// The agent's stdout cut into lines, whatever the boundaries its bytes arrive at.
#[derive(Debug, Default)]
pub struct Lines {
    pending: Vec<u8>,
}

impl Lines {
    /// The whole lines `bytes` completes (without their newline, `\r` trimmed, blank ones
    /// skipped); an error when a line grows past [`LINE_LIMIT`].
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, String> {
        self.pending.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..end]);
            let text = text.trim_end_matches('\r');
            if !text.trim().is_empty() {
                lines.push(text.to_string());
            }
        }
        if self.pending.len() > LINE_LIMIT {
            return Err(format!(
                "a line longer than {} MiB without its end",
                LINE_LIMIT >> 20
            ));
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_notifications_and_responses_are_told_apart_by_method() {
        assert_eq!(
            parse(
                r#"{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"path":"/a"}}"#
            ),
            Ok(Incoming::Request {
                id: json!(7),
                method: "fs/read_text_file".into(),
                params: json!({"path": "/a"})
            })
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#),
            Ok(Incoming::Notification {
                method: "session/update".into(),
                params: json!({})
            })
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":"x","result":{"stopReason":"end_turn"}}"#),
            Ok(Incoming::Response {
                id: json!("x"),
                outcome: Ok(json!({"stopReason": "end_turn"}))
            })
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"auth"}}"#),
            Ok(Incoming::Response {
                id: json!(3),
                outcome: Err(RpcError {
                    code: -32000,
                    message: "auth".into()
                })
            })
        );
        for broken in [
            "not json",
            r#"{"id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0"}"#,
        ] {
            assert!(parse(broken).is_err(), "{broken}");
        }
    }

    #[test]
    fn lines_are_the_same_however_the_bytes_were_cut() {
        let text = "{\"a\":1}\n\r\n{\"b\":\"é\"}\r\n{\"c\":3}\n";
        for cut in 1..text.len() {
            let mut lines = Lines::default();
            let mut seen = Vec::new();
            for piece in text.as_bytes().chunks(cut) {
                seen.extend(lines.push(piece).unwrap());
            }
            assert_eq!(
                seen,
                ["{\"a\":1}", "{\"b\":\"é\"}", "{\"c\":3}"],
                "cut {cut}"
            );
        }
        let mut lines = Lines::default();
        assert!(lines.push(&vec![b'x'; LINE_LIMIT + 1]).is_err());
    }

    #[test]
    fn what_the_client_sends_is_one_line_each() {
        let line = request(
            1,
            "session/prompt",
            json!({"prompt": [{"type": "text", "text": "a\nb"}]}),
        );
        assert!(!line.contains('\n'));
        assert_eq!(
            parse(&response(
                &json!(4),
                Err(RpcError {
                    code: METHOD_NOT_FOUND,
                    message: "no".into()
                })
            ))
            .unwrap(),
            Incoming::Response {
                id: json!(4),
                outcome: Err(RpcError {
                    code: METHOD_NOT_FOUND,
                    message: "no".into()
                })
            }
        );
        assert!(
            notification("session/cancel", json!({"sessionId": "s"})).contains("session/cancel")
        );
    }
}
