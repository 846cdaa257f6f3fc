//! `af-bench tickets`: afe's store and queue under load. N tickets of a 3-node no-op flow go
//! through W `afe worker` processes on PostgreSQL and Redis; the baseline, in the same run, is the
//! same store transactions issued by W tasks of this process with no queue and no processes in
//! between — what the store alone can do here. Then tickets arrive one by one at a steady rate
//! below capacity, and the pickup latency (created → claimed, on the database's clock) is
//! measured. Every node of every ticket must have run exactly once, or the run fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use afe_queue::{Queue, QueueSettings, RedisQueue};
use afe_store::{Completion, Finish, NewTicket, NodeState, SqlStore, Store, TicketState};
use anyhow::{Context, Result, bail};
use serde_json::json;

pub struct Options {
    pub tickets: usize,
    pub workers: usize,
    pub rate: f64,
    pub paced: usize,
    pub afe: PathBuf,
}

fn worker(
    afe: &Path,
    id: &str,
    store: &str,
    redis: &str,
    prefix: &str,
    script: &Path,
) -> Result<Child> {
    Command::new(afe)
        .args([
            "worker", "--id", id, "--store", store, "--broker", redis, "--prefix", prefix,
        ])
        .args(["--executor", "scripted", "--script"])
        .arg(script)
        .args(["--sweep-every", "5s", "--requeue-queued-after", "120s"])
        .env("AFE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (cargo build --release -p afe-cli)",
                afe.display()
            )
        })
}

async fn create(store: &SqlStore, revision: &str, n: usize) -> Result<String> {
    Ok(store
        .create_ticket(&NewTicket {
            flow: "work".into(),
            input: json!({"n": n}),
            revision: revision.to_string(),
            budget_micros: None,
        })
        .await?
        .id)
}

