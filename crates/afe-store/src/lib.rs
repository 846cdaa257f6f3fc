//! afe's durable store: revisions, tickets, node runs, the ledger, checkpoints and the event
//! outbox, with leases and fencing, on PostgreSQL (many machines) or SQLite (one machine). See
//! docs/afe-store.md.

mod admin;
mod dialect;
mod error;
mod migrations;
mod model;
mod sql;
mod store;

pub use admin::{Admin, Cursor, NodeDurations, RevisionInfo, Stats, TicketFilter, TicketPage};
pub use dialect::Dialect;
pub use error::StoreError;
pub use migrations::{MIGRATIONS, Migrated};
pub use model::*;
pub use sql::{DEFAULT_CHUNK_SIZE, SqlStore};
pub use store::Store;
