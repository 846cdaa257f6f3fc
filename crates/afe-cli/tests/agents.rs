//! The nodes that think, end to end with `afe run --local` against the scripted OpenAI-compatible
//! server: clone → plan (agent, structured output) → fix (deep: reads, writes, runs the test) →
//! test (exec) → push, every call reserved, journaled and settled, the ledger adding up to what the
//! server reported; a budget that allows two calls stops the ticket before the third is sent; the
//! provider's key nowhere but in the request's header.

mod tickets;

use std::path::Path;

use afe_store::{LedgerState, SqlStore, Store};
use afe_testkit::{Answer, ModelServer, Reply};
use serde_json::Value;
use tickets::*;

fn run(dir: &Path, input: &Path, store: &str) -> (Option<i32>, Vec<Value>, String) {
    run_flow(
        dir,
        input,
        "fix",
        store,
        &[("SCRIPTED_KEY", KEY), ("AFE_LOG", "debug")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_that_plans_fixes_and_pushes_runs_to_done_and_the_ledger_adds_up() {
    let dir = afe_testkit::scratch("afe-agents");
    let server = ModelServer::start(the_whole_script()).await;
    agents_config(&dir, &server, None);
    let (git, input) = repository(&dir).await;
    let store_url = afe_testkit::sqlite_url(&dir);
    let (status, events, log) = run(&dir, &input, &store_url);
    assert_eq!(status, Some(0), "{events:#?}\n{log}");
    let completed: Vec<&str> = kinds(&events, "node.completed")
        .iter()
        .map(|e| e["payload"]["node"].as_str().unwrap())
        .collect();
    assert_eq!(completed, ["clone", "plan", "fix", "test", "push"]);
    let plan = &kinds(&events, "node.completed")[1]["payload"]["output"];
    assert_eq!(plan["steps"][1], "fix them");
    let ticket = events[0]["ticket"].as_str().unwrap().to_string();

    // The structured output was asked for, and the prompt rendered from the context.
    {
        let seen = server.seen.lock().unwrap();
        assert_eq!(
            seen.requests[0]["response_format"]["json_schema"]["name"],
            "plan"
        );
        assert!(
            seen.requests[0]["messages"][0]["content"]
                .as_str()
                .unwrap()
                .starts_with("Plan how to fix http://")
        );
        let offered: Vec<&str> = seen.requests[1]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(offered, ["ws_exec", "ws_read", "ws_test", "ws_write"]);
        // The tool results went back: the second coder call holds the file the first read.
        let second = seen.requests[2]["messages"].to_string();
        assert!(second.contains("notes\\\\n"), "{second}");
    }
    assert_eq!(
        git.file("app", &format!("refs/heads/afe/{ticket}/work"), "notes.txt")
            .as_deref(),
        Some(&b"fixed\n"[..])
    );

    // Every call answered once, and the ledger holds what each cost.
    assert_eq!(server.answered(), 5);
    let store = SqlStore::connect(&store_url).await.unwrap();
    let ledger = store.ledger(&ticket).await.unwrap();
    assert_eq!(ledger.len(), 5);
    assert!(ledger.iter().all(|e| e.state == LedgerState::Settled));
    let settled: i64 = ledger.iter().filter_map(|e| e.settled_micros).sum();
    assert_eq!(settled, (server.cost_of_everything() * 1e6).round() as i64);
    assert_eq!(settled, 15_000);
    assert!(ledger.iter().all(|e| e.generation.is_some()));
    assert_eq!(kinds(&events, "model.turn").len(), 5);
    assert_eq!(kinds(&events, "tool.results").len(), 3);
    assert_eq!(kinds(&events, "ledger.settled").len(), 5);

    // The key was sent, in the header, and is nowhere else: not in an event, a log line, what
    // the sandbox's processes had (journaled in the coder's turns), or any row of the store.
    assert_eq!(
        server.seen.lock().unwrap().authorizations[0].as_deref(),
        Some(format!("Bearer {KEY}").as_str()),
        "positive control: the key was read and sent"
    );
    let everything = format!("{events:?}{log}");
    assert!(
        !everything.contains(KEY),
        "the key in an event or a log line"
    );
    let turns = store.turns(&ticket, "fix").await.unwrap();
    let sandbox_saw = turns[1].payload["results"][1]["stdout"].as_str().unwrap();
    assert!(
        sandbox_saw.contains("HOME="),
        "the sandbox's environment was read: {sandbox_saw}"
    );
    assert!(!sandbox_saw.contains(KEY));
    let database = std::fs::read(dir.join("afe.db")).unwrap();
    let wal = std::fs::read(dir.join("afe.db-wal")).unwrap_or_default();
    for bytes in [database, wal] {
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the key in the store's file"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_allows_two_calls_stops_the_ticket_before_the_third_is_sent() {
    let dir = afe_testkit::scratch("afe-budget");
    let server = ModelServer::start(the_whole_script()).await;
    // A call reserves 8,192 micro-dollars for its answer (4,096 tokens at $2 per million) plus
    // its request at $1 per million tokens (a few hundred more): the first (the plan, which
    // costs 1,000) fits in 10,800; the second (1,000 spent + ~8,800) fits; the third (3,000 spent
    // + ~9,000) does not.
    agents_config(&dir, &server, Some(0.0108));
    let (_git, input) = repository(&dir).await;
    let store_url = afe_testkit::sqlite_url(&dir);
    let (status, events, log) = run(&dir, &input, &store_url);
    assert_eq!(status, Some(5), "{events:#?}\n{log}");
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "ticket.failed");
    assert_eq!(last["payload"]["reason"], "BudgetExceeded");
    assert_eq!(kinds(&events, "budget.exceeded").len(), 1);
    assert_eq!(server.calls(), 2, "the third call was never sent");
    let ticket = last["ticket"].as_str().unwrap();
    let store = SqlStore::connect(&store_url).await.unwrap();
    let ledger = store.ledger(ticket).await.unwrap();
    assert_eq!(ledger.len(), 2);
    let spent: i64 = ledger.iter().filter_map(|e| e.settled_micros).sum();
    assert_eq!(spent, 3_000, "what the two calls cost");
    assert_eq!(left_of(ticket).await, (0, 0));
}

/// An answer that does not match the node's Schema is asked for again with the checker's words,
/// as many times as the Agent's `answerRetries` says, and then the node fails (AFE-NODE-003)
/// without a further call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_does_not_match_the_schema_is_asked_again_as_configured_then_fails() {
    let dir = afe_testkit::scratch("afe-answer-retries");
    let server = ModelServer::start(vec![
        Reply::Answer(Answer::text("not JSON at all", 0.001)),
        Reply::Answer(Answer::text(r#"{"steps": []}"#, 0.001)),
        Reply::Answer(Answer::text(r#"{"steps": ["never asked for"]}"#, 0.001)),
    ])
    .await;
    agents_config(&dir, &server, None);
    let path = dir.join("config.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "  prompt: \"Plan how to fix",
        "  answerRetries: 1\n  prompt: \"Plan how to fix",
        1,
    );
    std::fs::write(&path, text).unwrap();
    let (_git, input) = repository(&dir).await;
    let (status, events, log) = run(&dir, &input, &afe_testkit::sqlite_url(&dir));
    assert_ne!(status, Some(0), "{events:#?}\n{log}");
    let failed = kinds(&events, "node.failed");
    let error = failed[0]["payload"]["error"].as_str().unwrap();
    assert!(error.starts_with("AFE-NODE-003 after 2 answers"), "{error}");
    assert!(
        error.contains("minItems") || error.contains("[]"),
        "{error}"
    );
    assert_eq!(server.calls(), 2, "one answer and one retry, nothing more");
    let second = server.seen.lock().unwrap().requests[1]["messages"].to_string();
    assert!(
        second.contains("does not match the required Schema"),
        "{second}"
    );
}
