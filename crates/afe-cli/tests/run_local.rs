//! `afe run --local` end to end, as a person runs it: a flow clone → exec (changes a file) → exec
//! (runs a test) → push, on SQLite, the in-process queue and the Docker sandbox, against a real
//! git server that requires a token; and the same flow surviving the loss of its sandbox halfway
//! without running a completed node again.

mod tickets;

use std::process::{Command, Stdio};

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

/// `afe run --local --json` of flow `demo` in `dir` with `extra` arguments, run to its end and
/// required to succeed; the events it printed.
fn run_to_done(dir: &std::path::Path, input: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    let out = afe()
        .args(["run", "--local", "--json", "--flow", "demo", "-c"])
        .arg(dir)
        .arg("--input")
        .arg(input)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    events(&stdout)
}

/// The flow runs to done; the git server has the pushed branch with the change; nothing of the
/// ticket is left on the daemon.
// Several threads: the git server runs on this runtime while the test waits on `afe` itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_of_git_and_exec_nodes_runs_to_done_and_pushes() {
    let dir = afe_testkit::scratch("afe-run");
    config(&dir, &[], false, None);
    let (server, input) = repository(&dir).await;
    let events = run_to_done(&dir, &input, &[]);
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

    // The token is in no stored bundle and no event.
    let store = SqlStore::connect(&afe_testkit::sqlite_url(&dir.join(".afe")))
        .await
        .unwrap();
    let holds = |bytes: &[u8]| bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes());
    let checkpoints = store.checkpoints(&ticket).await.unwrap();
    assert_eq!(checkpoints.len(), 2, "the clone's and the change's");
    for checkpoint in checkpoints {
        let bundle = store.bundle(checkpoint.id).await.unwrap();
        assert!(
            !holds(&bundle),
            "checkpoint {} holds the token",
            checkpoint.id
        );
    }
    assert!(!events.iter().any(|e| e.to_string().contains(TOKEN)));
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
    let child = afe()
        .args([
            "run", "--local", "--json", "--flow", "demo", "--store", &store_url, "-c",
        ])
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Up to the test node's first start; then its command is seen running, then the container
    // is killed: a point the test chose, not a moment it guessed.
    let run = CutRun::up_to_the_test_node(child);
    let ticket = run.ticket.clone();
    wait_for_process(&ticket, "sleep 600").await;
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    docker
        .kill_container(
            &format!("afe-{ticket}"),
            None::<bollard::query_parameters::KillContainerOptions>,
        )
        .await
        .unwrap();
    run.survived(&store_url, &server).await;
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

/// With egress, what the sandbox's proxy decided is the ticket's: an allowed host reached through
/// it and a denied one refused both appear among the ticket's events, and the denied host saw
/// nothing (judged where the packets would land).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_decisions_are_the_tickets_events() {
    use af_docker::test_hosts::{HostSpec, OutsideHost, Program};
    let docker = af_docker::connect().await.unwrap();
    let engine = af_docker::engine_image::ensure(&docker).await.unwrap();
    let tag = format!("afe-run-{}", std::process::id());
    let host = |name: &str, subnet: &str, alias: &str| {
        let mut spec = HostSpec::new(&format!("{tag}-{name}"), subnet, Program::Server);
        // The /26 at .128 of each TEST-NET: the sandbox crate's tests have the others.
        spec.host_number = 138;
        spec.aliases = vec![alias.to_string()];
        spec
    };
    let allowed = OutsideHost::create(
        &docker,
        &engine,
        &host("allow", "198.51.100.128/26", "allowed.test"),
    )
    .await
    .unwrap();
    let denied = OutsideHost::create(
        &docker,
        &engine,
        &host("deny", "203.0.113.128/26", "denied.test"),
    )
    .await
    .unwrap();
    struct Hosts(bollard::Docker, Vec<OutsideHost>);
    impl Drop for Hosts {
        fn drop(&mut self) {
            let (docker, hosts) = (self.0.clone(), self.1.clone());
            let _ = std::thread::spawn(move || {
                tokio::runtime::Runtime::new().unwrap().block_on(async {
                    for host in hosts {
                        host.remove(&docker).await;
                    }
                })
            })
            .join();
        }
    }
    let _hosts = Hosts(docker.clone(), vec![allowed.clone(), denied.clone()]);

    let dir = afe_testkit::scratch("afe-run-egress");
    let script = "git ls-remote http://allowed.test:3128/x.git; git ls-remote http://denied.test:3128/x.git; true";
    config(&dir, &["allowed.test"], false, Some(script));
    let (_server, input) = repository(&dir).await;
    let before = (
        allowed.arrivals().await.unwrap(),
        denied.arrivals().await.unwrap(),
    );
    let resolve_allowed = format!("allowed.test={}", allowed.ip);
    let resolve_denied = format!("denied.test={}", denied.ip);
    let events = run_to_done(
        &dir,
        &input,
        &[
            "--sandbox-network",
            &allowed.network,
            "--sandbox-network",
            &denied.network,
            "--sandbox-resolve",
            &resolve_allowed,
            "--sandbox-resolve",
            &resolve_denied,
            // Only the allowed host's address: the denied host's stays forbidden to the proxy.
            "--sandbox-dialable",
            &allowed.ip,
        ],
    );
    let decisions: Vec<(String, String)> = kinds(&events, "egress.decision")
        .iter()
        .map(|e| {
            (
                e["payload"]["host"].as_str().unwrap().to_string(),
                e["payload"]["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        decisions.contains(&("allowed.test".into(), "allow".into())),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("denied.test".into(), "deny".into())),
        "{decisions:?}"
    );
    let node = kinds(&events, "egress.decision")[0]["payload"]["node"].clone();
    assert_eq!(
        node, "outside",
        "each decision names the node it was made during"
    );
    let after = (
        allowed.arrivals().await.unwrap(),
        denied.arrivals().await.unwrap(),
    );
    assert_eq!(
        after.0.connections,
        before.0.connections + 1,
        "the allowed host was reached"
    );
    assert_eq!(after.1, before.1, "nothing reached the denied host");
}

/// A node whose command fails ends the ticket as failed, with the command, its status and its
/// last words in the reason (AFE-NODE-001) and the exit status 5; its sandbox goes all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_fails_the_ticket_and_says_why() {
    let dir = afe_testkit::scratch("afe-run-fail");
    config(
        &dir,
        &[],
        false,
        Some("echo the build is broken >&2; exit 3"),
    );
    let (_server, input) = repository(&dir).await;
    let out = afe()
        .args(["run", "--local", "--json", "--flow", "demo", "-c"])
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let events = events(&String::from_utf8_lossy(&out.stdout));
    let failed = kinds(&events, "node.failed");
    assert_eq!(failed.len(), 1);
    let error = failed[0]["payload"]["error"].as_str().unwrap();
    for expected in [
        "AFE-NODE-001",
        "exited with status 3",
        "the build is broken",
        "help:",
    ] {
        assert!(error.contains(expected), "{expected}: {error}");
    }
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "ticket.failed");
    let ticket = last["ticket"].as_str().unwrap();
    assert_eq!(kinds(&events, "node.completed").len(), 1, "only the clone");
    assert_eq!(left_of(ticket).await, (0, 0));
}
