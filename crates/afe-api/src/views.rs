//! What the API sends and takes, in JSON (camelCase, money in integer micro-dollars). Separate
//! from the store's types on purpose: the API is a contract with clients, the store's rows are
//! not.

use afe_store::{Event, LedgerEntry, NodeRun, RevisionInfo, Ticket, TicketState};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// Where a ticket is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Queued,
    Running,
    Paused,
    Done,
    Failed,
    Cancelled,
}

impl From<TicketState> for State {
    fn from(state: TicketState) -> State {
        match state {
            TicketState::Queued => State::Queued,
            TicketState::Running => State::Running,
            TicketState::Paused => State::Paused,
            TicketState::Done => State::Done,
            TicketState::Failed => State::Failed,
            TicketState::Cancelled => State::Cancelled,
        }
    }
}

impl From<State> for TicketState {
    fn from(state: State) -> TicketState {
        match state {
            State::Queued => TicketState::Queued,
            State::Running => TicketState::Running,
            State::Paused => TicketState::Paused,
            State::Done => TicketState::Done,
            State::Failed => TicketState::Failed,
            State::Cancelled => TicketState::Cancelled,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TicketView {
    pub id: String,
    pub flow: String,
    #[schema(value_type = Object)]
    pub input: Value,
    /// The revision hash the ticket is pinned to, for its whole life.
    pub revision: String,
    pub state: State,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// The worker holding it, while one does.
    pub worker: Option<String>,
    /// Its budget in micro-dollars; none: no limit.
    pub budget_micros: Option<i64>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub updated_at: i64,
}

impl From<Ticket> for TicketView {
    fn from(t: Ticket) -> TicketView {
        TicketView {
            id: t.id,
            flow: t.flow,
            input: t.input,
            revision: t.revision,
            state: t.state.into(),
            reason: t.reason,
            worker: t.lease_owner,
            budget_micros: t.budget_micros,
            created_at: t.created_at,
            updated_at: t.updated_at,
        }
    }
}

/// One page of tickets, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TicketList {
    pub tickets: Vec<TicketView>,
    /// Pass as `cursor` for the next page; none on the last.
    pub next: Option<String>,
}

/// One entry of a ticket's event log. `seq` is its id: dense and ordered per ticket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventView {
    pub ticket: String,
    pub seq: i64,
    pub kind: String,
    #[schema(value_type = Object)]
    pub payload: Value,
    pub at: i64,
}

impl From<&Event> for EventView {
    fn from(e: &Event) -> EventView {
        EventView {
            ticket: e.ticket.clone(),
            seq: e.seq,
            kind: e.kind.clone(),
            payload: e.payload.clone(),
            at: e.at,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRunView {
    pub node: String,
    /// `started`, `completed`, `skipped` or `failed`.
    pub state: String,
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    pub error: Option<String>,
    pub attempts: i32,
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

impl From<NodeRun> for NodeRunView {
    fn from(r: NodeRun) -> NodeRunView {
        NodeRunView {
            node: r.node,
            state: r.state.as_str().to_string(),
            output: r.output,
            error: r.error,
            attempts: r.attempts,
            started_at: r.started_at,
            finished_at: r.finished_at,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntryView {
    pub id: i64,
    pub node: String,
    pub provider: String,
    pub reserved_micros: i64,
    pub settled_micros: Option<i64>,
    pub tokens_in: i64,
    pub tokens_out: i64,
    /// `reserved`, `settled` or `released`.
    pub state: String,
    /// The provider's id of the call.
    pub generation: Option<String>,
}

/// A ticket's money: every entry, and the sums against its budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerView {
    pub entries: Vec<LedgerEntryView>,
    /// Settled: what the providers reported.
    pub spent_micros: i64,
    /// Set aside for calls not settled yet.
    pub reserved_micros: i64,
    pub budget_micros: Option<i64>,
}

impl LedgerView {
    pub fn of(entries: Vec<LedgerEntry>, budget_micros: Option<i64>) -> LedgerView {
        let spent_micros = entries.iter().filter_map(|e| e.settled_micros).sum();
        let reserved_micros = entries
            .iter()
            .filter(|e| e.state == afe_store::LedgerState::Reserved)
            .map(|e| e.reserved_micros)
            .sum();
        LedgerView {
            entries: entries
                .into_iter()
                .map(|e| LedgerEntryView {
                    id: e.id,
                    node: e.node,
                    provider: e.provider,
                    reserved_micros: e.reserved_micros,
                    settled_micros: e.settled_micros,
                    tokens_in: e.tokens_in,
                    tokens_out: e.tokens_out,
                    state: e.state.as_str().to_string(),
                    generation: e.generation,
                })
                .collect(),
            spent_micros,
            reserved_micros,
            budget_micros,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionView {
    pub hash: String,
    pub created_at: i64,
    /// When it was last made current; none: never.
    pub published_at: Option<i64>,
    pub current: bool,
    /// The normalized config (only when one revision is asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub document: Option<Value>,
}

impl RevisionView {
    pub fn of(info: RevisionInfo, current: bool, document: Option<Value>) -> RevisionView {
        RevisionView {
            hash: info.hash,
            created_at: info.created_at,
            published_at: info.published_at,
            current,
            document,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StartTicket {
    /// A flow of the current revision.
    pub flow: String,
    /// Checked against the flow's input Schema.
    #[schema(value_type = Object)]
    pub input: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CancelTicket {
    /// Kept as the ticket's reason.
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RerunTicket {
    /// A node of the ticket's flow that completed: it and everything after it run again.
    pub from: String,
}

/// The filters and page of a ticket listing.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    pub flow: Option<String>,
    pub state: Option<State>,
    pub revision: Option<String>,
    /// Created at or after (ms since the Unix epoch).
    pub created_after: Option<i64>,
    /// Created before (ms since the Unix epoch).
    pub created_before: Option<i64>,
    /// The `next` of the page before.
    #[param(pattern = r"^[0-9]{1,18}\.[0-9A-Za-z-]{1,64}$")]
    pub cursor: Option<String>,
    /// At most this many (1 to 500; default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// Where to start reading events.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// The last `seq` the client has (0: from the start).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// At most this many (1 to 1000; default 200).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// Where a live stream of every ticket's events starts.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AllEventsQuery {
    /// Replay events written at or after this time (ms since the Unix epoch) before the live
    /// ones; none: live only.
    #[param(minimum = 0)]
    pub since: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or what is not.
    pub status: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// A running ticket's lease: which worker holds it, until when (its heartbeat pushes that on).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    pub ticket: String,
    pub flow: String,
    /// The worker's consumer name (`ID:SLOT`); none when the lease was released.
    pub worker: Option<String>,
    pub epoch: i64,
    /// When the lease ends unless the worker's heartbeat extends it (ms since the Unix epoch).
    pub expires_at: Option<i64>,
    /// The ticket's last write.
    pub updated_at: i64,
}

/// A queue entry taken out of circulation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterView {
    pub ticket: String,
    pub reason: String,
    pub deliveries: u64,
}

/// The queue and the workers as the store and the broker see them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    /// Entries waiting or being worked on: the lag.
    pub depth: u64,
    /// The leases of running tickets (at most 500, oldest change first).
    pub leases: Vec<LeaseView>,
    pub dead_letters: Vec<DeadLetterView>,
}

/// A node's saved workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointView {
    pub id: i64,
    pub node: String,
    /// The commit the workspace was saved as.
    pub head: String,
    /// The checkpoint before it.
    pub parent: Option<i64>,
    /// The bundle's bytes.
    pub size: i64,
}

/// What a node changed in the workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceDiffView {
    pub checkpoint: i64,
    pub node: String,
    /// The commit before; none for the first checkpoint (then `diff` lists its files).
    pub from: Option<String>,
    pub to: String,
    /// `git diff --stat --patch` between them.
    pub diff: String,
    /// Cut at 256 KiB.
    pub truncated: bool,
}
