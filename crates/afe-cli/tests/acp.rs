//! The `acp` node end to end: `afe run --local` drives the project's scripted ACP agent
//! (`afe-acp-script`, in the sandbox image as a user's agent would be) inside a real sandbox. The
//! agent reads and writes the workspace through the client, runs a terminal to its end and kills
//! another, asks for permission and reports its cost; a cost past the budget cancels it; a turn
//! past the timeout cancels it; an agent that crashes is named with its last words.

mod tickets;

use std::path::Path;

use afe_store::{LedgerState, SqlStore, Store};
use serde_json::Value;
use tickets::*;

const ACP_KEY: &str = "acp-key-70b2d4e1";

/// A config whose flow `review` is clone → talk (the scripted agent, told `script`) → check
/// (`check`, when given); `budget` in dollars, `timeout` in seconds.
fn config(dir: &Path, script: &str, budget: f64, timeout: Option<u64>, check: Option<&str>) {
    std::fs::create_dir_all(dir).unwrap();
    let timeout = timeout
        .map(|s| format!(", timeoutSeconds: {s}"))
        .unwrap_or_default();
    let check = check
        .map(|c| format!("\n    - {{id: check, exec: [sh, -c, {c:?}], needs: [talk]}}"))
        .unwrap_or_default();
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            r#"{REPO_REQUEST}---
apiVersion: afe.dev/v1alpha1
kind: Flow
metadata: {{name: review}}
spec:
  input: repo-request
  sandbox: {{image: {image:?}}}
  budget: {{usd: {budget}}}
  nodes:
    - {{id: clone, git: clone}}
    - {{id: talk, acp: {{command: [afe-acp-script], env: [ACP_KEY], prompt: "{script} {{{{ repo_request.repository }}}}"{timeout}}}, needs: [clone]}}{check}
"#,
            image = afe_testkit::acp_sandbox_image(),
        ),
    )
    .unwrap();
}

