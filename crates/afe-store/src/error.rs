//! Store errors, each with an `AFE-STO-0xx` code (docs/errors.md) and what to do.

use crate::model::TicketState;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or refused a statement; usually passing (a restart).
    #[error("AFE-STO-001 the store is unavailable: {detail}")]
    Unavailable { detail: String },
    /// Another worker holds the ticket now; this worker must stop working on it.
    #[error(
        "AFE-STO-002 ticket {ticket}: the lease of epoch {epoch} was taken over (the ticket is {state:?}, epoch {current}); nothing was written"
    )]
    LeaseLost {
        ticket: String,
        epoch: i64,
        current: i64,
        state: Option<TicketState>,
    },
    /// A reservation would take the ticket over its budget; the ticket was stopped as failed.
    #[error(
        "AFE-STO-003 ticket {ticket}: reserving {asked} micro-dollars would exceed the budget of {budget} ({committed} already spent or reserved); the ticket stopped as failed, reason BudgetExceeded"
    )]
    BudgetExceeded {
        ticket: String,
        budget: i64,
        committed: i64,
        asked: i64,
    },
    #[error("AFE-STO-004 {what} does not exist")]
    NotFound { what: String },
    /// Stored bytes do not match their digest.
    #[error("AFE-STO-005 {what} is corrupt: {detail}")]
    Corrupt { what: String, detail: String },
    /// The schema is newer than this binary understands, or a migration failed.
    #[error("AFE-STO-006 the store's schema cannot be used: {detail}")]
    Schema { detail: String },
    /// A write that the ticket's or node's state does not allow (completing a node never started,
    /// starting a node already completed).
    #[error("AFE-STO-007 {detail}")]
    InvalidState { detail: String },
    /// What a person asked of a ticket its state does not allow (cancelling one that ended,
    /// resuming one that is not paused, rerunning from a node that never completed).
    #[error("AFE-STO-008 {detail}")]
    Conflict { detail: String },
}

impl StoreError {
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Unavailable { .. } => "AFE-STO-001",
            StoreError::LeaseLost { .. } => "AFE-STO-002",
            StoreError::BudgetExceeded { .. } => "AFE-STO-003",
            StoreError::NotFound { .. } => "AFE-STO-004",
            StoreError::Corrupt { .. } => "AFE-STO-005",
            StoreError::Schema { .. } => "AFE-STO-006",
            StoreError::InvalidState { .. } => "AFE-STO-007",
            StoreError::Conflict { .. } => "AFE-STO-008",
        }
    }

    /// What a person (or the worker) does next.
    pub fn help(&self) -> &'static str {
        match self {
            StoreError::Unavailable { .. } => {
                "check that the database runs and its URL is right; workers retry on their own"
            }
            StoreError::LeaseLost { .. } => {
                "nothing: another worker runs the ticket; this one drops it"
            }
            StoreError::BudgetExceeded { .. } => {
                "raise the flow's budget (spec.budget.usd) and start a new ticket, or make the flow cheaper"
            }
            StoreError::NotFound { .. } => "check the id",
            StoreError::Corrupt { .. } => {
                "restore the database from a backup; the ticket cannot resume from this checkpoint"
            }
            StoreError::Schema { .. } => {
                "run the afe version that migrated this store, or a newer one (one format generation is read)"
            }
            StoreError::InvalidState { .. } => "this is a bug in the caller: report it",
            StoreError::Conflict { .. } => {
                "read the ticket's state (`afe ticket get ID`) and ask for what it allows"
            }
        }
    }

    /// Every code, for docs/errors.md.
    pub const CODES: [&'static str; 8] = [
        "AFE-STO-001",
        "AFE-STO-002",
        "AFE-STO-003",
        "AFE-STO-004",
        "AFE-STO-005",
        "AFE-STO-006",
        "AFE-STO-007",
        "AFE-STO-008",
    ];
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> StoreError {
        match err {
            sqlx::Error::RowNotFound => StoreError::NotFound {
                what: "the row".to_string(),
            },
            other => StoreError::Unavailable {
                detail: other.to_string(),
            },
        }
    }
}
