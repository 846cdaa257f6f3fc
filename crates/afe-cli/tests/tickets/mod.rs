//! What the end-to-end ticket tests share: a git server that requires a token, a config folder
//! with a flow of git and exec nodes on the tests' sandbox image, and what is left on the daemon.

#![allow(dead_code, reason = "each test file uses its own part")]

use std::path::{Path, PathBuf};

use afe_testkit::GitServer;

pub const TOKEN: &str = "tok-e2e-5c1f09a7b2";

/// The flow's `test` node: the first time it runs it waits (so a test can cut it at a point of its
/// choosing), then it checks that the change is there, once.
pub const WAITING_TEST: &str = r#"if [ "$AFE_ATTEMPT" = 1 ] && [ -n "$WAIT_FIRST" ]; then sleep 600; fi; test "$(grep -c changed notes.txt)" = 1"#;

/// A config folder: Schema `repo-request` (repository, optional branch) and flow `demo`:
/// clone → change (appends a line to notes.txt) → test → push. `egress` goes into its sandbox;
/// `wait_first` makes the test node wait on its first attempt; `extra_node` is a command run
/// between clone and change (node `outside`).
pub fn config(dir: &Path, egress: &[&str], wait_first: bool, extra_node: Option<&str>) {
    std::fs::create_dir_all(dir).unwrap();
    let egress = if egress.is_empty() {
        String::new()
    } else {
        format!(
            "\n    egress: [{}]",
            egress
                .iter()
                .map(|e| format!("{e:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let wait = if wait_first { "WAIT_FIRST=1; " } else { "" };
    let extra = extra_node
        .map(|script| {
            format!("\n    - {{id: outside, exec: [sh, -c, {script:?}], needs: [clone]}}")
        })
        .unwrap_or_default();
    let needs_for_change = if extra_node.is_some() {
        "outside"
    } else {
        "clone"
    };
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            r#"apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {{name: repo-request}}
spec:
  fields:
    repository: string
    branch: string
  optional: [branch]
---
apiVersion: afe.dev/v1alpha1
kind: Flow
metadata: {{name: demo}}
spec:
  input: repo-request
  sandbox:
    image: {image:?}
    cpus: 1
    memory: 512Mi{egress}
  nodes:
    - {{id: clone, git: clone}}{extra}
    - {{id: change, exec: [sh, -c, "echo changed >> notes.txt"], needs: [{needs_for_change}]}}
    - {{id: test, exec: [sh, -c, {test:?}], needs: [change]}}
    - {{id: push, git: push, needs: [test]}}
"#,
            image = afe_testkit::sandbox_image(),
            test = format!("{wait}{WAITING_TEST}"),
        ),
    )
    .unwrap();
}

/// A git server with repository `app` (a README and a notes file) and the input naming it.
pub async fn repository(dir: &Path) -> (GitServer, PathBuf) {
    let server = GitServer::start(TOKEN).await;
    let url = server.create_repo(
        "app",
        &[("README", b"the app\n"), ("notes.txt", b"notes\n")],
    );
    let input = dir.join("input.json");
    std::fs::write(&input, format!("{{\"repository\": {url:?}}}")).unwrap();
    (server, input)
}

#[allow(unused_imports, reason = "each test file uses its own part")]
pub use afe_testkit::{sandbox_objects as left_of, wait_for_process};

/// How many times each node of the ticket was started.
pub async fn attempts(
    store: &afe_store::SqlStore,
    ticket: &str,
) -> std::collections::BTreeMap<String, i32> {
    use afe_store::Store;
    store
        .node_runs(ticket)
        .await
        .unwrap()
        .into_iter()
        .map(|run| (run.node, run.attempts))
        .collect()
}
