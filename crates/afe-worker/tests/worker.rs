//! The worker in process, on both pairs (PostgreSQL + Redis, SQLite + in-process queue): a flow
//! runs to done with every event published live after its commit; a ticket whose queue entry
//! keeps being delivered to workers that die is dead-lettered and fails; a ticket left running
//! without a live lease and without a queue entry is found and finished by a worker that starts.

use std::sync::Arc;
use std::time::Duration;

use afe_queue::{
    EmbeddedNotifier, EmbeddedQueue, Notifier, Queue, QueueSettings, RedisNotifier, RedisQueue,
};
use afe_store::{Admin, NewTicket, SqlStore, Store, TicketState};
use afe_worker::{
    NodeCall, NodeError, NodeExecutor, NodeResult, Script, ScriptedExecutor, Worker, WorkerSettings,
};
use serde_json::json;

struct Pair {
    store: Arc<SqlStore>,
    queue: Arc<dyn Queue>,
    notifier: Arc<dyn Notifier>,
    database: Option<afe_testkit::TestDatabase>,
    dir: std::path::PathBuf,
    revision: String,
}

/// Seconds, not milliseconds: no stall of a busy machine between a delivery and its touch passes
/// for quiet. Where a test needs an entry reclaimed, it asks until it is.
const SETTINGS: QueueSettings = QueueSettings {
    reclaim_after: Duration::from_secs(2),
    max_deliveries: 2,
};

impl Pair {
    async fn servers() -> Pair {
        let db = afe_testkit::TestDatabase::create().await;
        let prefix = afe_testkit::unique("afe-test");
        let url = afe_testkit::redis_url();
        let store = SqlStore::connect(&db.url).await.unwrap();
        Pair::with(
            store,
            Arc::new(RedisQueue::connect(&url, &prefix, SETTINGS).await.unwrap()),
            Arc::new(RedisNotifier::connect(&url, &prefix).await.unwrap()),
            Some(db),
        )
        .await
    }

    async fn embedded() -> Pair {
        let dir = afe_testkit::scratch("afe-worker");
        let store = SqlStore::connect(&afe_testkit::sqlite_url(&dir))
            .await
            .unwrap();
        Pair::with(
            store,
            Arc::new(EmbeddedQueue::new(SETTINGS)),
            Arc::new(EmbeddedNotifier::default()),
            None,
        )
        .await
    }

    async fn with(
        store: SqlStore,
        queue: Arc<dyn Queue>,
        notifier: Arc<dyn Notifier>,
        database: Option<afe_testkit::TestDatabase>,
    ) -> Pair {
        let revision = afe_testkit::chain_revision(3, None);
        store
            .put_revision(&revision.hash, &revision.normalized)
            .await
            .unwrap();
        Pair {
            store: Arc::new(store),
            queue,
            notifier,
            database,
            dir: afe_testkit::scratch("afe-worker-calls"),
            revision: revision.hash,
        }
    }

    async fn ticket(&self) -> String {
        self.store
            .create_ticket(&NewTicket {
                flow: "work".into(),
                input: json!({"n": 1}),
                revision: self.revision.clone(),
                budget_micros: None,
            })
            .await
            .unwrap()
            .id
    }

    /// A worker in this process; stop it by sending `true`.
    fn worker(
        &self,
    ) -> (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        self.scripted_worker(Default::default())
    }

    /// A worker whose scripted executor does `nodes`' steps.
    fn scripted_worker(
        &self,
        nodes: std::collections::BTreeMap<String, afe_worker::Step>,
    ) -> (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let script = Script {
            calls_file: self.dir.join("calls"),
            default: Default::default(),
            nodes,
            workspaces: None,
        };
        self.worker_with(Arc::new(ScriptedExecutor::new(script)))
    }

    /// A worker in this process running nodes with `executor`.
    fn worker_with(
        &self,
        executor: Arc<dyn NodeExecutor>,
    ) -> (
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let worker = Arc::new(Worker::new(
            self.store.clone(),
            self.queue.clone(),
            self.notifier.clone(),
            executor,
            WorkerSettings {
                id: "in-process".into(),
                lease_ttl: Duration::from_secs(6),
                poll_wait: Duration::from_millis(100),
                sweep_every: Duration::from_millis(200),
                requeue_queued_after: Duration::from_secs(30),
                retry_pause: Duration::from_millis(50),
                ..WorkerSettings::default()
            },
        ));
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        (stop, tokio::spawn(worker.run(shutdown)))
    }

