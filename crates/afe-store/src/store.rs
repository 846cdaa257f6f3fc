//! The store's contract. Postgres is the source of truth (SQLite on one machine); a queue only
//! wakes workers. Everything a worker writes about a ticket goes through its [`Lease`] and fails
//! with `LeaseLost` once another worker has taken the ticket over.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::StoreError;
use crate::model::{
    Checkpoint, Completion, Event, Finish, Lease, LedgerEntry, NewTicket, NodeRun, Reservation,
    Settlement, Ticket, TicketId, Turn,
};

#[async_trait]
pub trait Store: Send + Sync {
    /// `postgres` or `sqlite`.
    fn backend(&self) -> &'static str;

    /// Stores a revision's normalized document under its hash; storing it again changes nothing.
    async fn put_revision(&self, hash: &str, document: &Value) -> Result<(), StoreError>;
    async fn revision(&self, hash: &str) -> Result<Value, StoreError>;

    /// A new ticket, `queued`, pinned to a stored revision.
    async fn create_ticket(&self, new: &NewTicket) -> Result<Ticket, StoreError>;
    async fn ticket(&self, id: &str) -> Result<Ticket, StoreError>;

    /// Takes the ticket when it is queued, or running without a live lease: a new epoch, `ttl`
    /// from now. Reservations of earlier epochs (a dead worker's) are released. `None` when
    /// someone else holds it or it has ended.
    async fn claim(
        &self,
        id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<(Lease, Vec<Event>)>, StoreError>;
    /// Extends the lease while its epoch is still the ticket's.
    async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError>;
    /// Lets go of the ticket (it stays running, claimable at once); this epoch's open
    /// reservations are released.
    async fn release(&self, lease: &Lease) -> Result<Vec<Event>, StoreError>;

    async fn node_runs(&self, ticket: &str) -> Result<Vec<NodeRun>, StoreError>;
    /// Records a node as started before any paid call (attempts + 1). Refused for a node already
    /// completed or skipped.
    async fn start_node(
        &self,
        lease: &Lease,
        node: &str,
    ) -> Result<(NodeRun, Vec<Event>), StoreError>;
    /// Sets money aside before a paid call. A reservation that would exceed the ticket's budget
    /// is refused with `BudgetExceeded`, and the ticket stops as `failed`.
    async fn reserve(
        &self,
        lease: &Lease,
        node: &str,
        provider: &str,
        usd_micros: i64,
    ) -> Result<Reservation, StoreError>;
    /// Output, ledger settlement, checkpoint, resume token and event, in one transaction.
    async fn complete_node(
        &self,
        lease: &Lease,
        completion: Completion,
    ) -> Result<Vec<Event>, StoreError>;
    async fn fail_node(
        &self,
        lease: &Lease,
        node: &str,
        error: &str,
    ) -> Result<Vec<Event>, StoreError>;
    /// Keeps the provider's generation id with a reservation as soon as the call has one, so a
    /// call cut between its sending and its settling is settled later by it, not released.
    async fn note_generation(
        &self,
        lease: &Lease,
        reservation: i64,
        generation: &str,
    ) -> Result<(), StoreError>;
    /// Records money an outside agent reports it has already spent (an ACP agent's cost): a
    /// ledger entry settled at once, with its `ledger.spent` event. It is kept even when it takes
    /// the ticket past its budget — it was spent — and then the ticket stops as `failed` with
    /// `BudgetExceeded`, as a reservation that does not fit would stop it.
    async fn spent(
        &self,
        lease: &Lease,
        node: &str,
        provider: &str,
        usd_micros: i64,
    ) -> Result<Vec<Event>, StoreError>;
    /// Settles open reservations outside a node's completion (a tool loop's turn, a call settled
    /// later), each with its `ledger.settled` event.
    async fn settle(
        &self,
        lease: &Lease,
        settlements: &[Settlement],
    ) -> Result<Vec<Event>, StoreError>;
    /// Journals turn `turn` of `node` (its payload replaced when it is journaled again, as its
    /// tools' results are added), settling `settlements` in the same transaction: a turn whose
    /// answer was paid for is never lost, and never paid for twice. `event` (kind, payload) is
    /// appended to the ticket's log with it.
    async fn save_turn(
        &self,
        lease: &Lease,
        node: &str,
        turn: i64,
        payload: &Value,
        settlements: &[Settlement],
        event: (&str, Value),
    ) -> Result<Vec<Event>, StoreError>;
    /// The turns `node` of `ticket` journaled, in order.
    async fn turns(&self, ticket: &str, node: &str) -> Result<Vec<Turn>, StoreError>;
    /// Appends an event of the worker's to the ticket's log, under its lease (what a running
    /// node saw: its sandbox proxy's decisions, say).
    async fn record(&self, lease: &Lease, kind: &str, payload: Value) -> Result<Event, StoreError>;
    /// Ends the ticket; open reservations are released.
    async fn finish(&self, lease: &Lease, finish: Finish) -> Result<Vec<Event>, StoreError>;
    /// Fails a ticket nobody holds (a dead-lettered queue entry's): only when it has not ended
    /// and no live lease is on it.
    async fn fail_unheld(&self, id: &str, reason: &str) -> Result<Vec<Event>, StoreError>;

    /// Events after `after` (0: from the start), in order, at most `limit`.
    async fn events(&self, ticket: &str, after: i64, limit: i64) -> Result<Vec<Event>, StoreError>;
    async fn ledger(&self, ticket: &str) -> Result<Vec<LedgerEntry>, StoreError>;
    async fn checkpoints(&self, ticket: &str) -> Result<Vec<Checkpoint>, StoreError>;
    /// A checkpoint's bundle, reassembled from its chunks and checked against its digest.
    async fn bundle(&self, checkpoint: i64) -> Result<Vec<u8>, StoreError>;

    /// Tickets that need a worker and may have no queue entry: queued for longer than `queued_for`,
    /// or running without a live lease. A worker requeues them when it starts, and now and then.
    async fn needing_work(&self, queued_for: Duration) -> Result<Vec<TicketId>, StoreError>;
}
