//! `af-bench api`: `afe serve` on PostgreSQL and Redis.
//!
//! 1. Starting a ticket through the API (`POST /v1/tickets`: the current revision, the input's
//!    Schema, the insert, the enqueue, HTTP and JSON) against the bare store insert and enqueue
//!    issued in this process — the same two writes with nothing around them. One client, one
//!    request at a time, then `--clients` at once. Target: at most 2×.
//! 2. `--subscribers` WebSocket clients of one ticket's live events: the events are written as a
//!    worker writes them (under its lease, then a notice on Redis) one at a time, and each
//!    client's delivery latency is taken from the write's start to the message's arrival, on this
//!    process's clock; the baseline is one subscriber, in the same run. Serve's resident memory
//!    is read before the clients connect and after, per subscriber.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use afe_queue::{Notice, Notifier, Queue, QueueSettings, RedisNotifier, RedisQueue};
use afe_store::{NewTicket, SqlStore, Store};
use anyhow::{Context, Result, bail};
use futures_util::StreamExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

pub struct Options {
    pub tickets: usize,
    pub clients: usize,
    pub subscribers: usize,
    pub events: usize,
    pub afe: PathBuf,
}

pub(crate) const TOKEN: &str = "bench-token-0123456789abcdef0123456789";

pub(crate) struct Serve {
    child: Child,
    pub(crate) url: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn rss(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .context("no VmRSS in /proc status")?;
        Ok(kb * 1024)
    }
}

/// `afe serve ARGS --listen 127.0.0.1:0` with the token; the process and where it listens.
pub(crate) fn serve(afe: &Path, args: &[&str]) -> Result<Serve> {
    use std::io::BufRead;
    let mut child = Command::new(afe)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("AFE_API_TOKEN", TOKEN)
        .env("AFE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| {
            format!(
                "starting {} (cargo build --release -p afe-cli)",
                afe.display()
            )
        })?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().context("serve's stdout")?).read_line(&mut line)?;
    let url = line
        .trim()
        .strip_prefix("afe serve: listening on ")
        .with_context(|| format!("afe serve said {line:?}"))?
        .to_string();
    Ok(Serve { child, url })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Per-request latencies and the rate of `n` requests made by `clients` at once.
async fn measure<F, Fut>(n: usize, clients: usize, one: F) -> Result<(Vec<Duration>, f64)>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let one = Arc::new(one);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let one = one.clone();
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::new();
            for i in (client..n).step_by(clients) {
                let at = Instant::now();
                one(i).await?;
                took.push(at.elapsed());
            }
            Ok::<_, anyhow::Error>(took)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    all.sort();
    Ok((all, rate))
}

fn row(label: &str, took: &[Duration], rate: f64) {
    println!(
        "  {label:<34} p50 {:>7.2} ms  p99 {:>7.2} ms  {:>7.0} /s",
        ms(percentile(took, 0.5)),
        ms(percentile(took, 0.99)),
        rate
    );
}

/// Raises this process's open-file limit (its children inherit it): a thousand WebSockets are
/// a thousand descriptors on each side.
fn more_files() -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok(())
}

