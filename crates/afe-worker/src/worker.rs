//! The worker loop: take an entry, claim its ticket, load its revision, replay the completed
//! nodes, run the rest through the executor, complete each in one transaction, finish. A
//! heartbeat keeps the lease (and the queue entry) alive; a lost lease stops the work at once;
//! SIGTERM lets the current node finish within a grace period, then releases the ticket for the
//! next worker.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use afe_queue::{Delivery, Notifier, Queue};
use afe_store::{
    Completion, Event, Finish, Lease, NodeRun, NodeState, Store, StoreError, TicketState,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::Instrument;

use crate::executor::{Journal, NodeCall, NodeError, NodeExecutor, Wallet};
use crate::flow::{FrozenFlow, context, should_run};

#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// This worker's name; each of its slots consumes as `NAME:SLOT`.
    pub id: String,
    /// How long a claim lasts without a heartbeat (the heartbeat runs every third of it).
    pub lease_ttl: Duration,
    /// How long one wait for a queue entry lasts.
    pub poll_wait: Duration,
    /// How often the store is asked for tickets that need a worker but may have no entry.
    pub sweep_every: Duration,
    /// A queued ticket this old is requeued by the sweep (its entry may have been lost).
    pub requeue_queued_after: Duration,
    /// After SIGTERM, how long the current node may take before it is abandoned (it stays
    /// started and is run again by the next worker).
    pub grace: Duration,
    /// Tickets worked on at once.
    pub concurrency: usize,
    /// The pause after a store or queue error before trying again.
    pub retry_pause: Duration,
    /// Whether the worker requeues, at start and now and then, what the store says needs a
    /// worker; off for a worker that runs only the tickets it is given (`afe run --local`).
    pub sweep: bool,
    /// A node started this many times without completing fails its ticket (its sandbox kept
    /// going away, or its workers kept dying on it) instead of being tried forever.
    pub max_node_attempts: i32,
}

impl Default for WorkerSettings {
    fn default() -> WorkerSettings {
        WorkerSettings {
            id: format!("worker-{}", std::process::id()),
            lease_ttl: Duration::from_secs(30),
            poll_wait: Duration::from_secs(1),
            sweep_every: Duration::from_secs(5),
            requeue_queued_after: Duration::from_secs(60),
            grace: Duration::from_secs(30),
            concurrency: 1,
            retry_pause: Duration::from_millis(500),
            sweep: true,
            max_node_attempts: 5,
        }
    }
}

pub struct Worker {
    store: Arc<dyn Store>,
    queue: Arc<dyn Queue>,
    notifier: Arc<dyn Notifier>,
    executor: Arc<dyn NodeExecutor>,
    settings: WorkerSettings,
    revisions: Mutex<HashMap<String, Arc<Value>>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("settings", &self.settings)
            .finish()
    }
}

/// How work on one ticket ended, for this worker.
#[derive(Debug)]
enum Outcome {
    /// The ticket ended (done or failed), or was stopped by its budget: the entry is done.
    Ended,
    /// Shutting down: the ticket goes back for another worker.
    Release,
    /// Another worker holds it now; nothing more may be written.
    LeaseLost,
    /// The store or executor could not be reached; the entry stays, to be reclaimed.
    Trouble(String),
}

impl From<StoreError> for Outcome {
    fn from(err: StoreError) -> Outcome {
        match err {
            StoreError::LeaseLost { .. } => Outcome::LeaseLost,
            StoreError::BudgetExceeded { .. } => Outcome::Ended,
            other => Outcome::Trouble(other.to_string()),
        }
    }
}

