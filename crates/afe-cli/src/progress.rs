//! A ticket's events as a person follows them: one line per thing that happened, said from the
//! event alone (pure), and a spinner for the node running now when the output is a terminal.

use afe_store::Event;
use serde_json::Value;

/// The line an event is shown as; none for events that add nothing a person follows.
pub fn describe(event: &Event, started_at: Option<i64>) -> Option<String> {
    let p = &event.payload;
    let text = |key: &str| p.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let took = started_at
        .map(|start| format!(" ({:.1} s)", (event.at - start).max(0) as f64 / 1000.0))
        .unwrap_or_default();
    Some(match event.kind.as_str() {
        "node.started" => {
            let attempt = p.get("attempt").and_then(Value::as_i64).unwrap_or(1);
            if attempt > 1 {
                format!("  ↻ {} (attempt {attempt})", text("node"))
            } else {
                return None;
            }
        }
        "node.completed" => {
            let output = &p["output"];
            let detail = match (
                output.get("head"),
                output.get("pushed"),
                output.get("status"),
            ) {
                (Some(head), _, _) => format!(
                    "{} at {}",
                    output.get("branch").and_then(Value::as_str).unwrap_or(""),
                    short(head.as_str().unwrap_or(""))
                ),
                (_, Some(pushed), _) => {
                    let moved: Vec<&String> = pushed
                        .as_object()
                        .map(|m| m.keys().collect())
                        .unwrap_or_default();
                    if moved.is_empty() {
                        "already pushed".to_string()
                    } else {
                        format!(
                            "pushed {}",
                            moved
                                .iter()
                                .map(|b| b.trim_start_matches("refs/heads/"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                }
                (_, _, Some(status)) => format!("exit {status}"),
                _ => String::new(),
            };
            let saved = if p.get("checkpoint").is_some_and(|c| !c.is_null()) {
                ", workspace saved"
            } else {
                ""
            };
            format!("  ✓ {}{took}  {detail}{saved}", text("node"))
        }
        "node.skipped" => format!("  – {} (skipped: its condition is false)", text("node")),
        "node.failed" => format!("  ✗ {}{took}  {}", text("node"), text("error")),
        "egress.decision" => format!(
            "    egress {} {}:{} ({})",
            text("verdict"),
            text("host"),
            p.get("port").and_then(Value::as_u64).unwrap_or(0),
            text("rule")
        ),
        "sandbox.lost" => format!(
            "  ! the sandbox was lost during {}; restoring the last checkpoint into a new one",
            text("node")
        ),
        "budget.exceeded" => "  ✗ the ticket's budget is spent".to_string(),
        "ticket.done" => "done".to_string(),
        "ticket.failed" => format!("failed: {}", text("reason")),
        "ticket.cancelled" => format!("cancelled: {}", text("reason")),
        _ => return None,
    })
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, payload: Value, at: i64) -> Event {
        Event {
            ticket: "t".into(),
            seq: 1,
            kind: kind.into(),
            payload,
            at,
        }
    }

    #[test]
    fn each_event_a_person_follows_is_one_line() {
        let clone = event(
            "node.completed",
            json!({"node": "clone", "checkpoint": 1, "output": {"branch": "main", "head": "0123456789abcdef0123"}}),
            2500,
        );
        assert_eq!(
            describe(&clone, Some(1000)).unwrap(),
            "  ✓ clone (1.5 s)  main at 0123456789ab, workspace saved"
        );
        let test = event(
            "node.completed",
            json!({"node": "test", "checkpoint": null, "output": {"status": 0}}),
            0,
        );
        assert_eq!(describe(&test, None).unwrap(), "  ✓ test  exit 0");
        let push = event(
            "node.completed",
            json!({"node": "push", "output": {"pushed": {"refs/heads/afe/t/work": "x"}}}),
            0,
        );
        assert_eq!(
            describe(&push, None).unwrap(),
            "  ✓ push  pushed afe/t/work"
        );
        let denied = event(
            "egress.decision",
            json!({"verdict": "deny", "host": "evil.example", "port": 443, "rule": "not-listed"}),
            0,
        );
        assert_eq!(
            describe(&denied, None).unwrap(),
            "    egress deny evil.example:443 (not-listed)"
        );
        assert_eq!(
            describe(
                &event("ticket.failed", json!({"reason": "NodeFailed: test"}), 0),
                None
            )
            .unwrap(),
            "failed: NodeFailed: test"
        );
        assert_eq!(describe(&event("ticket.claimed", json!({}), 0), None), None);
        assert_eq!(
            describe(
                &event("node.started", json!({"node": "n", "attempt": 1}), 0),
                None
            ),
            None
        );
    }
}