async fn all_done(store: &SqlStore, ids: &[String]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut at = 0;
    while at < ids.len() {
        let ticket = store.ticket(&ids[at]).await?;
        if ticket.state == TicketState::Done {
            at += 1;
            continue;
        }
        if ticket.state.is_terminal() {
            bail!(
                "ticket {} ended {:?}: {:?}",
                ticket.id,
                ticket.state,
                ticket.reason
            );
        }
        if Instant::now() > deadline {
            bail!("{} of {} tickets done after 10 minutes", at, ids.len());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Every node of every ticket completed, started exactly once.
async fn each_node_once(store: &SqlStore, ids: &[String]) -> Result<()> {
    for id in ids {
        let runs = store.node_runs(id).await?;
        if runs.len() != 3
            || runs
                .iter()
                .any(|r| r.state != NodeState::Completed || r.attempts != 1)
        {
            bail!("ticket {id}: node runs {runs:?}");
        }
    }
    Ok(())
}

/// Created → claimed for each ticket, in milliseconds, sorted.
async fn pickups(store: &SqlStore, ids: &[String]) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for id in ids {
        let events = store.events(id, 0, 3).await?;
        let created = events.iter().find(|e| e.kind == "ticket.created");
        let claimed = events.iter().find(|e| e.kind == "ticket.claimed");
        if let (Some(created), Some(claimed)) = (created, claimed) {
            out.push(claimed.at - created.at);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The store's transactions for one ticket, as a worker issues them, without queue or process.
async fn store_only(store: Arc<SqlStore>, id: String) -> Result<()> {
    let Some((lease, _)) = store
        .claim(&id, "baseline", Duration::from_secs(30))
        .await?
    else {
        bail!("baseline could not claim {id}");
    };
    store.ticket(&id).await?;
    store.node_runs(&id).await?;
    for node in ["n1", "n2", "n3"] {
        store.start_node(&lease, node).await?;
        store
            .complete_node(
                &lease,
                Completion::output_only(node, json!({"node": node}), node),
            )
            .await?;
    }
    store.finish(&lease, Finish::Done).await?;
    Ok(())
}

pub async fn run(options: Options) -> Result<()> {
    let database = afe_testkit::TestDatabase::create().await;
    let redis = afe_testkit::redis_url();
    let prefix = afe_testkit::unique("afe-bench");
    let store = Arc::new(SqlStore::connect(&database.url).await?);
    let queue = RedisQueue::connect(&redis, &prefix, QueueSettings::default())
        .await
        .with_context(|| format!("Redis at {redis}"))?;
    let revision = afe_testkit::chain_revision(3, None);
    store
        .put_revision(&revision.hash, &revision.normalized)
        .await?;
    let dir = afe_testkit::scratch("afe-bench");
    let script = dir.join("script.json");
    std::fs::write(
        &script,
        json!({"calls_file": dir.join("calls")}).to_string(),
    )?;
    println!(
        "af-bench tickets: {} tickets of a 3-node no-op flow, {} worker processes, PostgreSQL + Redis, 2 cores shared by all",
        options.tickets, options.workers
    );

    // Baseline: the store alone, W tasks of this process.
    let mut ids = Vec::new();
    for n in 0..options.tickets {
        ids.push(create(&store, &revision.hash, n).await?);
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in ids.chunks(options.tickets.div_ceil(options.workers)) {
        let store = store.clone();
        let chunk = chunk.to_vec();
        tasks.spawn(async move {
            for id in chunk {
                store_only(store.clone(), id).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let baseline = options.tickets as f64 / started.elapsed().as_secs_f64();

    // The engine: W worker processes, fed through Redis.
    let mut children = Vec::new();
    for w in 0..options.workers {
        children.push(worker(
            &options.afe,
            &format!("bench-{w}"),
            &database.url,
            &redis,
            &prefix,
            &script,
        )?);
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // connected and waiting
    let started = Instant::now();
    let mut ids = Vec::new();
    for n in 0..options.tickets {
        let id = create(&store, &revision.hash, n).await?;
        queue.enqueue(&id).await?;
        ids.push(id);
    }
    all_done(&store, &ids).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let engine = options.tickets as f64 / elapsed;
    each_node_once(&store, &ids).await?;
    let burst = pickups(&store, &ids).await?;

    // Pickup at a steady rate below capacity.
    let interval = Duration::from_secs_f64(1.0 / options.rate);
    let mut paced = Vec::new();
    let mut next = Instant::now();
    for n in 0..options.paced {
        tokio::time::sleep_until(next.into()).await;
        next += interval;
        let id = create(&store, &revision.hash, n).await?;
        queue.enqueue(&id).await?;
        paced.push(id);
    }
    all_done(&store, &paced).await?;
    each_node_once(&store, &paced).await?;
    let pickup = pickups(&store, &paced).await?;

    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    store.close().await;
    database.remove().await;
    let _ = std::fs::remove_dir_all(&dir);

    println!("{:<52} {:>10}", "run", "tickets/s");
    println!(
        "{:<52} {:>10.1}",
        "baseline: the store's transactions alone (in process)", baseline
    );
    println!(
        "{:<52} {:>10.1}",
        "afe: queue + worker processes + store", engine
    );
    println!(
        "ratio afe/baseline {:.2}; {} tickets in {:.2} s; every node of every ticket ran exactly once",
        engine / baseline,
        options.tickets,
        elapsed
    );
    println!(
        "burst of {}: pickup (created -> claimed) p50 {} ms, p99 {} ms (queueing behind the burst included)",
        options.tickets,
        percentile(&burst, 50.0),
        percentile(&burst, 99.0)
    );
    println!(
        "steady {:.0} tickets/s, {} tickets: pickup p50 {} ms, p99 {} ms",
        options.rate,
        options.paced,
        percentile(&pickup, 50.0),
        percentile(&pickup, 99.0)
    );
    println!(
        "targets: >= 50 tickets/s: {}; pickup p99 < 100 ms: {}",
        if engine >= 50.0 { "met" } else { "NOT met" },
        if percentile(&pickup, 99.0) < 100 {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok(())
}
