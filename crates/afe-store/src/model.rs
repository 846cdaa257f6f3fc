//! What the store keeps, as the engine reads it. Times are milliseconds since the Unix epoch, read
//! off the database's clock so that every worker agrees on when a lease expires; money is integer
//! micro-dollars so that a ledger adds up exactly.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub type TicketId = String;

/// One micro-dollar is a millionth of a dollar.
pub const MICROS_PER_USD: i64 = 1_000_000;

/// Dollars (as written in a config) to micro-dollars, rounded to the nearest.
pub fn usd_to_micros(usd: f64) -> i64 {
    (usd * MICROS_PER_USD as f64).round() as i64
}

macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_enum!(
    /// Where a ticket is in its life.
    TicketState {
        Queued => "queued",
        Running => "running",
        Paused => "paused",
        Done => "done",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

impl TicketState {
    /// Done, failed and cancelled tickets never run again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TicketState::Done | TicketState::Failed | TicketState::Cancelled
        )
    }
}

text_enum!(
    /// Where one node of one ticket is. A completed (or skipped) node is never executed again.
    NodeState {
        Started => "started",
        Completed => "completed",
        Skipped => "skipped",
        Failed => "failed",
    }
);

text_enum!(
    /// A ledger row: money set aside before a paid call, then settled with what the provider
    /// reported, or released when the call never completed (its worker died).
    LedgerState {
        Reserved => "reserved",
        Settled => "settled",
        Released => "released",
    }
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    pub id: TicketId,
    pub flow: String,
    pub input: Value,
    /// The revision hash the ticket is pinned to.
    pub revision: String,
    pub state: TicketState,
    /// Why a ticket failed or was cancelled (`BudgetExceeded`, `DeadLettered: …`, …).
    pub reason: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_epoch: i64,
    pub lease_expires_at: Option<i64>,
    pub resume_token: Option<String>,
    pub budget_micros: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What starting a ticket takes.
#[derive(Clone, Debug, PartialEq)]
pub struct NewTicket {
    pub flow: String,
    pub input: Value,
    pub revision: String,
    /// The ticket's budget; `None` is no limit.
    pub budget_micros: Option<i64>,
}

/// A worker's hold on a ticket. Every write it makes carries the epoch; once another worker has
/// claimed the ticket (a higher epoch), those writes fail with `LeaseLost`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub ticket: TicketId,
    pub owner: String,
    pub epoch: i64,
    pub expires_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRun {
    pub ticket: TicketId,
    pub node: String,
    pub state: NodeState,
    pub output: Option<Value>,
    pub error: Option<String>,
    /// How many times the node was started: 2 means it ran once more after a crash.
    pub attempts: i32,
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Reservation {
    pub id: i64,
    pub ticket: TicketId,
    pub node: String,
    pub usd_micros: i64,
    /// What making it wrote to the ticket's log (`ledger.reserved`), to announce.
    pub events: Vec<Event>,
}

/// What a paid call cost, as the provider reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    pub reservation: i64,
    pub usd_micros: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub id: i64,
    pub ticket: TicketId,
    pub node: String,
    pub provider: String,
    pub reserved_micros: i64,
    pub settled_micros: Option<i64>,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub state: LedgerState,
    /// The lease epoch the reservation was made under.
    pub epoch: i64,
    /// The provider's id of the call it was made for, once the call had one.
    pub generation: Option<String>,
}

/// A workspace checkpoint to save: the private ref, the commit it points at, and the incremental
/// git bundle that carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCheckpoint {
    pub git_ref: String,
    /// The commit `git_ref` has in the bundle.
    pub head: String,
    pub parent: Option<i64>,
    pub bundle: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub id: i64,
    pub ticket: TicketId,
    pub node: String,
    pub git_ref: String,
    /// The commit `git_ref` has in the bundle (empty for a checkpoint of schema version 1).
    pub head: String,
    pub parent: Option<i64>,
    pub sha256: String,
    pub size: i64,
}

/// One entry of a ticket's ordered event log (the outbox).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub ticket: TicketId,
    pub seq: i64,
    pub kind: String,
    pub payload: Value,
    pub at: i64,
}

/// How a node ended, written in one transaction with everything that goes with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub node: String,
    /// `Completed`, or `Skipped` (its `when` was false).
    pub state: NodeState,
    pub output: Value,
    pub settlements: Vec<Settlement>,
    pub checkpoint: Option<NewCheckpoint>,
    pub resume_token: String,
}

impl Completion {
    /// A node completed with its output and nothing else: no paid call, no files written.
    pub fn output_only(node: &str, output: Value, resume_token: &str) -> Completion {
        Completion {
            node: node.to_string(),
            state: NodeState::Completed,
            output,
            settlements: Vec::new(),
            checkpoint: None,
            resume_token: resume_token.to_string(),
        }
    }
}

/// One turn of a node's conversation with a model, as the node journaled it: whatever it needs to
/// resume without paying for the turn again (the answer; the tools' results once they ran).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub ticket: TicketId,
    pub node: String,
    /// 0, 1, 2, … in the order they were taken.
    pub turn: i64,
    pub payload: Value,
}

/// How a ticket ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    Done,
    Failed { reason: String },
    Cancelled { reason: String },
}
