//! `afe run --local` end to end, as a person runs it: a flow clone → exec (changes a file) → exec
//! (runs a test) → push, on SQLite, the in-process queue and the Docker sandbox, against a real
//! git server that requires a token; and the same flow surviving the loss of its sandbox halfway
//! without running a completed node again.

mod tickets;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use afe_store::{SqlStore, Store};
use serde_json::Value;
use tickets::*;

fn afe() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_afe"));
    command.env("AFE_GIT_TOKEN", TOKEN);
    command
}

fn events(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn kinds<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// The flow runs to done; the git server has the pushed branch with the change; nothing of the
/// ticket is left on the daemon.
// Several threads: the git server runs on this runtime while the test waits on `afe` itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_of_git_and_exec_nodes_runs_to_done_and_pushes() {
    let dir = afe_testkit::scratch("afe-run");
    config(&dir, &[], false, None);
    let (server, input) = repository(&dir).await;
    let out = afe()
        .args(["run", "--local", "--json", "--flow", "demo", "-c"])
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = events(&stdout);
    let ticket = events[0]["ticket"].as_str().unwrap().to_string();
    let completed: Vec<&str> = kinds(&events, "node.completed")
        .iter()
        .map(|e| e["payload"]["node"].as_str().unwrap())
        .collect();
    assert_eq!(completed, ["clone", "change", "test", "push"]);
    assert_eq!(events.last().unwrap()["kind"], "ticket.done");

    let branch = format!("refs/heads/afe/{ticket}/work");
    assert_eq!(
        server.file("app", &branch, "notes.txt").as_deref(),
        Some(&b"notes\nchanged\n"[..]),
        "the pushed branch has the change"
    );
    assert_eq!(
        server.commit_count("app", &branch),
        2,
        "the clone's commit and the change's"
    );
    assert_eq!(
        server.branches("app"),
        [format!("afe/{ticket}/work"), "main".to_string()]
    );
    assert_eq!(
        left_of(&ticket).await,
        (0, 0),
        "the container and volume are gone"
    );
}

/// The sandbox is killed while the test node runs, after the change's checkpoint: the ticket
/// finishes in a new sandbox restored from the checkpoints, with the change, and no completed
/// node ran twice — counted in the store and in the pushed file, where a second run of the change
/// would have left a second line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticket_survives_losing_its_sandbox_without_repeating_a_completed_node() {
    let dir = afe_testkit::scratch("afe-run-kill");
    config(&dir, &[], true, None);
    let (server, input) = repository(&dir).await;
    let store_url = afe_testkit::sqlite_url(&dir);
    let mut child = afe()
        .args([
            "run", "--local", "--json", "--flow", "demo", "--store", &store_url, "-c",
        ])
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut ticket = String::new();
    // Up to the test node's first start; then its command is seen running, then the container
    // is killed: a point the test chose, not a moment it guessed.
    for line in lines.by_ref() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        ticket = event["ticket"].as_str().unwrap().to_string();
        let first_test = event["kind"] == "node.started" && event["payload"]["node"] == "test";
        seen.push(event);
        if first_test {
            break;
        }
    }
    wait_for_process(&ticket, "sleep 600").await;
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    docker
        .kill_container(
            &format!("afe-{ticket}"),
            None::<bollard::query_parameters::KillContainerOptions>,
        )
        .await
        .unwrap();
    for line in lines {
        seen.push(serde_json::from_str(&line.unwrap()).unwrap());
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{seen:#?}");

    assert_eq!(kinds(&seen, "sandbox.lost").len(), 1, "{seen:#?}");
    let store = SqlStore::connect(&store_url).await.unwrap();
    let attempts: std::collections::BTreeMap<String, i32> = store
        .node_runs(&ticket)
        .await
        .unwrap()
        .into_iter()
        .map(|run| (run.node, run.attempts))
        .collect();
    assert_eq!(attempts["clone"], 1);
    assert_eq!(attempts["change"], 1, "a completed node never runs again");
    assert_eq!(attempts["test"], 2, "the interrupted node ran again");
    assert_eq!(attempts["push"], 1);
    let started_change = kinds(&seen, "node.started")
        .iter()
        .filter(|e| e["payload"]["node"] == "change")
        .count();
    assert_eq!(started_change, 1);
    // The side effect: one line, so the change ran once, and the restored workspace had it.
    let branch = format!("refs/heads/afe/{ticket}/work");
    assert_eq!(
        server.file("app", &branch, "notes.txt").as_deref(),
        Some(&b"notes\nchanged\n"[..])
    );
    assert_eq!(server.seen.pushes.load(Ordering::SeqCst), 1);
    assert_eq!(left_of(&ticket).await, (0, 0));
}

/// A ticket whose input does not match its flow's Schema never starts: every problem is named.
#[test]
fn an_input_that_does_not_match_the_schema_is_refused_before_anything_runs() {
    let dir = afe_testkit::scratch("afe-run-input");
    config(&dir, &[], false, None);
    let input = dir.join("input.json");
    std::fs::write(&input, r#"{"repo": "x", "branch": 3}"#).unwrap();
    let out = afe()
        .args(["run", "--local", "--flow", "demo", "-c"])
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in ["AFE-RUN-002", "/branch", "repository", "repo"] {
        assert!(stderr.contains(expected), "{expected}: {stderr}");
    }
    let unknown = afe()
        .args(["run", "--local", "--flow", "nope", "-c"])
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("AFE-RUN-003"));
    assert!(!dir.join(".afe").exists(), "no store was made");
}
