//! Real worker processes over a real store and broker, for the crash tests: start `afe worker`,
//! create tickets, kill, stop, pause and resume workers, read what the scripted executor did.

#![allow(dead_code)] // each test binary uses a part

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod api;
pub mod restarts;

use afe_queue::{Queue, QueueSettings, RedisQueue};
use afe_store::{NewTicket, SqlStore, Store, Ticket};
use serde_json::{Value, json};

/// Which pair a test runs on.
#[derive(Clone, Debug)]
pub enum Pair {
    /// PostgreSQL (a fresh database on the server of the `postgres` admin URL) and Redis (the
    /// given URL, keys of the test's own).
    Servers { postgres: String, redis: String },
    /// SQLite and the in-process queue: each worker feeds its queue from the store.
    Embedded,
}

pub struct Engine {
    pub dir: PathBuf,
    pub store: Arc<SqlStore>,
    pub store_url: String,
    pub broker: String,
    pub prefix: String,
    pub queue: Option<RedisQueue>,
    database: Option<afe_testkit::TestDatabase>,
    pub workers: Vec<(String, Child)>,
    pub revision: String,
    script: PathBuf,
    pub calls: PathBuf,
    budget_usd: Option<f64>,
    /// Kept open: a server writes its address there first.
    outputs: Vec<std::process::ChildStdout>,
}

/// The token every `afe serve` of these tests needs.
pub const TOKEN: &str = "engine-test-token-0123456789abcdef";

/// A step the scripted executor wrote: `start|paid|done|fail TICKET NODE ATTEMPT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub step: String,
    pub ticket: String,
    pub node: String,
    pub attempt: u32,
}

pub const LEASE: &str = "1s";
pub const RECLAIM: &str = "1500ms";

impl Engine {
    /// A store and broker, the 3-node chain flow (`n1` → `n2` → `n3`) stored as a revision, and
    /// the scripted executor's steps per node (JSON of `afe_worker::Step`).
    pub async fn start(pair: Pair, steps: Value, budget_usd: Option<f64>) -> Engine {
        let dir = afe_testkit::scratch("afe-engine");
        let (store_url, database) = match &pair {
            Pair::Servers { postgres, .. } => {
                let db = afe_testkit::TestDatabase::create_on(postgres).await;
                (db.url.clone(), Some(db))
            }
            Pair::Embedded => (afe_testkit::sqlite_url(&dir), None),
        };
        let store = Arc::new(SqlStore::connect(&store_url).await.unwrap());
        let prefix = afe_testkit::unique("afe-test");
        let (broker, queue) = match pair {
            Pair::Servers { redis, .. } => {
                let queue = RedisQueue::connect(&redis, &prefix, QueueSettings::default())
                    .await
                    .unwrap_or_else(|err| {
                        panic!("Redis at {redis}: {err}; run `bash .ci/install`")
                    });
                (redis, Some(queue))
            }
            Pair::Embedded => ("embedded".to_string(), None),
        };
        let revision = afe_testkit::chain_revision(3, budget_usd);
        store
            .put_revision(&revision.hash, &revision.normalized)
            .await
            .unwrap();
        let calls = dir.join("calls");
        let script = dir.join("script.json");
        std::fs::write(
            &script,
            json!({"calls_file": calls, "nodes": steps}).to_string(),
        )
        .unwrap();
        Engine {
            dir,
            store,
            store_url,
            broker,
            prefix,
            queue,
            database,
            workers: Vec::new(),
            revision: revision.hash,
            script,
            calls,
            budget_usd,
            outputs: Vec::new(),
        }
    }

    /// The config folder `afe serve -c` publishes: the same chain flow as the stored revision.
    pub fn config_dir(&self) -> PathBuf {
        let config = self.dir.join("config");
        if !config.exists() {
            std::fs::create_dir_all(&config).unwrap();
            afe_testkit::chain_config(&config, 3, self.budget_usd);
        }
        config
    }

