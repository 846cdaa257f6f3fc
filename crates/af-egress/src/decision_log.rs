//! The decision log: one JSON line per decision, in a bounded on-disk ring (two halves, the older
//! one dropped when the newer fills), so a long-running environment cannot fill the disk. Live
//! followers get each record as it is made.
//!
//! Lines are written in batches, not one by one: a decision waits in memory until the sidecar's
//! writer task, which wakes [`FLUSH_INTERVAL`] after a batch's first line, writes what has
//! gathered (an idle sidecar's writer sleeps), or until [`FLUSH_BYTES`] of them have, or until
//! someone reads the log (a query writes first, so it sees every decision made before it).
//! Appending one line to a file cost about 8 µs of the sidecar's CPU per request (the file system
//! updates the file's times and journals it on every write) and sat between hyper buffering a
//! response and sending it; a batch costs that once (as Envoy's and nginx's buffered access logs
//! do). What a hard kill of the sidecar can lose is the last interval's lines; a normal stop
//! writes them.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use af_runtime::{DecisionQuery, DecisionRecord, Verdict};
use tokio::sync::broadcast;

use crate::config::LogConfig;

/// The longest a decision waits in memory before the writer task writes it.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);

/// Decisions waiting to be written are written at once when they reach this size.
const FLUSH_BYTES: usize = 64 << 10;

/// The current half of the ring, its size (counting the lines not yet written) and those lines.
struct Current {
    file: File,
    size: u64,
    unwritten: Vec<u8>,
}

impl Current {
    /// Writes the lines waiting in memory to the current half. A batch that cannot be written is
    /// dropped (and the error returned to be reported), so a failing disk cannot grow memory.
    fn write_unwritten(&mut self) -> io::Result<()> {
        if self.unwritten.is_empty() {
            return Ok(());
        }
        let written = self.file.write_all(&self.unwritten);
        self.unwritten.clear();
        written
    }
}

struct Inner {
    path: PathBuf,
    older: PathBuf,
    /// Each half may grow to this; together they stay within the configured maximum.
    half_bytes: u64,
    current: Mutex<Current>,
    /// Followers' feed. Its ring holds shared records, not records: tokio fills every slot when
    /// the channel is made, and 1024 slots of whole records were 250 KiB resident from the start
    /// whether anyone followed or not (docs/performance.md).
    live: broadcast::Sender<Arc<DecisionRecord>>,
    counts: Mutex<BTreeMap<(String, Verdict), u64>>,
    /// Wakes the writer task when a line starts a new batch, so an idle sidecar's writer sleeps.
    batch_started: tokio::sync::Notify,
}

impl Inner {
    fn flush(&self) -> io::Result<()> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write_unwritten()
    }

    fn report(&self, err: &io::Error) {
        tracing::error!(error = %err, path = %self.path.display(), "cannot write the decision log");
    }
}

impl Drop for Inner {
    /// The last handle gone (the sidecar stopping): what is waiting is written.
    fn drop(&mut self) {
        if let Err(err) = self.flush() {
            self.report(&err);
        }
    }
}

/// A handle to the log; cheap to clone.
#[derive(Clone)]
pub struct DecisionLog(Arc<Inner>);

impl std::fmt::Debug for DecisionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionLog")
            .field("path", &self.0.path)
            .finish()
    }
}

