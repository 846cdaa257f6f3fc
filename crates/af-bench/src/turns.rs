//! `af-bench turns`: the engine's own time per model turn of a `deep` node — from the moment an
//! answer's last byte was taken by the connection to the moment the next request arrived, both
//! read at the scripted server — with the tool's execution taken out: each turn calls a tool the
//! node answers at once, without the sandbox (`ws_noop` is no tool). What remains is the worker's
//! work per turn: assembling the answer, journaling it with its settlement, the event, the
//! reservation of the next call, the next request. The baseline, in the same invocation, is the
//! client alone calling back to back: what any loop over this server would take.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use afe_model::{ChatRequest, ClientSettings, Message, ModelClient, Role};
use afe_nodes::SandboxExecutor;
use afe_queue::{EmbeddedNotifier, EmbeddedQueue, Queue, QueueSettings};
use afe_sandbox_docker::{DockerSandbox, DockerSandboxSettings};
use afe_store::{NewTicket, SqlStore, Store};
use afe_testkit::{Answer, ModelServer, Reply};
use afe_worker::{Worker, WorkerSettings};
use afe_workspace::Credentials;
use anyhow::{Context, Result, bail};
use serde_json::json;

#[derive(Debug)]
pub struct Options {
    pub turns: usize,
    /// Run the store on the machine's PostgreSQL (a database of the benchmark's own), not SQLite.
    pub postgres: bool,
}

/// The gaps between an answer's end and the next request, for requests `from..`.
fn gaps(server: &ModelServer, from: usize) -> Vec<Duration> {
    let seen = server.seen.lock().unwrap();
    (from.max(1)..seen.arrived.len())
        .filter_map(|i| seen.finished.get(i - 1).map(|end| seen.arrived[i] - *end))
        .collect()
}

fn summary(mut gaps: Vec<Duration>) -> (Duration, Duration) {
    gaps.sort();
    (gaps[gaps.len() / 2], gaps[gaps.len() * 9 / 10])
}

fn script(turns: usize) -> Vec<Reply> {
    let mut script: Vec<Reply> = (0..turns)
        .map(|_| Reply::Answer(Answer::tools(&[("ws_noop", json!({}))], 0.0001)))
        .collect();
    script.push(Reply::Answer(Answer::text("done", 0.0001)));
    script
}

fn config(dir: &std::path::Path, server: &ModelServer, turns: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            r#"apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {{name: request}}
spec: {{fields: {{topic: string}}}}
---
apiVersion: afe.dev/v1alpha1
kind: Agent
metadata: {{name: looper}}
spec:
  model: {{provider: scripted, name: bench, baseUrl: "{base}", price: {{input: 1.0, output: 1.0}}}}
  prompt: "Loop."
  tools: [ws.read]
  budget: {{turns: {limit}}}
---
apiVersion: afe.dev/v1alpha1
kind: Flow
metadata: {{name: loop}}
spec:
  input: request
  sandbox: {{image: {image:?}}}
  nodes:
    - {{id: work, deep: looper}}
"#,
            base = server.base_url(),
            limit = turns + 5,
            image = afe_testkit::sandbox_image(),
        ),
    )?;
    Ok(())
}

pub async fn run(options: Options) -> Result<()> {
    let turns = options.turns.max(3);
    println!("engine overhead per model turn, {turns} turns, tool execution left out");

    // The baseline: the client alone, calling again the moment an answer is whole.
    let server = ModelServer::start(script(turns)).await;
    let client = ModelClient::new(ClientSettings::default())?;
    let endpoint = afe_model::Endpoint {
        provider: "scripted".into(),
        base_url: server.base_url(),
        key: None,
    };
    let request = ChatRequest::new("bench", vec![Message::text(Role::User, "loop")]);
    for _ in 0..=turns {
        client.chat(&endpoint, &request, &mut |_| {}).await?;
    }
    let (base_median, base_p90) = summary(gaps(&server, 1));

    // The engine: one deep node of `turns` turns, through a worker in this process.
    let server = ModelServer::start(script(turns)).await;
    let dir = afe_testkit::scratch("af-bench-turns");
    config(&dir, &server, turns)?;
    let loaded = afe_config::load_folder(&dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let revision = afe_config::Revision::of(&loaded);
    let database = if options.postgres {
        Some(afe_testkit::TestDatabase::create().await)
    } else {
        None
    };
    let url = database
        .as_ref()
        .map_or_else(|| afe_testkit::sqlite_url(&dir), |db| db.url.clone());
    let store: Arc<dyn Store> = Arc::new(SqlStore::connect(&url).await?);
    store
        .put_revision(&revision.hash, &revision.normalized)
        .await?;
    let ticket = store
        .create_ticket(&NewTicket {
            flow: "loop".into(),
            input: json!({"topic": "bench"}),
            revision: revision.hash.clone(),
            budget_micros: None,
        })
        .await?;
    let sandbox = DockerSandbox::connect(DockerSandboxSettings::default()).await?;
    let executor = SandboxExecutor::new(
        Arc::new(sandbox),
        store.clone(),
        Credentials::none(),
        ModelClient::new(ClientSettings::default())?,
        "bench",
    );
    let queue = Arc::new(EmbeddedQueue::new(QueueSettings::default()));
    let worker = Arc::new(Worker::new(
        store.clone(),
        queue.clone(),
        Arc::new(EmbeddedNotifier::default()),
        Arc::new(executor),
        WorkerSettings {
            sweep: false,
            ..WorkerSettings::default()
        },
    ));
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let working = tokio::spawn(worker.run(shutdown));
    queue.enqueue(&ticket.id).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let ended = loop {
        let found = store.ticket(&ticket.id).await?;
        if found.state.is_terminal() {
            break found;
        }
        if Instant::now() > deadline {
            bail!("the ticket did not end");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = stop.send(true);
    working.await.context("the worker")?;
    if ended.state != afe_store::TicketState::Done {
        bail!("the ticket ended {}: {:?}", ended.state, ended.reason);
    }
    // The node's first call follows the sandbox's opening: the turns are the ones after it.
    let (median, p90) = summary(gaps(&server, 1));
    let store_name = if options.postgres {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    let mut rows = BTreeMap::new();
    rows.insert("1 client alone", (base_median, base_p90));
    rows.insert("2 engine", (median, p90));
    for (name, (median, p90)) in rows {
        println!(
            "  {:<16} median {:>6.2} ms   p90 {:>6.2} ms",
            &name[2..],
            median.as_secs_f64() * 1e3,
            p90.as_secs_f64() * 1e3
        );
    }
    println!(
        "  engine, store on {store_name}: {:.2} ms median per turn ({:.1}x the client alone); target <= 5 ms median",
        median.as_secs_f64() * 1e3,
        median.as_secs_f64() / base_median.as_secs_f64().max(1e-9)
    );
    if let Some(database) = database {
        database.remove().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