    async fn ended(&self, id: &str) -> afe_store::Ticket {
        for _ in 0..600 {
            let ticket = self.store.ticket(id).await.unwrap();
            if ticket.state.is_terminal() {
                return ticket;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("ticket {id} did not end");
    }

    async fn close(self) {
        self.store.close().await;
        if let Some(db) = self.database {
            db.remove().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

macro_rules! on_both_pairs {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres_and_redis() {
                super::$name(super::Pair::servers().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite_and_embedded() {
                super::$name(super::Pair::embedded().await).await;
            }
        }
    )+};
}

on_both_pairs!(
    a_lost_sandbox_requeues_the_ticket_and_the_node_runs_again,
    a_node_whose_sandbox_keeps_going_away_fails_its_ticket,
    a_flow_runs_to_done_and_every_event_is_published_after_its_commit,
    an_entry_delivered_too_often_is_dead_lettered_and_its_ticket_fails,
    a_starting_worker_requeues_a_ticket_running_without_a_live_lease,
    a_false_when_skips_its_node_and_what_needs_it_and_checkpoints_are_kept,
    a_ticket_cancelled_mid_node_stops_its_worker_and_loses_its_sandbox,
    a_ticket_paused_mid_node_runs_that_node_again_when_resumed,
    a_ticket_paused_while_queued_has_its_sandbox_marked_paused_by_the_worker_that_finds_it,
);

async fn a_flow_runs_to_done_and_every_event_is_published_after_its_commit(pair: Pair) {
    let mut notices = pair.notifier.subscribe();
    let id = pair.ticket().await;
    pair.queue.enqueue(&id).await.unwrap();
    let (stop, worker) = pair.worker();
    let ticket = pair.ended(&id).await;
    assert_eq!(ticket.state, TicketState::Done);
    let stored = pair.store.events(&id, 0, 1000).await.unwrap();
    let mut heard = Vec::new();
    while heard.last().map(|(_, kind): &(i64, String)| kind.as_str()) != Some("ticket.done") {
        let notice = tokio::time::timeout(Duration::from_secs(10), notices.recv())
            .await
            .expect("every event is published")
            .unwrap();
        // Published after commit: what a notice names is already readable.
        assert!(
            pair.store
                .events(&id, notice.seq - 1, 1)
                .await
                .unwrap()
                .len()
                == 1,
            "notice {notice:?} before its event was readable"
        );
        heard.push((notice.seq, notice.kind));
    }
    // Every event but the creation (written by whoever made the ticket) was published, in order.
    let expected: Vec<(i64, String)> = stored
        .iter()
        .filter(|e| e.kind != "ticket.created")
        .map(|e| (e.seq, e.kind.clone()))
        .collect();
    assert_eq!(heard, expected);
    stop.send(true).unwrap();
    worker.await.unwrap();
    pair.close().await;
}

async fn an_entry_delivered_too_often_is_dead_lettered_and_its_ticket_fails(pair: Pair) {
    let id = pair.ticket().await;
    pair.queue.enqueue(&id).await.unwrap();
    // Two workers take the entry and die before acknowledging it: the second gets it once it
    // has been quiet long enough to be reclaimed.
    for dead in ["dead-1", "dead-2"] {
        let mut delivery = None;
        for _ in 0..60 {
            delivery = pair.queue.next(dead, Duration::from_secs(1)).await.unwrap();
            if delivery.is_some() {
                break;
            }
        }
        let delivery = delivery.expect("the entry is delivered");
        assert_eq!(delivery.ticket, id);
    }
    // The third delivery passes the limit of two.
    let (stop, worker) = pair.worker();
    let ticket = pair.ended(&id).await;
    assert_eq!(ticket.state, TicketState::Failed);
    let reason = ticket.reason.unwrap();
    assert!(reason.starts_with("DeadLettered: "), "{reason}");
    let dead = pair.queue.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].ticket.as_str(), dead[0].deliveries),
        (id.as_str(), 3)
    );
    assert!(
        pair.store.node_runs(&id).await.unwrap().is_empty(),
        "never run"
    );
    stop.send(true).unwrap();
    worker.await.unwrap();
    pair.close().await;
}

async fn a_starting_worker_requeues_a_ticket_running_without_a_live_lease(pair: Pair) {
    let id = pair.ticket().await;
    // A worker claimed it and died; the queue never had (or lost) its entry.
    let (lease, _) = pair
        .store
        .claim(&id, "gone", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    pair.store.start_node(&lease, "n1").await.unwrap();
    // Its lease ends when the test says (the database's clock judges leases; sleeping past a
    // short one races it).
    sqlx::query("UPDATE afe_tickets SET lease_expires_at = 0 WHERE id = $1")
        .bind(id.clone())
        .execute(pair.store.pool())
        .await
        .unwrap();
    assert_eq!(pair.queue.depth().await.unwrap(), 0);
    let (stop, worker) = pair.worker();
    let ticket = pair.ended(&id).await;
    assert_eq!(ticket.state, TicketState::Done);
    let runs = pair.store.node_runs(&id).await.unwrap();
    assert_eq!(runs.iter().find(|r| r.node == "n1").unwrap().attempts, 2);
    stop.send(true).unwrap();
    worker.await.unwrap();
    pair.close().await;
}

async fn a_false_when_skips_its_node_and_what_needs_it_and_checkpoints_are_kept(pair: Pair) {
    // A flow whose `review` runs only for urgent jobs, and `merge` needs it.
    let dir = afe_testkit::scratch("afe-when");
    std::fs::write(
        dir.join("config.yaml"),
        r#"
apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {name: job-request}
spec:
  fields: {urgent: boolean}
---
apiVersion: afe.dev/v1alpha1
kind: Flow
metadata: {name: gated}
spec:
  input: job-request
  nodes:
    - {id: build, exec: [make]}
    - {id: review, exec: [review], needs: [build], when: "job_request.urgent && build.attempt == 1"}
    - {id: merge, exec: [merge], needs: [review]}
    - {id: report, exec: [report], needs: [build]}
"#,
    )
    .unwrap();
    let config = afe_config::load_folder(&dir).unwrap_or_else(|e| panic!("{e}"));
    let revision = afe_config::Revision::of(&config);
    pair.store
        .put_revision(&revision.hash, &revision.normalized)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for urgent in [false, true] {
        let ticket = pair
            .store
            .create_ticket(&NewTicket {
                flow: "gated".into(),
                input: json!({"urgent": urgent}),
                revision: revision.hash.clone(),
                budget_micros: None,
            })
            .await
            .unwrap();
        pair.queue.enqueue(&ticket.id).await.unwrap();
        ids.push(ticket.id);
    }
    let build = afe_worker::Step {
        checkpoint_bytes: 20_000,
        ..Default::default()
    };
    let (stop, worker) = pair.scripted_worker([("build".to_string(), build)].into());
    for id in &ids {
        assert_eq!(pair.ended(id).await.state, TicketState::Done);
    }
    let states = |runs: Vec<afe_store::NodeRun>| -> Vec<(String, afe_store::NodeState)> {
        let mut out: Vec<_> = runs.into_iter().map(|r| (r.node, r.state)).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    };
    use afe_store::NodeState::{Completed, Skipped};
    assert_eq!(
        states(pair.store.node_runs(&ids[0]).await.unwrap()),
        [
            ("build".to_string(), Completed),
            ("merge".to_string(), Skipped),
            ("report".to_string(), Completed),
            ("review".to_string(), Skipped),
        ]
    );
    assert_eq!(
        states(pair.store.node_runs(&ids[1]).await.unwrap()),
        [
            ("build".to_string(), Completed),
            ("merge".to_string(), Completed),
            ("report".to_string(), Completed),
            ("review".to_string(), Completed),
        ]
    );
    // The build's workspace was checkpointed with its completion, and reads back whole.
    for id in &ids {
        let checkpoints = pair.store.checkpoints(id).await.unwrap();
        assert_eq!(checkpoints.len(), 1);
        assert_eq!(checkpoints[0].node, "build");
        assert_eq!(
            pair.store.bundle(checkpoints[0].id).await.unwrap().len(),
            20_000
        );
    }
    stop.send(true).unwrap();
    worker.await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    pair.close().await;
}

/// What a test executor writes down: every node it runs (with its attempt) and every ticket it
/// is told has ended.
#[derive(Default)]
struct Notes {
    ran: std::sync::Mutex<Vec<(String, i32)>>,
    ended: std::sync::Mutex<Vec<String>>,
    paused: std::sync::Mutex<Vec<String>>,
}

impl Notes {
    fn ran(&self, call: &NodeCall) {
        self.ran
            .lock()
            .unwrap()
            .push((call.node.id.clone(), call.attempt));
    }

    fn ended(&self, ticket: &str) {
        self.ended.lock().unwrap().push(ticket.to_string());
    }

    /// Waits (up to a minute) until the worker said `ticket` was paused.
    async fn wait_paused(&self, ticket: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.paused.lock().unwrap().iter().any(|t| t == ticket) {
            assert!(
                std::time::Instant::now() < deadline,
                "the worker never let {ticket} go as paused"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// An executor whose sandbox goes away during node `n2` on its first `lose` attempts.
struct Losing {
    lose: i32,
    notes: Notes,
}

#[async_trait::async_trait]
impl NodeExecutor for Losing {
    async fn execute(&self, call: NodeCall) -> Result<NodeResult, NodeError> {
        self.notes.ran(&call);
        if call.node.id == "n2" && call.attempt <= self.lose {
            return Err(NodeError::SandboxGone("the container was killed".into()));
        }
        Ok(NodeResult::default())
    }

    async fn ticket_ended(&self, ticket: &str) {
        self.notes.ended(ticket);
    }
}

fn losing(lose: i32) -> Arc<Losing> {
    Arc::new(Losing {
        lose,
        notes: Notes::default(),
    })
}

/// The sandbox goes away during n2: the loss is recorded, the ticket goes back to the queue, n2
/// runs again (attempt 2) and the ticket finishes; n1 never runs again; the executor hears once
/// that the ticket ended.
async fn a_lost_sandbox_requeues_the_ticket_and_the_node_runs_again(pair: Pair) {
    let executor = losing(1);
    let (stop, worker) = pair.worker_with(executor.clone());
    let id = pair.ticket().await;
    pair.queue.enqueue(&id).await.unwrap();
    let ended = pair.ended(&id).await;
    assert_eq!(ended.state, TicketState::Done, "{:?}", ended.reason);
    let _ = stop.send(true);
    worker.await.unwrap();
    let ran = executor.notes.ran.lock().unwrap().clone();
    let n = |node: &str| ran.iter().filter(|(n, _)| n == node).count();
    assert_eq!((n("n1"), n("n2"), n("n3")), (1, 2, 1), "{ran:?}");
    let events = pair.store.events(&id, 0, 100).await.unwrap();
    let lost: Vec<_> = events.iter().filter(|e| e.kind == "sandbox.lost").collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].payload["node"], "n2");
    assert!(events.iter().any(|e| e.kind == "ticket.released"));
    assert_eq!(*executor.notes.ended.lock().unwrap(), [id]);
    pair.close().await;
}

/// A sandbox that goes away every time does not keep the ticket forever: after five starts of
/// the node the ticket fails, saying why, and the executor hears it ended.
async fn a_node_whose_sandbox_keeps_going_away_fails_its_ticket(pair: Pair) {
    let executor = losing(i32::MAX);
    let (stop, worker) = pair.worker_with(executor.clone());
    let id = pair.ticket().await;
    pair.queue.enqueue(&id).await.unwrap();
    let ended = pair.ended(&id).await;
    let _ = stop.send(true);
    worker.await.unwrap();
    assert_eq!(ended.state, TicketState::Failed);
    let reason = ended.reason.unwrap_or_default();
    assert!(
        reason.starts_with("NodeAttemptsExhausted: node n2"),
        "{reason}"
    );
    let runs = pair.store.node_runs(&id).await.unwrap();
    let n2 = runs.iter().find(|r| r.node == "n2").unwrap();
    assert_eq!(n2.attempts, 5);
    assert_eq!(*executor.notes.ended.lock().unwrap(), [id]);
    pair.close().await;
}

/// An executor whose node n2, on its first attempt, says it started and then never ends (a long
/// model call).
struct Stuck {
    started: tokio::sync::watch::Sender<bool>,
    notes: Notes,
}

#[async_trait::async_trait]
impl NodeExecutor for Stuck {
    async fn execute(&self, call: NodeCall) -> Result<NodeResult, NodeError> {
        self.notes.ran(&call);
        if call.node.id == "n2" && call.attempt == 1 {
            let _ = self.started.send(true);
            std::future::pending::<()>().await;
        }
        Ok(NodeResult::default())
    }

    async fn ticket_ended(&self, ticket: &str) {
        self.notes.ended(ticket);
    }

    async fn ticket_paused(&self, ticket: &str) {
        self.notes.paused.lock().unwrap().push(ticket.to_string());
    }
}

/// The ticket is in n2 for good; what a stop through the API does next is the test's.
async fn stuck_in_n2(
    pair: &Pair,
) -> (
    Arc<Stuck>,
    String,
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (started, mut in_n2) = tokio::sync::watch::channel(false);
    let executor = Arc::new(Stuck {
        started,
        notes: Notes::default(),
    });
    let (stop, worker) = pair.worker_with(executor.clone());
    let id = pair.ticket().await;
    pair.queue.enqueue(&id).await.unwrap();
    in_n2.wait_for(|started| *started).await.unwrap();
    (executor, id, stop, worker)
}

/// What the API does after a stop: publish the events it wrote.
async fn announce(pair: &Pair, events: &[afe_store::Event]) {
    for event in events {
        let notice = afe_queue::Notice {
            ticket: event.ticket.clone(),
            seq: event.seq,
            kind: event.kind.clone(),
        };
        pair.notifier.publish(&notice).await.unwrap();
    }
}

/// Cancelled while its node runs: the worker drops the node, writes nothing more, and removes
/// the ticket's sandbox; nothing runs after.
async fn a_ticket_cancelled_mid_node_stops_its_worker_and_loses_its_sandbox(pair: Pair) {
    let (executor, id, stop, worker) = stuck_in_n2(&pair).await;
    let (_, events) = pair.store.cancel(&id, "asked by a test").await.unwrap();
    announce(&pair, &events).await;
    let mut removed = false;
    for _ in 0..600 {
        removed = executor.notes.ended.lock().unwrap().contains(&id);
        if removed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(removed, "the worker removes a cancelled ticket's sandbox");
    let _ = stop.send(true);
    worker.await.unwrap();
    let ticket = pair.store.ticket(&id).await.unwrap();
    assert_eq!(ticket.state, TicketState::Cancelled);
    let ran = executor.notes.ran.lock().unwrap().clone();
    assert_eq!(ran, [("n1".to_string(), 1), ("n2".to_string(), 1)]);
    let last = pair.store.events(&id, 0, 100).await.unwrap();
    assert_eq!(last.last().unwrap().kind, "ticket.cancelled");
    pair.close().await;
}

/// Paused while its node runs, then resumed: the worker lets it go as paused (its sandbox kept and
/// marked so), the node runs again (attempt 2), the one before it does not, and the ticket
/// finishes.
async fn a_ticket_paused_mid_node_runs_that_node_again_when_resumed(pair: Pair) {
    let (executor, id, stop, worker) = stuck_in_n2(&pair).await;
    let (paused, events) = pair.store.pause(&id).await.unwrap();
    assert_eq!(paused.state, TicketState::Paused);
    announce(&pair, &events).await;
    executor.notes.wait_paused(&id).await;
    assert!(
        executor.notes.ended.lock().unwrap().is_empty(),
        "a paused ticket's sandbox is not removed"
    );
    let (_, events) = pair.store.resume(&id).await.unwrap();
    announce(&pair, &events).await;
    pair.queue.enqueue(&id).await.unwrap();
    let ended = pair.ended(&id).await;
    assert_eq!(ended.state, TicketState::Done, "{:?}", ended.reason);
    let _ = stop.send(true);
    worker.await.unwrap();
    let ran = executor.notes.ran.lock().unwrap().clone();
    let n = |node: &str| ran.iter().filter(|(n, _)| n == node).count();
    assert_eq!((n("n1"), n("n2"), n("n3")), (1, 2, 1), "{ran:?}");
    pair.close().await;
}

/// Paused while queued (no worker holds it): the worker that takes its queue entry finds it
/// paused, claims nothing, runs nothing, and marks its sandbox paused — so the operator's reaper,
/// which judges by that mark alone, keeps it however long the pause lasts.
async fn a_ticket_paused_while_queued_has_its_sandbox_marked_paused_by_the_worker_that_finds_it(
    pair: Pair,
) {
    let id = pair.ticket().await;
    let (paused, _) = pair.store.pause(&id).await.unwrap();
    assert_eq!(paused.state, TicketState::Paused);
    pair.queue.enqueue(&id).await.unwrap();
    let (started, _) = tokio::sync::watch::channel(false);
    let executor = Arc::new(Stuck {
        started,
        notes: Notes::default(),
    });
    let (stop, worker) = pair.worker_with(executor.clone());
    executor.notes.wait_paused(&id).await;
    let _ = stop.send(true);
    worker.await.unwrap();
    assert!(executor.notes.ran.lock().unwrap().is_empty(), "nothing ran");
    assert!(executor.notes.ended.lock().unwrap().is_empty());
    assert_eq!(
        pair.store.ticket(&id).await.unwrap().state,
        TicketState::Paused
    );
    pair.close().await;
}
