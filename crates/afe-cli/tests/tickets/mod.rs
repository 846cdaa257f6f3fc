//! What the end-to-end ticket tests share: a git server that requires a token, a config folder
//! with a flow of git and exec nodes on the tests' sandbox image, and what is left on the daemon.

#![allow(dead_code, reason = "each test file uses its own part")]

use std::path::{Path, PathBuf};

use afe_testkit::{Answer, GitServer, ModelServer, Reply};
use serde_json::json;

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

pub const KEY: &str = "sk-scripted-9d2e71c4";

/// A config folder whose agents call `server`: `planner` (structured output, Schema `plan`) and
/// `coder` (the workspace tools); flow `fix`: clone → plan → fix → test → push.
pub fn agents_config(dir: &Path, server: &ModelServer, budget: Option<f64>) {
    std::fs::create_dir_all(dir).unwrap();
    let budget = budget
        .map(|usd| format!("\n  budget: {{usd: {usd}}}"))
        .unwrap_or_default();
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            r#"apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {{name: repo-request}}
spec:
  fields:
    repository: string
---
apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {{name: plan}}
spec:
  fields:
    steps: {{type: array, items: {{type: string}}, minItems: 1}}
---
apiVersion: afe.dev/v1alpha1
kind: Agent
metadata: {{name: planner}}
spec:
  model: {{provider: scripted, name: test/model, baseUrl: "{base}", apiKeyEnv: SCRIPTED_KEY, price: {{input: 1.0, output: 2.0}}}}
  prompt: "Plan how to fix {{{{ repo_request.repository }}}}."
---
apiVersion: afe.dev/v1alpha1
kind: Agent
metadata: {{name: coder}}
spec:
  model: {{provider: scripted, name: test/model, baseUrl: "{base}", apiKeyEnv: SCRIPTED_KEY, price: {{input: 1.0, output: 2.0}}}}
  prompt: "Carry out the plan: {{{{ plan.steps }}}}."
  tools: [ws.read, ws.write, ws.exec, ws.test]
  budget: {{turns: 10}}
---
apiVersion: afe.dev/v1alpha1
kind: Flow
metadata: {{name: fix}}
spec:
  input: repo-request
  sandbox: {{image: {image:?}}}{budget}
  nodes:
    - {{id: clone, git: clone}}
    - {{id: plan, agent: planner, output: plan, needs: [clone]}}
    - {{id: fix, deep: coder, needs: [plan]}}
    - {{id: test, exec: [grep, -q, fixed, notes.txt], needs: [fix]}}
    - {{id: push, git: push, needs: [test]}}
"#,
            base = server.base_url(),
            image = afe_testkit::sandbox_image(),
        ),
    )
    .unwrap();
}

/// The answers of a ticket that runs to done: the plan, then four turns of the coder.
pub fn the_whole_script() -> Vec<Reply> {
    vec![
        Reply::Answer(Answer::text(
            r#"{"steps": ["read the notes", "fix them"]}"#,
            0.001,
        )),
        Reply::Answer(Answer::tools(
            &[("ws_read", json!({"path": "notes.txt"}))],
            0.002,
        )),
        Reply::Answer(Answer::tools(
            &[
                (
                    "ws_write",
                    json!({"path": "notes.txt", "content": "fixed\n"}),
                ),
                // What the sandbox's processes have in their environment comes back to the
                // model, and is journaled: where a leaked key would show.
                (
                    "ws_exec",
                    json!({"argv": ["sh", "-c", "env; cat /proc/[0-9]*/environ"]}),
                ),
            ],
            0.003,
        )),
        Reply::Answer(Answer::tools(
            &[(
                "ws_test",
                json!({"argv": ["grep", "-q", "fixed", "notes.txt"]}),
            )],
            0.004,
        )),
        Reply::Answer(Answer::text(
            "The notes are fixed and the test passes.",
            0.005,
        )),
    ]
}