/// Resolves once shutdown was asked for and `grace` has passed since.
async fn grace_over(mut shutdown: watch::Receiver<bool>, grace: Duration) {
    while !*shutdown.borrow() {
        if shutdown.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
    tokio::time::sleep(grace).await;
}

/// Resolves once the heartbeat found the lease lost.
async fn lost(mut lost: watch::Receiver<bool>) {
    while !*lost.borrow() {
        if lost.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Worker {
    pub fn new(
        store: Arc<dyn Store>,
        queue: Arc<dyn Queue>,
        notifier: Arc<dyn Notifier>,
        executor: Arc<dyn NodeExecutor>,
        settings: WorkerSettings,
    ) -> Worker {
        Worker {
            store,
            queue,
            notifier,
            executor,
            settings,
            revisions: Mutex::new(HashMap::new()),
        }
    }

    /// Works until `shutdown` turns true, then finishes (or releases) what it holds and returns.
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        self.sweep().await;
        let mut slots = tokio::task::JoinSet::new();
        for slot in 0..self.settings.concurrency.max(1) {
            let worker = self.clone();
            let shutdown = shutdown.clone();
            let consumer = format!("{}:{slot}", self.settings.id);
            slots.spawn(async move { worker.slot(consumer, shutdown).await });
        }
        let sweeper = {
            let worker = self.clone();
            let mut shutdown = shutdown.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(worker.settings.sweep_every) => worker.sweep().await,
                        _ = shutdown.changed() => if *shutdown.borrow() { break },
                    }
                }
            })
        };
        while slots.join_next().await.is_some() {}
        sweeper.abort();
        tracing::info!(worker = %self.settings.id, "stopped");
    }

    /// Requeues what the store says needs a worker (on start, and now and then): tickets running
    /// without a live lease, and queued tickets whose entry may have been lost.
    async fn sweep(&self) {
        if !self.settings.sweep {
            return;
        }
        match self
            .store
            .needing_work(self.settings.requeue_queued_after)
            .await
        {
            Ok(tickets) => {
                for ticket in tickets {
                    if let Err(err) = self.queue.enqueue(&ticket).await {
                        tracing::warn!(%ticket, error = %err, "cannot requeue");
                        break;
                    }
                }
            }
            Err(err) => tracing::warn!(error = %err, "cannot ask the store what needs a worker"),
        }
    }

    async fn slot(self: Arc<Self>, consumer: String, shutdown: watch::Receiver<bool>) {
        while !*shutdown.borrow() {
            match self.queue.next(&consumer, self.settings.poll_wait).await {
                Ok(Some(delivery)) => self.handle(&consumer, delivery, shutdown.clone()).await,
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(%consumer, error = %err, "queue unavailable; retrying");
                    tokio::time::sleep(self.settings.retry_pause).await;
                }
            }
        }
    }

    async fn publish(&self, events: &[Event]) {
        crate::executor::announce(self.notifier.as_ref(), events).await;
    }

    async fn handle(&self, consumer: &str, delivery: Delivery, shutdown: watch::Receiver<bool>) {
        let ticket = delivery.ticket.clone();
        let limit = self.queue.settings().max_deliveries;
        if delivery.deliveries > limit {
            let reason = format!(
                "DeadLettered: its queue entry was delivered {} times (the limit is {limit}); workers kept dying on it",
                delivery.deliveries
            );
            match self.store.fail_unheld(&ticket, &reason).await {
                Ok(events) => {
                    self.publish(&events).await;
                    if let Err(err) = self.queue.dead_letter(&delivery, &reason).await {
                        tracing::warn!(%ticket, error = %err, "cannot dead-letter");
                    }
                }
                Err(err) => {
                    tracing::warn!(%ticket, error = %err, "cannot fail a dead-lettered ticket")
                }
            }
            return;
        }
        let (lease, events) = match self
            .store
            .claim(&ticket, consumer, self.settings.lease_ttl)
            .await
        {
            Ok(Some(claimed)) => claimed,
            Ok(None) => {
                // Ended, paused, or held by a live worker: nothing to run from this entry. A
                // ticket paused while it was queued still has the sandbox of its last node,
                // marked as between nodes: marked paused now, it is kept however long the pause
                // lasts (the reaper judges by the mark alone).
                if let Ok(TicketState::Paused) = self.store.ticket(&ticket).await.map(|t| t.state) {
                    self.executor.ticket_paused(&ticket).await;
                }
                let _ = self.queue.ack(&delivery).await;
                return;
            }
            Err(err) => {
                tracing::warn!(%ticket, error = %err, "cannot claim; the entry will come back");
                tokio::time::sleep(self.settings.retry_pause).await;
                return;
            }
        };
        self.publish(&events).await;
        tracing::info!(%ticket, epoch = lease.epoch, %consumer, "claimed");
        let (lost_tx, lost_rx) = watch::channel(false);
        let lost_tx = Arc::new(lost_tx);
        let heartbeat = tokio::spawn(heartbeat(
            self.store.clone(),
            self.queue.clone(),
            lease.clone(),
            delivery.clone(),
            consumer.to_string(),
            self.settings.lease_ttl,
            lost_tx.clone(),
        ));
        let stopped = tokio::spawn(stopped_by_a_person(
            self.notifier.subscribe(),
            ticket.clone(),
            lost_tx,
        ));
        // The ticket's span: the parent of its nodes' in a trace (afe-telemetry exports them).
        let span = tracing::info_span!(
            target: "afe",
            "afe.ticket",
            afe.ticket = %lease.ticket,
            afe.lease_epoch = lease.epoch,
            afe.flow = tracing::field::Empty,
        );
        let outcome = self
            .run_ticket(&lease, lost_rx, shutdown)
            .instrument(span)
            .await;
        heartbeat.abort();
        stopped.abort();
        tracing::info!(%ticket, outcome = ?outcome, "left");
        match outcome {
            Outcome::Ended => {
                // Its sandbox goes with it (a crash before this leaves an orphan the reaper finds).
                self.executor.ticket_ended(&ticket).await;
                let _ = self.queue.ack(&delivery).await;
            }
            Outcome::Release => match self.store.release(&lease).await {
                Ok(events) => {
                    self.publish(&events).await;
                    // A fresh entry for the next worker, then this one is done.
                    if self.queue.enqueue(&ticket).await.is_ok() {
                        let _ = self.queue.ack(&delivery).await;
                    }
                }
                Err(err) => {
                    tracing::warn!(%ticket, error = %err, "cannot release; the lease will expire")
                }
            },
            Outcome::LeaseLost => match self.store.ticket(&ticket).await.map(|t| t.state) {
                // Cancelled (or paused) by a person, not taken over: nobody else will end it here.
                Ok(state) if state.is_terminal() => {
                    self.executor.ticket_ended(&ticket).await;
                    let _ = self.queue.ack(&delivery).await;
                }
                Ok(TicketState::Paused) => {
                    self.executor.ticket_paused(&ticket).await;
                    let _ = self.queue.ack(&delivery).await;
                }
                _ => {}
            },
            Outcome::Trouble(detail) => {
                tracing::warn!(%ticket, %detail, "left for another try");
                tokio::time::sleep(self.settings.retry_pause).await;
            }
        }
    }

    fn cached_revision(&self, hash: &str) -> Option<Arc<Value>> {
        self.revisions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(hash)
            .cloned()
    }

    async fn revision(&self, hash: &str) -> Result<Arc<Value>, StoreError> {
        if let Some(found) = self.cached_revision(hash) {
            return Ok(found);
        }
        // Revisions are immutable: once read, kept.
        let document = Arc::new(self.store.revision(hash).await?);
        self.revisions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(hash.to_string(), document.clone());
        Ok(document)
    }

    async fn fail(&self, lease: &Lease, reason: String) -> Outcome {
        match self.store.finish(lease, Finish::Failed { reason }).await {
            Ok(events) => {
                self.publish(&events).await;
                Outcome::Ended
            }
            Err(err) => err.into(),
        }
    }

    async fn run_ticket(
        &self,
        lease: &Lease,
        lost_rx: watch::Receiver<bool>,
        shutdown: watch::Receiver<bool>,
    ) -> Outcome {
        let ticket = match self.store.ticket(&lease.ticket).await {
            Ok(ticket) => ticket,
            Err(err) => return err.into(),
        };
        let document = match self.revision(&ticket.revision).await {
            Ok(document) => document,
            Err(err) => return err.into(),
        };
        tracing::Span::current().record("afe.flow", ticket.flow.as_str());
        let flow = match FrozenFlow::from_revision(&document, &ticket.flow) {
            Ok(flow) => Arc::new(flow),
            Err(why) => return self.fail(lease, format!("RevisionUnreadable: {why}")).await,
        };
        let mut runs: BTreeMap<String, NodeRun> = match self.store.node_runs(&ticket.id).await {
            Ok(runs) => runs.into_iter().map(|r| (r.node.clone(), r)).collect(),
            Err(err) => return err.into(),
        };
        for node in flow.order() {
            match runs.get(&node.id).map(|r| r.state) {
                // Never executed again: its output is replayed from the store.
                Some(NodeState::Completed | NodeState::Skipped) => continue,
                Some(NodeState::Failed) => {
                    return self.fail(lease, format!("NodeFailed: {}", node.id)).await;
                }
                Some(NodeState::Started) | None => {}
            }
            if *shutdown.borrow() {
                return Outcome::Release;
            }
            let seen = context(&flow, &ticket.input, &runs);
            let runs_it = match should_run(node, &runs, &seen) {
                Ok(runs_it) => runs_it,
                Err(why) => {
                    return self
                        .fail(lease, format!("WhenFailed: node {}: {why}", node.id))
                        .await;
                }
            };
            let completed = runs
                .values()
                .filter(|r| r.state == NodeState::Completed)
                .count();
            if !runs_it {
                let completion = Completion {
                    node: node.id.clone(),
                    state: NodeState::Skipped,
                    output: Value::Null,
                    settlements: Vec::new(),
                    checkpoint: None,
                    resume_token: format!("after:{}:{completed}", node.id),
                };
                match self.store.complete_node(lease, completion).await {
                    Ok(events) => self.publish(&events).await,
                    Err(err) => return err.into(),
                }
                runs.insert(node.id.clone(), skipped(&ticket.id, &node.id));
                continue;
            }
            let attempts = runs.get(&node.id).map_or(0, |r| r.attempts);
            if attempts >= self.settings.max_node_attempts {
                return self
                    .fail(
                        lease,
                        format!(
                            "NodeAttemptsExhausted: node {} was started {attempts} times and never completed (its sandbox kept going away, or its workers kept dying on it)",
                            node.id
                        ),
                    )
                    .await;
            }
            let (run, events) = match self.store.start_node(lease, &node.id).await {
                Ok(started) => started,
                Err(err) => return err.into(),
            };
            self.publish(&events).await;
            let call = NodeCall {
                ticket: ticket.clone(),
                flow: flow.clone(),
                revision: document.clone(),
                node: node.clone(),
                attempt: run.attempts,
                context: seen,
                wallet: Wallet {
                    store: self.store.clone(),
                    notifier: self.notifier.clone(),
                    lease: lease.clone(),
                    node: node.id.clone(),
                },
                journal: Journal {
                    store: self.store.clone(),
                    notifier: self.notifier.clone(),
                    lease: lease.clone(),
                },
            };
            let span = tracing::info_span!(
                target: "afe",
                "afe.node",
                afe.node = %node.id,
                afe.attempt = run.attempts,
                afe.outcome = tracing::field::Empty,
            );
            let executed = self.executor.execute(call).instrument(span.clone());
            let result = tokio::select! {
                result = executed => {
                    span.record("afe.outcome", if result.is_ok() { "completed" } else { "failed" });
                    result
                }
                _ = lost(lost_rx.clone()) => return Outcome::LeaseLost,
                _ = grace_over(shutdown.clone(), self.settings.grace) => return Outcome::Release,
            };
            match result {
                Ok(result) => {
                    let completion = Completion {
                        node: node.id.clone(),
                        state: NodeState::Completed,
                        output: result.output.clone(),
                        settlements: result.settlements,
                        checkpoint: result.checkpoint,
                        resume_token: format!("after:{}:{}", node.id, completed + 1),
                    };
                    match self.store.complete_node(lease, completion).await {
                        Ok(events) => self.publish(&events).await,
                        Err(err) => return err.into(),
                    }
                    runs.insert(
                        node.id.clone(),
                        NodeRun {
                            state: NodeState::Completed,
                            output: Some(result.output),
                            ..run
                        },
                    );
                }
                Err(NodeError::Failed(why)) => {
                    match self.store.fail_node(lease, &node.id, &why).await {
                        Ok(events) => self.publish(&events).await,
                        Err(err) => return err.into(),
                    }
                    return self
                        .fail(lease, format!("NodeFailed: {}: {why}", node.id))
                        .await;
                }
                Err(NodeError::SandboxGone(why)) => {
                    // The node stays started: the next holder restores the workspace from the
                    // last checkpoint into a new sandbox and runs it again.
                    let payload = json!({"node": node.id, "attempt": run.attempts, "why": why});
                    match self.store.record(lease, "sandbox.lost", payload).await {
                        Ok(event) => self.publish(&[event]).await,
                        Err(err) => return err.into(),
                    }
                    return Outcome::Release;
                }
                Err(NodeError::Unavailable(why)) => return Outcome::Trouble(why),
                Err(NodeError::Store(err)) => return err.into(),
            }
        }
        match self.store.finish(lease, Finish::Done).await {
            Ok(events) => {
                self.publish(&events).await;
                Outcome::Ended
            }
            Err(err) => err.into(),
        }
    }
}

