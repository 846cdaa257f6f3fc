//! Plugin tools end to end: a `deep` node whose agent has the tools of two MCP servers of the
//! project's own (`afe_testkit::mcp_server`) — one over stdio, started by the worker with only the
//! variables its Plugin names, one over HTTP requiring the header its `headersSecretRef` holds —
//! against the scripted model server. The model is offered the tools it may have and not the
//! others; each call it makes is executed by the worker, bounded in output and in time; a plugin
//! that refuses the worker stops the node before anything is paid.

mod tickets;

use std::path::Path;

use afe_testkit::{Answer, McpHttpServer, ModelServer, Reply};
use serde_json::{Value, json};
use tickets::*;

const HEADERS: &str = "X-Plugin-Token: tok-mcp-8812";

fn config(dir: &Path, model: &ModelServer, http: &McpHttpServer) {
    std::fs::create_dir_all(dir).unwrap();
    let script = afe_testkit::testkit_binary("afe-mcp-script");
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            r#"{REPO_REQUEST}---
apiVersion: afe.dev/v1alpha1
kind: Plugin
metadata: {{name: scripted}}
spec:
  stdio: {{command: [{script:?}], env: [PLUGIN_TOKEN]}}
  tools: [echo, env, loud, broken]
---
apiVersion: afe.dev/v1alpha1
kind: Plugin
metadata: {{name: slowpoke}}
spec:
  # Only a tool that never answers is under a short bound: no call that does answer races it.
  stdio: {{command: [{script:?}]}}
  tools: [slow]
  timeoutSeconds: 1
---
apiVersion: afe.dev/v1alpha1
kind: Plugin
metadata: {{name: remote}}
spec:
  http: {{url: "{url}", headersSecretRef: {{name: mcp-headers, key: MCP_HEADERS}}}}
---
apiVersion: afe.dev/v1alpha1
kind: Agent
metadata: {{name: helper}}
spec:
  model: {{provider: scripted, name: test/model, baseUrl: "{base}", apiKeyEnv: SCRIPTED_KEY, price: {{input: 1.0, output: 2.0}}}}
  prompt: "Use the tools."
  tools: [ws.read, scripted, slowpoke, remote.echo]
  budget: {{turns: 5}}
---
apiVersion: afe.dev/v1alpha1
kind: Flow
metadata: {{name: help}}
spec:
  input: repo-request
  sandbox: {{image: {image:?}}}
  nodes:
    - {{id: clone, git: clone}}
    - {{id: help, deep: helper, needs: [clone]}}
"#,
            script = script.display().to_string(),
            url = http.url(),
            base = model.base_url(),
            image = afe_testkit::sandbox_image(),
        ),
    )
    .unwrap();
}

/// Flow `help`, the worker holding the model's key, the stdio plugin's variable, and `headers`
/// for the HTTP plugin.
fn run(dir: &Path, input: &Path, headers: &str) -> (Option<i32>, Vec<Value>, String) {
    run_flow(
        dir,
        input,
        "help",
        &afe_testkit::sqlite_url(dir),
        &[
            ("SCRIPTED_KEY", KEY),
            ("PLUGIN_TOKEN", "plugin-secret"),
            ("MCP_HEADERS", headers),
        ],
    )
}

/// The tool results the model was sent in request `n`, by tool call id.
fn results_sent(model: &ModelServer, n: usize) -> Vec<Value> {
    let seen = model.seen.lock().unwrap();
    seen.requests[n]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_calls_its_plugins_tools_through_the_worker_bounded_in_time_and_output() {
    let dir = afe_testkit::scratch("afe-plugins");
    let http = McpHttpServer::start("x-plugin-token", "tok-mcp-8812").await;
    let model = ModelServer::start(vec![
        Reply::Answer(Answer::tools(
            &[
                ("scripted__echo", json!({"text": "hi"})),
                ("scripted__env", json!({})),
                ("scripted__loud", json!({})),
                ("scripted__broken", json!({})),
                ("remote__echo", json!({"text": "far"})),
            ],
            0.001,
        )),
        Reply::Answer(Answer::tools(&[("slowpoke__slow", json!({}))], 0.001)),
        Reply::Answer(Answer::text("done", 0.001)),
    ])
    .await;
    config(&dir, &model, &http);
    let (_git, input) = repository(&dir).await;
    let (status, events, log) = run(&dir, &input, HEADERS);
    assert_eq!(status, Some(0), "{events:#?}\n{log}");

    // Offered: the workspace tool, then the plugins' by plugin name: only `echo` of `remote`,
    // the tools `scripted` and `slowpoke` allow.
    let offered: Vec<String> = {
        let seen = model.seen.lock().unwrap();
        seen.requests[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        offered,
        [
            "ws_read",
            "remote__echo",
            "scripted__echo",
            "scripted__env",
            "scripted__loud",
            "scripted__broken",
            "slowpoke__slow",
        ]
    );

    let first = results_sent(&model, 1);
    assert_eq!(first[0]["content"], "echo: hi");
    // The stdio plugin has the variable its Plugin names and what running a program needs; none
    // of the worker's others (its model key, its git token).
    let names = first[1]["content"].as_str().unwrap();
    assert!(names.split(',').any(|n| n == "PLUGIN_TOKEN"), "{names}");
    assert!(names.split(',').any(|n| n == "PATH"), "{names}");
    assert!(
        !names.contains("SCRIPTED_KEY") && !names.contains("AFE_GIT_TOKEN"),
        "{names}"
    );
    // Output past the bound is cut and says so; an error result is an error for the model.
    assert_eq!(first[2]["content"].as_str().unwrap().len(), 16 << 10);
    assert_eq!(first[2]["truncated"], true);
    assert_eq!(first[3]["error"], "it broke");
    // The HTTP plugin answered, with the header from the worker's environment.
    assert_eq!(first[4]["content"], "echo: far");
    // A call past the plugin's time bound is a timeout the model sees; the loop goes on.
    let second = results_sent(&model, 2);
    let timed_out = second.last().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        timed_out.contains("slowpoke.slow did not answer within 1 s"),
        "{timed_out}"
    );

    // Each turn's calls are in the ticket's events under their plugin's names.
    let tools: Vec<&str> = kinds(&events, "tool.results")[0]["payload"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "scripted.echo",
            "scripted.env",
            "scripted.loud",
            "scripted.broken",
            "remote.echo"
        ]
    );
    assert_eq!(
        http.server.calls.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_refuses_the_worker_stops_the_node_before_anything_is_paid() {
    let dir = afe_testkit::scratch("afe-plugins-refused");
    let http = McpHttpServer::start("x-plugin-token", "tok-mcp-8812").await;
    let model = ModelServer::start(vec![Reply::Answer(Answer::text("done", 0.001))]).await;
    config(&dir, &model, &http);
    let (_git, input) = repository(&dir).await;
    let (status, events, log) = run(&dir, &input, "X-Plugin-Token: wrong");
    assert_ne!(status, Some(0), "{events:#?}\n{log}");
    let failed = kinds(&events, "node.failed");
    let error = failed[0]["payload"]["error"].as_str().unwrap();
    assert!(error.starts_with("AFE-NODE-010 plugin remote"), "{error}");
    assert!(
        !error.contains("wrong"),
        "the header's value is not repeated: {error}"
    );
    assert_eq!(model.calls(), 0, "nothing was sent to the model");
}
