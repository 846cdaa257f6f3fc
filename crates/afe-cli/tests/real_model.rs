//! The nodes that think, against a real model: llama.cpp's OpenAI-compatible server serving
//! SmolLM2-135M-Instruct on the CPU (`afe_testkit::RealModelServer`), driven by `afe run --local`
//! through clone → summarize (agent, structured output) → look (deep, its first tool call forced).
//! Three or four calls: it is slow on two cores, and the rest is proved against the scripted server.

mod tickets;

use std::path::Path;

use afe_store::{LedgerState, SqlStore, Store};
use afe_testkit::RealModelServer;
use tickets::*;

const LLAMA_KEY: &str = "sk-llama-e2e-51d0c2";

fn config(dir: &Path, server: &RealModelServer) {
    let model = format!(
        r#"{{provider: llama, name: smollm2, baseUrl: "{}", apiKeyEnv: LLAMA_KEY, temperature: 0, maxTokens: 64, structuredOutput: jsonObject, price: {{input: 1.0, output: 2.0}}}}"#,
        server.base_url()
    );
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            r#"{REPO_REQUEST}---
apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {{name: summary}}
spec:
  fields:
    kind: {{type: string, enum: [bug, feature, docs]}}
---
apiVersion: afe.dev/v1alpha1
kind: Agent
metadata: {{name: summarizer}}
spec:
  model: {model}
  prompt: "Say what kind of change the repository {{{{ repo_request.repository }}}} needs: bug, feature or docs."
---
apiVersion: afe.dev/v1alpha1
kind: Agent
metadata: {{name: reader}}
spec:
  model: {model}
  prompt: "Read the file README, then say in one sentence what it says."
  tools: [ws.read]
  firstTool: ws.read
  budget: {{turns: 4}}
---
apiVersion: afe.dev/v1alpha1
kind: Flow
metadata: {{name: look}}
spec:
  input: repo-request
  sandbox: {{image: {image:?}}}
  nodes:
    - {{id: clone, git: clone}}
    - {{id: summarize, agent: summarizer, output: summary, needs: [clone]}}
    - {{id: look, deep: reader, needs: [summarize]}}
"#,
            image = afe_testkit::sandbox_image(),
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_and_a_deep_node_run_against_a_real_model() {
    let dir = afe_testkit::scratch("afe-real-model");
    let server = RealModelServer::start(LLAMA_KEY);
    config(&dir, &server);
    let (_git, input) = repository(&dir).await;
    let store_url = afe_testkit::sqlite_url(&dir);
    let (status, events, log) = run_flow(
        &dir,
        &input,
        "look",
        &store_url,
        &[("LLAMA_KEY", LLAMA_KEY)],
    );
    assert_eq!(status, Some(0), "{events:#?}\n{log}");

    // The structured answer held to its Schema: one of the kinds it names.
    let completed = kinds(&events, "node.completed");
    let summary = &completed[1]["payload"]["output"];
    assert!(
        ["bug", "feature", "docs"].contains(&summary["kind"].as_str().unwrap_or_default()),
        "{summary}"
    );

    // The deep node's first turn called ws.read, as forced, and the sandbox ran it; the loop
    // ended on an answer without tool calls.
    let ticket = events[0]["ticket"].as_str().unwrap().to_string();
    let store = SqlStore::connect(&store_url).await.unwrap();
    let turns = store.turns(&ticket, "look").await.unwrap();
    assert!(turns.len() >= 2, "{turns:#?}");
    let first = &turns[0].payload;
    assert_eq!(
        first["answer"]["tool_calls"][0]["name"], "ws_read",
        "{first}"
    );
    assert!(first["results"][0].is_object(), "{first}");
    let last = &turns.last().unwrap().payload;
    assert_eq!(
        last["answer"]["tool_calls"].as_array().map(Vec::len),
        Some(0),
        "{last}"
    );
    assert_eq!(kinds(&events, "tool.results").len(), turns.len() - 1);

    // Every call reserved, kept with the server's completion id and settled.
    let ledger = store.ledger(&ticket).await.unwrap();
    assert_eq!(ledger.len(), kinds(&events, "model.turn").len());
    let summarize = store.turns(&ticket, "summarize").await.unwrap();
    assert_eq!(ledger.len(), summarize.len() + turns.len());
    for entry in &ledger {
        assert_eq!(entry.state, LedgerState::Settled, "{entry:?}");
        assert!(entry.generation.is_some(), "{entry:?}");
    }
    let everything = format!("{events:?}{log}");
    assert!(
        !everything.contains(LLAMA_KEY),
        "the key in an event or a log line"
    );
}