fn run(dir: &Path, input: &Path, store: &str) -> (Option<i32>, Vec<Value>, String) {
    run_flow(dir, input, "review", store, &[("ACP_KEY", ACP_KEY)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_works_in_the_sandbox_through_the_client_and_its_cost_is_in_the_ledger() {
    let dir = afe_testkit::scratch("afe-acp");
    config(
        &dir,
        "echo",
        1.0,
        None,
        Some("test \"$(cat notes.txt)\" = 'written by acp'"),
    );
    let (_git, input) = repository(&dir).await;
    let store_url = afe_testkit::sqlite_url(&dir);
    let (status, events, log) = run(&dir, &input, &store_url);
    assert_eq!(status, Some(0), "{events:#?}\n{log}");
    let talk = kinds(&events, "node.completed")
        .into_iter()
        .find(|e| e["payload"]["node"] == "talk")
        .unwrap();
    let output = &talk["payload"]["output"];
    assert_eq!(output["stop_reason"], "end_turn");
    let text = output["text"].as_str().unwrap();
    assert!(text.starts_with("heard: echo http://"), "{text}");
    let report: Value = serde_json::from_str(text.split_once("REPORT ").unwrap().1).unwrap();

    // The client offered files and terminals; the agent got its named variable and the node's.
    let capabilities = &report["initialize"]["clientCapabilities"];
    assert_eq!(capabilities["fs"]["readTextFile"], true);
    assert_eq!(capabilities["terminal"], true);
    assert_eq!(report["acp_key"], ACP_KEY);
    assert_eq!(report["ticket"], events[0]["ticket"]);
    // A file of the workspace was read; one outside it was refused, and nothing of it came back.
    assert_eq!(report["readme"]["content"], "the app\n");
    let outside = report["outside"]["error"]["message"].as_str().unwrap();
    assert!(outside.contains("AFE-SBX-002"), "{outside}");
    assert!(!report.to_string().contains("root:x:0"));
    // The terminal ran in the repository, after the write; its status and both streams came back.
    assert_eq!(report["exit"], serde_json::json!({"exitCode": 3}));
    let terminal = report["output"]["output"].as_str().unwrap();
    assert!(
        terminal.contains("written by acp") && terminal.contains("oops"),
        "{terminal}"
    );
    assert_eq!(report["output"]["exitStatus"]["exitCode"], 3);
    // The endless one was killed, and once released it is gone.
    assert_eq!(report["killed"]["signal"], "SIGKILL");
    assert!(
        report["released"]["error"].is_object(),
        "{}",
        report["released"]
    );
    // Permission: the node's policy (allow) picked the allowing option.
    assert_eq!(report["permission"]["outcome"]["outcome"], "selected");
    assert_eq!(report["permission"]["outcome"]["optionId"], "yes");

    // Every update and request is an event; consecutive text chunks are one.
    let updates: Vec<&str> = kinds(&events, "acp.update")
        .iter()
        .map(|e| e["payload"]["update"].as_str().unwrap())
        .collect();
    assert_eq!(
        updates,
        [
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "usage_update",
            "usage_update",
            "agent_message_chunk"
        ]
    );
    let methods: Vec<&str> = kinds(&events, "acp.request")
        .iter()
        .map(|e| e["payload"]["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods.len(), 13, "{methods:?}");
    assert_eq!(methods[0], "fs/read_text_file");
    assert_eq!(kinds(&events, "acp.request")[1]["payload"]["ok"], false);

    // The cost it reported (cumulative: 0.25, then 0.40) is in the ledger once: 0.25 + 0.15.
    let ticket = events[0]["ticket"].as_str().unwrap();
    let store = SqlStore::connect(&store_url).await.unwrap();
    let ledger = store.ledger(ticket).await.unwrap();
    let spent: Vec<i64> = ledger.iter().filter_map(|e| e.settled_micros).collect();
    assert_eq!(spent, [250_000, 150_000]);
    assert!(ledger.iter().all(|e| e.state == LedgerState::Settled));
    assert_eq!(kinds(&events, "ledger.spent").len(), 2);
    assert_eq!(left_of(ticket).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_past_the_budget_cancels_the_agent_and_stops_the_ticket() {
    let dir = afe_testkit::scratch("afe-acp-budget");
    config(&dir, "overspend", 1.0, None, None);
    let (_git, input) = repository(&dir).await;
    let store_url = afe_testkit::sqlite_url(&dir);
    let (status, events, log) = run(&dir, &input, &store_url);
    assert_eq!(status, Some(5), "{events:#?}\n{log}");
    let last = events.last().unwrap();
    assert_eq!(last["payload"]["reason"], "BudgetExceeded");
    let ticket = last["ticket"].as_str().unwrap();
    let store = SqlStore::connect(&store_url).await.unwrap();
    let ledger = store.ledger(ticket).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].settled_micros, Some(5_000_000), "spent, so kept");
    // The agent ended its turn when cancelled (the scripted one waits for session/cancel), and
    // nothing of the ticket is left.
    assert_eq!(left_of(ticket).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_its_timeout_is_cancelled_and_a_crash_is_named() {
    for (script, timeout, code, said) in [
        ("wait-for-cancel", Some(1), "AFE-NODE-008", "within 1 s"),
        (
            "crash",
            None,
            "AFE-NODE-007",
            "scripted crash: the agent gave up",
        ),
    ] {
        let dir = afe_testkit::scratch("afe-acp-ends");
        config(&dir, script, 1.0, timeout, None);
        let (_git, input) = repository(&dir).await;
        let (status, events, log) = run(&dir, &input, &afe_testkit::sqlite_url(&dir));
        assert_ne!(status, Some(0), "{events:#?}\n{log}");
        let failed = kinds(&events, "node.failed");
        let error = failed[0]["payload"]["error"].as_str().unwrap();
        assert!(error.starts_with(code), "{error}");
        assert!(error.contains(said), "{error}");
        let ticket = events[0]["ticket"].as_str().unwrap();
        assert_eq!(left_of(ticket).await, (0, 0));
    }
}