fn skipped(ticket: &str, node: &str) -> NodeRun {
    NodeRun {
        ticket: ticket.to_string(),
        node: node.to_string(),
        state: NodeState::Skipped,
        output: Some(json!(null)),
        error: None,
        attempts: 0,
        started_at: 0,
        finished_at: None,
    }
}

/// Says the lease is lost as soon as the ticket's log announces it was cancelled or paused
/// through the API (which took the lease in the same statement), rather than at the next
/// heartbeat: a cancelled ticket should stop spending now.
async fn stopped_by_a_person(
    mut notices: tokio::sync::broadcast::Receiver<afe_queue::Notice>,
    ticket: String,
    lost: Arc<watch::Sender<bool>>,
) {
    loop {
        match notices.recv().await {
            Ok(notice)
                if notice.ticket == ticket
                    && matches!(notice.kind.as_str(), "ticket.cancelled" | "ticket.paused") =>
            {
                let _ = lost.send(true);
                return;
            }
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            // No more notices: the heartbeat still finds out.
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Extends the lease and keeps the queue entry fresh every third of the lease; on `LeaseLost`
/// says so and stops.
async fn heartbeat(
    store: Arc<dyn Store>,
    queue: Arc<dyn Queue>,
    mut lease: Lease,
    delivery: Delivery,
    consumer: String,
    ttl: Duration,
    lost: Arc<watch::Sender<bool>>,
) {
    let every = ttl / 3;
    loop {
        tokio::time::sleep(every).await;
        match store.heartbeat(&lease, ttl).await {
            Ok(extended) => lease = extended,
            Err(StoreError::LeaseLost { .. }) => {
                let _ = lost.send(true);
                return;
            }
            Err(err) => {
                tracing::warn!(ticket = %lease.ticket, error = %err, "heartbeat failed; retrying")
            }
        }
        let _ = queue.touch(&consumer, &delivery).await;
    }
}
