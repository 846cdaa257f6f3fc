//! What runs a node. The real node kinds (git, agent, deep, acp, exec) come with the sandbox; the
//! worker only needs this contract, and its tests a scripted executor.

use std::sync::Arc;

use afe_config::kinds::FlowNode;
use afe_queue::{Notice, Notifier};
use afe_store::{Event, Lease, NewCheckpoint, Reservation, Settlement, Store, StoreError, Ticket};
use async_trait::async_trait;
use serde_json::Value;

use crate::flow::FrozenFlow;

/// One execution of one node.
pub struct NodeCall {
    pub ticket: Ticket,
    /// The ticket's flow as its revision froze it (its sandbox among the rest).
    pub flow: Arc<FrozenFlow>,
    /// The ticket's whole revision (its agents, its schemas), as normalized.
    pub revision: Arc<Value>,
    pub node: FlowNode,
    /// 1 the first time; more when an earlier attempt was interrupted (a crash, a lost lease)
    /// before it completed. A node with outside effects reconciles instead of repeating them.
    pub attempt: i32,
    /// The input and the outputs of completed nodes (see `flow::context`).
    pub context: Value,
    pub wallet: Wallet,
    pub journal: Journal,
}

impl std::fmt::Debug for NodeCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCall")
            .field("ticket", &self.ticket.id)
            .field("node", &self.node.id)
            .field("attempt", &self.attempt)
            .finish()
    }
}

/// The node's access to the ticket's budget: every paid call is reserved here first, its
/// generation kept as soon as it has one, and settled with what the provider reported. Each
/// movement is a ticket event, announced after its commit.
#[derive(Clone)]
pub struct Wallet {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) notifier: Arc<dyn Notifier>,
    pub(crate) lease: Lease,
    pub(crate) node: String,
}

impl std::fmt::Debug for Wallet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wallet").field("node", &self.node).finish()
    }
}

impl Wallet {
    /// Sets money aside before a paid call; `BudgetExceeded` stops the ticket.
    pub async fn reserve(
        &self,
        provider: &str,
        usd_micros: i64,
    ) -> Result<Reservation, StoreError> {
        let reservation = self
            .store
            .reserve(&self.lease, &self.node, provider, usd_micros)
            .await?;
        announce(self.notifier.as_ref(), &reservation.events).await;
        Ok(reservation)
    }

    /// Keeps the provider's generation id with `reservation` the moment the call has one.
    pub async fn note_generation(
        &self,
        reservation: i64,
        generation: &str,
    ) -> Result<(), StoreError> {
        self.store
            .note_generation(&self.lease, reservation, generation)
            .await
    }

    /// Settles reservations now (a tool loop's turn, a call settled later) rather than with the
    /// node's completion.
    pub async fn settle(&self, settlements: &[Settlement]) -> Result<(), StoreError> {
        let events = self.store.settle(&self.lease, settlements).await?;
        announce(self.notifier.as_ref(), &events).await;
        Ok(())
    }

    /// Records what an outside agent reports it has spent ([`Store::spent`]).
    pub async fn spent(&self, provider: &str, usd_micros: i64) -> Result<(), StoreError> {
        let events = self
            .store
            .spent(&self.lease, &self.node, provider, usd_micros)
            .await?;
        announce(self.notifier.as_ref(), &events).await;
        Ok(())
    }

    /// The ticket's ledger.
    pub async fn ledger(&self) -> Result<Vec<afe_store::LedgerEntry>, StoreError> {
        self.store.ledger(&self.lease.ticket).await
    }

    /// Journals turn `turn` of this node with the settlements of what it paid for, in one
    /// transaction, and announces `event` with them.
    pub async fn save_turn(
        &self,
        turn: i64,
        payload: &Value,
        settlements: &[Settlement],
        event: (&str, Value),
    ) -> Result<(), StoreError> {
        let events = self
            .store
            .save_turn(&self.lease, &self.node, turn, payload, settlements, event)
            .await?;
        announce(self.notifier.as_ref(), &events).await;
        Ok(())
    }

    /// The turns this node journaled before (an earlier attempt's), in order.
    pub async fn turns(&self) -> Result<Vec<afe_store::Turn>, StoreError> {
        self.store.turns(&self.lease.ticket, &self.node).await
    }

    /// The node this wallet pays for.
    pub fn node(&self) -> &str {
        &self.node
    }
}

/// Announces committed events; subscribers catch up from the store, so a missed notice delays,
/// never loses.
pub(crate) async fn announce(notifier: &dyn Notifier, events: &[Event]) {
    for event in events {
        let notice = Notice {
            ticket: event.ticket.clone(),
            seq: event.seq,
            kind: event.kind.clone(),
        };
        let _ = notifier.publish(&notice).await;
    }
}

/// The node's way to add to its ticket's events while it runs (what its sandbox's proxy decided,
/// say): each written under the worker's lease, then announced.
#[derive(Clone)]
pub struct Journal {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) notifier: Arc<dyn Notifier>,
    pub(crate) lease: Lease,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("ticket", &self.lease.ticket)
            .finish()
    }
}

impl Journal {
    /// Appends an event of `kind` to the ticket's log and announces it.
    pub async fn record(&self, kind: &str, payload: Value) -> Result<Event, StoreError> {
        let event = self.store.record(&self.lease, kind, payload).await?;
        announce(self.notifier.as_ref(), std::slice::from_ref(&event)).await;
        Ok(event)
    }
}

/// What a node produced, committed with its completion.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeResult {
    pub output: Value,
    /// What each reservation really cost.
    pub settlements: Vec<Settlement>,
    /// The workspace after the node, when it wrote files.
    pub checkpoint: Option<NewCheckpoint>,
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node itself failed (a command exited non-zero, a model refused): the ticket fails.
    #[error("{0}")]
    Failed(String),
    /// The ticket's sandbox went away under the node: what is left of it was removed, and the
    /// ticket goes back to the queue to be restored from its last checkpoint into a new one.
    #[error("{0}")]
    SandboxGone(String),
    /// Something the node needs is unavailable for now (the sandbox platform): the ticket is left
    /// for another try.
    #[error("{0}")]
    Unavailable(String),
    /// The store refused (budget exceeded, lease lost) or is unreachable.
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[async_trait]
pub trait NodeExecutor: Send + Sync {
    async fn execute(&self, call: NodeCall) -> Result<NodeResult, NodeError>;

    /// The ticket ended (done, failed, cancelled): whatever the executor keeps for it (its
    /// sandbox) can go.
    async fn ticket_ended(&self, _ticket: &str) {}

    /// The ticket was paused by a person: whatever the executor keeps for it stays, marked so
    /// that a reaper keeps it too.
    async fn ticket_paused(&self, _ticket: &str) {}
}