    /// Starts `afe serve NAME -c DIR/config` on the engine's store and broker, on a port of its
    /// own; its base URL. Its log goes to DIR/NAME.log.
    pub fn serve(&mut self, name: &str) -> String {
        use std::io::BufRead;
        let config = self.config_dir();
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_afe"))
            .args(["serve", "--listen", "127.0.0.1:0", "--watch-every", "200ms"])
            .arg("-c")
            .arg(&config)
            .args(["--store", &self.store_url, "--broker", &self.broker])
            .args(["--prefix", &self.prefix])
            .env("AFE_API_TOKEN", TOKEN)
            .env("AFE_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        self.outputs.push(stdout.into_inner());
        self.workers.push((name.to_string(), child));
        line.trim()
            .strip_prefix("afe serve: listening on ")
            .unwrap_or_else(|| panic!("afe serve said {line:?}\n{}", self.log(name)))
            .to_string()
    }

    pub async fn tickets(&self, count: usize) -> Vec<String> {
        let mut ids = Vec::new();
        let budget = self
            .store
            .revision(&self.revision)
            .await
            .unwrap()
            .pointer("/flows/work/budget/usd")
            .and_then(Value::as_f64)
            .map(afe_store::usd_to_micros);
        for n in 0..count {
            let ticket = self
                .store
                .create_ticket(&NewTicket {
                    flow: "work".into(),
                    input: json!({"n": n}),
                    revision: self.revision.clone(),
                    budget_micros: budget,
                })
                .await
                .unwrap();
            if let Some(queue) = &self.queue {
                queue.enqueue(&ticket.id).await.unwrap();
            }
            ids.push(ticket.id);
        }
        ids
    }

    /// Starts `afe worker NAME`; its log goes to DIR/NAME.log.
    pub fn worker(&mut self, name: &str, extra: &[&str]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let requeue = if self.queue.is_some() { "3s" } else { "0s" };
        let child = Command::new(env!("CARGO_BIN_EXE_afe"))
            .args([
                "worker",
                "--id",
                name,
                "--store",
                &self.store_url,
                "--broker",
                &self.broker,
            ])
            .args(["--prefix", &self.prefix, "--executor", "scripted"])
            .arg("--script")
            .arg(&self.script)
            .args(["--lease-ttl", LEASE, "--reclaim-after", RECLAIM])
            .args(["--sweep-every", "300ms", "--requeue-queued-after", requeue])
            .args(extra)
            .env("AFE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.workers.push((name.to_string(), child));
    }

    pub fn pid(&self, name: &str) -> u32 {
        self.workers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.id())
            .unwrap()
    }

    pub fn signal(&self, name: &str, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid(name).to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {name}");
    }

    /// Waits for a worker to exit; its exit status.
    pub async fn exited(&mut self, name: &str, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            let child = &mut self.workers.iter_mut().find(|(n, _)| n == name).unwrap().1;
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not exit within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    pub fn calls(&self) -> Vec<Call> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let mut parts = line.split(' ');
                Some(Call {
                    step: parts.next()?.to_string(),
                    ticket: parts.next()?.to_string(),
                    node: parts.next()?.to_string(),
                    attempt: parts.next()?.parse().ok()?,
                })
            })
            .collect()
    }

    pub fn count(&self, step: &str, ticket: &str, node: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.step == step && c.ticket == ticket && c.node == node)
            .count()
    }

    /// Waits until the scripted executor wrote `step` for the node (a liveness bound, not a
    /// timing claim: the test fails if it never happens).
    pub async fn wait_for(&self, step: &str, ticket: &str, node: &str, attempt: u32) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let wanted = Call {
            step: step.into(),
            ticket: ticket.into(),
            node: node.into(),
            attempt,
        };
        while !self.calls().contains(&wanted) {
            assert!(
                Instant::now() < deadline,
                "never saw {wanted:?}; calls: {:?}\n{}",
                self.calls(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn logs(&self) -> String {
        self.workers
            .iter()
            .map(|(n, _)| format!("--- {n}\n{}", self.log(n)))
            .collect()
    }

    /// Waits until every ticket has ended; returns them.
    pub async fn ended(&self, ids: &[String]) -> Vec<Ticket> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut tickets = Vec::new();
            for id in ids {
                // The store may be restarting under the test too: ask again later.
                if let Ok(ticket) = self.store.ticket(id).await {
                    tickets.push(ticket);
                }
            }
            if tickets.len() == ids.len() && tickets.iter().all(|t| t.state.is_terminal()) {
                return tickets;
            }
            assert!(
                Instant::now() < deadline,
                "tickets did not end: {:?}\n{}",
                tickets.iter().map(|t| (&t.id, t.state)).collect::<Vec<_>>(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn close(mut self) {
        self.stop_workers();
        self.store.close().await;
        if let Some(db) = self.database.take() {
            db.remove().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Engine {
    fn stop_workers(&mut self) {
        for (_, child) in &mut self.workers {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.workers.clear();
    }
}

/// A test that fails before `close` still leaves no worker process behind.
impl Drop for Engine {
    fn drop(&mut self) {
        self.stop_workers();
    }
}