/// The events of type `kind` among `events`.
pub fn kinds<'a>(events: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// `afe run --local --json` of `flow` in `dir` on `store`, with the git token and `env` in its
/// environment: its exit status, the events it printed, and its log.
pub fn run_flow(
    dir: &Path,
    input: &Path,
    flow: &str,
    store: &str,
    env: &[(&str, &str)],
) -> (Option<i32>, Vec<serde_json::Value>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_afe"))
        .args([
            "run", "--local", "--json", "--flow", flow, "--store", store, "-c",
        ])
        .arg(dir)
        .arg("--input")
        .arg(input)
        .env("AFE_GIT_TOKEN", TOKEN)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (
        out.status.code(),
        events,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The Schema every ticket test's flow takes: a repository's URL.
pub const REPO_REQUEST: &str = r#"apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {name: repo-request}
spec:
  fields:
    repository: string
"#;

/// A running `afe run --json` whose flow is `config(.., wait_first: true, ..)`'s, read up to its
/// test node's first start: a point the test chose, where it cuts the sandbox.
pub struct CutRun {
    pub child: std::process::Child,
    pub lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    pub seen: Vec<serde_json::Value>,
    pub ticket: String,
}

impl CutRun {
    /// Reads `child`'s events up to the test node's first `node.started`.
    pub fn up_to_the_test_node(mut child: std::process::Child) -> CutRun {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = Vec::new();
        let mut ticket = String::new();
        for line in lines.by_ref() {
            let event: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            ticket = event["ticket"].as_str().unwrap().to_string();
            let first_test = event["kind"] == "node.started" && event["payload"]["node"] == "test";
            seen.push(event);
            if first_test {
                break;
            }
        }
        assert!(
            seen.last().is_some_and(|e| e["kind"] == "node.started"),
            "the ticket ended before its test node: {seen:#?}"
        );
        CutRun {
            child,
            lines,
            seen,
            ticket,
        }
    }

    /// Once the sandbox was cut: the run ends done, having lost its sandbox once, run no
    /// completed node again, run the interrupted one again, and pushed the change once — one
    /// line in the pushed file, so the change ran once and the restored workspace had it.
    pub async fn survived(mut self, store_url: &str, server: &GitServer) {
        for line in self.lines {
            self.seen
                .push(serde_json::from_str(&line.unwrap()).unwrap());
        }
        let seen = self.seen;
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{seen:#?}");
        assert_eq!(kinds(&seen, "sandbox.lost").len(), 1, "{seen:#?}");
        let store = afe_store::SqlStore::connect(store_url).await.unwrap();
        let attempts = attempts(&store, &self.ticket).await;
        assert_eq!(attempts["clone"], 1);
        assert_eq!(attempts["change"], 1, "a completed node never runs again");
        assert_eq!(attempts["test"], 2, "the interrupted node ran again");
        assert_eq!(attempts["push"], 1);
        let started_change = kinds(&seen, "node.started")
            .iter()
            .filter(|e| e["payload"]["node"] == "change")
            .count();
        assert_eq!(started_change, 1);
        let branch = format!("refs/heads/afe/{}/work", self.ticket);
        assert_eq!(
            server.file("app", &branch, "notes.txt").as_deref(),
            Some(&b"notes\nchanged\n"[..])
        );
        assert_eq!(
            server.seen.pushes.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
    }
}

/// Polls, up to ten minutes, until `check` holds: a busy machine or a cluster takes the time it
/// takes, and a check that never holds fails rather than hangs.
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Whether a process whose command line holds `needle` runs in the sandbox (read from /proc, by
/// a command of the sandbox's own user: the platform's process list is not asked).
pub async fn runs_in(
    sandbox: &dyn afe_sandbox::Sandbox,
    opened: &afe_sandbox::Opened,
    needle: &str,
) -> bool {
    let script = "for p in /proc/[0-9]*; do tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null; echo; done | grep -qF -- \"$1\"";
    let request = afe_sandbox::ExecRequest::new(["sh", "-c", script, "sh", needle]);
    matches!(sandbox.exec(opened, &request, &mut |_| {}).await, Ok(ran) if ran.succeeded())
}