pub async fn run(options: Options) -> Result<()> {
    more_files()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let database = afe_testkit::TestDatabase::create().await;
    let redis = afe_testkit::redis_url();
    let prefix = afe_testkit::unique("afe-bench");
    let dir = afe_testkit::scratch("afe-bench-api");
    afe_testkit::chain_config(&dir, 3, None);
    let store = Arc::new(SqlStore::connect(&database.url).await?);
    let queue = Arc::new(RedisQueue::connect(&redis, &prefix, QueueSettings::default()).await?);
    let config = dir.display().to_string();
    let serve = serve(
        &options.afe,
        &[
            "-c",
            &config,
            "--store",
            &database.url,
            "--broker",
            &redis,
            "--prefix",
            &prefix,
            "--live-buffer",
            "4096",
        ],
    )?;
    let revision = afe_testkit::chain_revision(3, None).hash;
    println!(
        "afe serve {} on PostgreSQL and Redis; {} tickets per measurement",
        serve.url, options.tickets
    );

    // 1. Starting a ticket.
    let http = reqwest::Client::new();
    let start = {
        let http = http.clone();
        let url = format!("{}/v1/tickets", serve.url);
        move |i: usize| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let answer = http
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .header("content-type", "application/json")
                    .body(json!({"flow": "work", "input": {"n": i}}).to_string())
                    .send()
                    .await?;
                if answer.status() != 201 {
                    bail!("POST /v1/tickets answered {}", answer.status());
                }
                answer.bytes().await?;
                Ok(())
            }
        }
    };
    let bare = {
        let store = store.clone();
        let queue = queue.clone();
        let revision = revision.clone();
        move |i: usize| {
            let store = store.clone();
            let queue = queue.clone();
            let revision = revision.clone();
            async move {
                let ticket = store
                    .create_ticket(&NewTicket {
                        flow: "work".into(),
                        input: json!({"n": i}),
                        revision,
                        budget_micros: None,
                    })
                    .await?;
                queue.enqueue(&ticket.id).await?;
                Ok(())
            }
        }
    };
    // Warm both paths (connections, the revision's document) before measuring.
    measure(20, 1, bare.clone()).await?;
    measure(20, 1, start.clone()).await?;
    println!("ticket start, one client:");
    let (bare_one, bare_one_rate) = measure(options.tickets, 1, bare.clone()).await?;
    row("bare insert + enqueue", &bare_one, bare_one_rate);
    let (api_one, api_one_rate) = measure(options.tickets, 1, start.clone()).await?;
    row("POST /v1/tickets", &api_one, api_one_rate);
    println!(
        "  ratio (API / bare): p50 {:.2}x, throughput {:.2}x  (target <= 2x)",
        ms(percentile(&api_one, 0.5)) / ms(percentile(&bare_one, 0.5)),
        bare_one_rate / api_one_rate
    );
    println!("ticket start, {} clients:", options.clients);
    let (bare_many, bare_many_rate) = measure(options.tickets, options.clients, bare).await?;
    row("bare insert + enqueue", &bare_many, bare_many_rate);
    let (api_many, api_many_rate) = measure(options.tickets, options.clients, start).await?;
    row("POST /v1/tickets", &api_many, api_many_rate);
    println!(
        "  ratio (API / bare): p50 {:.2}x, throughput {:.2}x  (target <= 2x)",
        ms(percentile(&api_many, 0.5)) / ms(percentile(&bare_many, 0.5)),
        bare_many_rate / api_many_rate
    );

    // 2. Live subscribers.
    let notifier = RedisNotifier::connect(&redis, &prefix).await?;
    for subscribers in [1, options.subscribers] {
        let ticket = store
            .create_ticket(&NewTicket {
                flow: "work".into(),
                input: json!({"n": 0}),
                revision: revision.clone(),
                budget_micros: None,
            })
            .await?;
        let (lease, _) = store
            .claim(&ticket.id, "bench", Duration::from_secs(600))
            .await?
            .context("claiming the bench's ticket")?;
        let before = serve.rss()?;
        let (arrivals, mut arrived) = tokio::sync::mpsc::unbounded_channel::<(i64, Instant)>();
        let mut sockets = Vec::new();
        let url = format!(
            "{}/v1/tickets/{}/events/ws",
            serve.url.replace("http://", "ws://"),
            ticket.id
        );
        for _ in 0..subscribers {
            let mut request = url.as_str().into_client_request()?;
            request
                .headers_mut()
                .insert("authorization", format!("Bearer {TOKEN}").parse()?);
            let (socket, _) = tokio_tungstenite::connect_async(request).await?;
            let arrivals = arrivals.clone();
            sockets.push(tokio::spawn(async move {
                let (_, mut read) = socket.split();
                while let Some(Ok(message)) = read.next().await {
                    if let Message::Text(text) = message
                        && let Ok(event) = serde_json::from_str::<serde_json::Value>(&text)
                        && event["kind"] == "bench.tick"
                    {
                        let seq = event["seq"].as_i64().unwrap_or(0);
                        let _ = arrivals.send((seq, Instant::now()));
                    }
                }
            }));
        }
        // Every client has replayed the log so far (ticket.created, ticket.claimed): connected.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let connected = serve.rss()?;
        let mut sent: Vec<(i64, Instant)> = Vec::new();
        let mut latencies = Vec::new();
        for n in 0..options.events {
            let at = Instant::now();
            let event = store.record(&lease, "bench.tick", json!({"n": n})).await?;
            notifier
                .publish(&Notice {
                    ticket: ticket.id.clone(),
                    seq: event.seq,
                    kind: event.kind,
                })
                .await?;
            sent.push((event.seq, at));
            // One event at a time: each is delivered to every subscriber before the next.
            let mut got = 0;
            while got < subscribers {
                let (seq, when) = tokio::time::timeout(Duration::from_secs(30), arrived.recv())
                    .await
                    .context("a subscriber did not get an event within 30 s")?
                    .context("the subscribers stopped")?;
                let Some((_, at)) = sent.iter().find(|(s, _)| *s == seq) else {
                    continue;
                };
                latencies.push(when.duration_since(*at));
                if seq == event.seq {
                    got += 1;
                }
            }
        }
        latencies.sort();
        let per = connected.saturating_sub(before) as f64 / subscribers as f64;
        println!(
            "{subscribers} WebSocket subscriber(s), {} events: delivery p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; serve's RSS {:.1} MiB → {:.1} MiB ({:.1} KiB per subscriber)",
            options.events,
            ms(percentile(&latencies, 0.5)),
            ms(percentile(&latencies, 0.99)),
            ms(*latencies.last().unwrap_or(&Duration::ZERO)),
            before as f64 / 1048576.0,
            connected as f64 / 1048576.0,
            per / 1024.0
        );
        for socket in sockets {
            socket.abort();
        }
    }
    drop(serve);
    store.close().await;
    database.remove().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