impl DecisionLog {
    /// Opens (or creates) the log at the configured path. Its lines are written when they fill a
    /// batch, when it is read, flushed or dropped, and, once [`DecisionLog::write_every_interval`]
    /// runs, at least every [`FLUSH_INTERVAL`].
    pub fn open(config: &LogConfig) -> io::Result<DecisionLog> {
        if let Some(parent) = config.path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&config.path)?;
        let size = file.metadata()?.len();
        let mut older = config.path.clone().into_os_string();
        older.push(".1");
        Ok(DecisionLog(Arc::new(Inner {
            path: config.path.clone(),
            older: older.into(),
            half_bytes: config.max_bytes / 2,
            current: Mutex::new(Current {
                file,
                size,
                unwritten: Vec::new(),
            }),
            live: broadcast::channel(1024).0,
            counts: Mutex::new(BTreeMap::new()),
            batch_started: tokio::sync::Notify::new(),
        })))
    }

    /// Writes one record. A record that cannot be written is reported on the sidecar's own
    /// diagnostics and still counted and sent to followers: losing the disk must not stop the
    /// environment's traffic from being decided.
    pub fn record(&self, record: DecisionRecord) {
        let inner = &self.0;
        if let Err(err) = self.append(&record) {
            inner.report(&err);
        }
        *inner
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((record.protocol.clone(), record.verdict))
            .or_default() += 1;
        // Shared only when someone follows; no follower is not an error.
        if inner.live.receiver_count() > 0 {
            let _ = inner.live.send(Arc::new(record));
        }
    }

    fn append(&self, record: &DecisionRecord) -> io::Result<()> {
        let inner = &self.0;
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        let mut current = inner.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.size + line.len() as u64 > inner.half_bytes && current.size > 0 {
            // The ring turns: the current half, finished, becomes the older one, replacing it.
            current.write_unwritten()?;
            std::fs::rename(&inner.path, &inner.older)?;
            current.file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&inner.path)?;
            current.size = 0;
        }
        if current.unwritten.is_empty() {
            inner.batch_started.notify_one();
        }
        current.unwritten.extend_from_slice(&line);
        current.size += line.len() as u64;
        if current.unwritten.len() >= FLUSH_BYTES {
            current.write_unwritten()?;
        }
        Ok(())
    }

    /// Writes every decision made so far to the file.
    pub fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }

    /// The sidecar's writer task: [`FLUSH_INTERVAL`] after a batch starts, writes what has
    /// gathered (and, while no decision is waiting, sleeps). Runs for as long as the sidecar does.
    pub async fn write_every_interval(self) {
        loop {
            self.0.batch_started.notified().await;
            tokio::time::sleep(FLUSH_INTERVAL).await;
            if let Err(err) = self.0.flush() {
                self.0.report(&err);
            }
        }
    }

    /// The stored records that match, oldest first (every decision made before the call).
    pub fn query(&self, query: &DecisionQuery) -> io::Result<Vec<DecisionRecord>> {
        // A batch the disk refuses is reported; what the file holds is still worth reading.
        if let Err(err) = self.flush() {
            self.0.report(&err);
        }
        let mut out = Vec::new();
        for path in [&self.0.older, &self.0.path] {
            let file = match File::open(path) {
                Ok(file) => file,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            for line in BufReader::new(file).lines() {
                // A line cut by a crash mid-write is skipped, not fatal.
                if let Ok(record) = serde_json::from_str::<DecisionRecord>(&line?)
                    && matches(&record, query)
                {
                    out.push(record);
                }
            }
        }
        Ok(out)
    }

    /// Records as they are written, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<DecisionRecord>> {
        self.0.live.subscribe()
    }

    /// How many decisions were made, by protocol and verdict, since the sidecar started.
    pub fn counts(&self) -> BTreeMap<(String, Verdict), u64> {
        self.0
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Whether a record passes a query's filters.
pub fn matches(record: &DecisionRecord, query: &DecisionQuery) -> bool {
    query.verdict.is_none_or(|v| v == record.verdict)
        && query
            .host
            .as_ref()
            .is_none_or(|h| h.eq_ignore_ascii_case(&record.host))
        && query
            .since
            .as_ref()
            .is_none_or(|since| record.time.as_str() >= since.as_str())
}

/// A decision being made: the facts known at the start, finished with the verdict and the byte
/// counts when the exchange ends.
#[derive(Debug, Clone)]
pub struct Pending {
    record: DecisionRecord,
    started: Instant,
}

impl Pending {
    pub fn new(
        environment: &str,
        client: SocketAddr,
        protocol: &str,
        method: &str,
        host: &str,
        port: u16,
    ) -> Pending {
        Pending {
            record: DecisionRecord {
                time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                environment: environment.to_string(),
                client: client.ip().to_string(),
                protocol: protocol.to_string(),
                method: method.to_string(),
                host: host.to_string(),
                port,
                resolved: String::new(),
                verdict: Verdict::Deny,
                rule: String::new(),
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: 0,
            },
            started: Instant::now(),
        }
    }

    pub fn host(&self) -> &str {
        &self.record.host
    }

    pub fn set_resolved(&mut self, resolved: SocketAddr) {
        self.record.resolved = resolved.to_string();
    }

    /// Completes the record and writes it.
    pub fn finish(
        mut self,
        log: &DecisionLog,
        verdict: Verdict,
        rule: &str,
        bytes_up: u64,
        bytes_down: u64,
    ) {
        self.record.verdict = verdict;
        self.record.rule = rule.to_string();
        self.record.bytes_up = bytes_up;
        self.record.bytes_down = bytes_down;
        self.record.duration_ms =
            u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        log.record(self.record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_log(name: &str, max_bytes: u64) -> (DecisionLog, PathBuf) {
        let dir = std::env::temp_dir().join(format!("af-egress-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("decisions.jsonl");
        (
            DecisionLog::open(&LogConfig {
                path: path.clone(),
                max_bytes,
            })
            .unwrap(),
            dir,
        )
    }

    fn write(log: &DecisionLog, host: &str, verdict: Verdict) {
        Pending::new(
            "env",
            "10.0.0.5:1234".parse().unwrap(),
            "http",
            "GET",
            host,
            80,
        )
        .finish(log, verdict, "rule", 1, 2);
    }

    #[test]
    fn records_are_read_back_and_filtered() {
        let (log, dir) = temp_log("filter", 1 << 20);
        write(&log, "a.example", Verdict::Allow);
        write(&log, "b.example", Verdict::Deny);
        write(&log, "A.example", Verdict::Deny);
        let all = log.query(&DecisionQuery::default()).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].client, "10.0.0.5");
        let denied = log
            .query(&DecisionQuery {
                verdict: Some(Verdict::Deny),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(denied.len(), 2);
        let a = log
            .query(&DecisionQuery {
                host: Some("a.example".into()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(a.len(), 2, "host matching ignores case");
        assert_eq!(log.counts()[&("http".to_string(), Verdict::Deny)], 2);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn lines_on_disk(dir: &std::path::Path) -> String {
        std::fs::read_to_string(dir.join("decisions.jsonl")).unwrap_or_default()
    }

    /// Nobody reads the log: the writer task writes the decision by itself.
    #[tokio::test]
    async fn a_decision_reaches_the_file_without_a_query() {
        let (log, dir) = temp_log("interval", 1 << 20);
        let writer = tokio::spawn(log.clone().write_every_interval());
        write(&log, "waits.example", Verdict::Allow);
        // Bounded so that a writer that never writes fails the test instead of hanging it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !lines_on_disk(&dir).contains("waits.example") {
            assert!(Instant::now() < deadline, "the decision was never written");
            tokio::time::sleep(FLUSH_INTERVAL / 5).await;
        }
        writer.abort();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The sidecar stopping drops its last handle: what was waiting is written then.
    #[test]
    fn dropping_the_log_writes_what_is_waiting() {
        let (log, dir) = temp_log("drop", 1 << 20);
        for i in 0..50 {
            write(&log, &format!("last-{i}.example"), Verdict::Deny);
        }
        assert_eq!(lines_on_disk(&dir), "", "nothing written before the drop");
        drop(log);
        let on_disk = lines_on_disk(&dir);
        assert_eq!(on_disk.lines().count(), 50);
        assert!(on_disk.lines().last().unwrap().contains("last-49.example"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_ring_stays_within_its_bound_and_keeps_the_newest() {
        let max = 64 << 10;
        let (log, dir) = temp_log("ring", max);
        for i in 0..5000 {
            write(&log, &format!("host-{i}.example"), Verdict::Allow);
        }
        let on_disk: u64 = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(
            on_disk <= max,
            "{on_disk} bytes on disk for a {max}-byte ring"
        );
        let kept = log.query(&DecisionQuery::default()).unwrap();
        assert_eq!(kept.last().unwrap().host, "host-4999.example");
        assert!(kept.len() > 100 && kept.len() < 5000, "{}", kept.len());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
