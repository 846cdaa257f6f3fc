//! The schema, as numbered migrations applied in one transaction under a lock: on PostgreSQL a
//! transaction-level advisory lock (seed 003: it works through PgBouncer's transaction mode, where
//! a session lock would not), on SQLite the database's write lock. Applying is idempotent: a
//! migration already recorded is not run again. A store migrated by a newer afe is refused, not
//! read in silence.

use sqlx::{AnyPool, Row};

use crate::dialect::Dialect;
use crate::error::StoreError;

/// The advisory lock's key: "afe-migrate" in ASCII, as a number.
const LOCK_KEY: i64 = 0x0061_6665_2d6d_6967;

/// (version, name, statements separated by `;`), in order. Never edit one that shipped: add one.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "tickets, node runs, ledger, checkpoints, revisions, events",
        "
CREATE TABLE afe_revisions (
    hash TEXT PRIMARY KEY,
    document TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE afe_tickets (
    id TEXT PRIMARY KEY,
    flow TEXT NOT NULL,
    input TEXT NOT NULL,
    revision TEXT NOT NULL REFERENCES afe_revisions (hash),
    state TEXT NOT NULL,
    reason TEXT,
    lease_owner TEXT,
    lease_epoch BIGINT NOT NULL DEFAULT 0,
    lease_expires_at BIGINT,
    resume_token TEXT,
    budget_micros BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX afe_tickets_work ON afe_tickets (state, lease_expires_at);
CREATE TABLE afe_node_runs (
    ticket TEXT NOT NULL REFERENCES afe_tickets (id),
    node TEXT NOT NULL,
    state TEXT NOT NULL,
    output TEXT,
    error TEXT,
    attempts INTEGER NOT NULL,
    started_at BIGINT NOT NULL,
    finished_at BIGINT,
    PRIMARY KEY (ticket, node)
);
CREATE TABLE afe_ledger (
    id BIGSERIAL PRIMARY KEY,
    ticket TEXT NOT NULL REFERENCES afe_tickets (id),
    node TEXT NOT NULL,
    provider TEXT NOT NULL,
    reserved_micros BIGINT NOT NULL,
    settled_micros BIGINT,
    tokens_in BIGINT NOT NULL DEFAULT 0,
    tokens_out BIGINT NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX afe_ledger_ticket ON afe_ledger (ticket);
CREATE TABLE afe_checkpoints (
    id BIGSERIAL PRIMARY KEY,
    ticket TEXT NOT NULL REFERENCES afe_tickets (id),
    node TEXT NOT NULL,
    git_ref TEXT NOT NULL,
    parent BIGINT REFERENCES afe_checkpoints (id),
    sha256 TEXT NOT NULL,
    size BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX afe_checkpoints_ticket ON afe_checkpoints (ticket);
CREATE TABLE afe_checkpoint_chunks (
    checkpoint BIGINT NOT NULL REFERENCES afe_checkpoints (id),
    seq INTEGER NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (checkpoint, seq)
);
CREATE TABLE afe_events (
    ticket TEXT NOT NULL REFERENCES afe_tickets (id),
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (ticket, seq)
)
",
    ),
    (
        2,
        "the commit a checkpoint saved",
        // The head of the ticket's work branch in the bundle: the next checkpoint's bundle starts
        // after it (`^head`), and a restore checks out the last one. Empty for rows of version 1.
        "ALTER TABLE afe_checkpoints ADD COLUMN head TEXT NOT NULL DEFAULT ''",
    ),
    (
        3,
        "the provider's generation id of a reservation's call",
        // Kept as soon as the call has one: a reservation whose call reached the provider is
        // settled by it later, never released unpaid.
        "ALTER TABLE afe_ledger ADD COLUMN generation TEXT",
    ),
    (
        4,
        "the journal of a node's model turns",
        // A turn is kept the moment its answer is settled: a node resumed after a crash replays
        // its turns instead of paying for them again.
        "
CREATE TABLE afe_turns (
    ticket TEXT NOT NULL REFERENCES afe_tickets (id),
    node TEXT NOT NULL,
    turn BIGINT NOT NULL,
    payload TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (ticket, node, turn)
)
",
    ),
    (
        5,
        "published revisions, and tickets listed newest first",
        // `afe serve -c DIR` publishes a revision when the folder changes; the newest publication
        // is the current one, the same for every API replica. Listing pages by (created_at, id); a
        // live stream of every ticket replays events by time.
        "
CREATE TABLE afe_publications (
    seq BIGSERIAL PRIMARY KEY,
    hash TEXT NOT NULL REFERENCES afe_revisions (hash),
    published_at BIGINT NOT NULL
);
CREATE INDEX afe_tickets_created ON afe_tickets (created_at, id);
CREATE INDEX afe_events_at ON afe_events (at)
",
    ),
];

/// What `migrate` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// The versions applied by this call (empty when the store was up to date).
    pub applied: Vec<i32>,
}

pub async fn migrate(pool: &AnyPool, dialect: Dialect) -> Result<Migrated, StoreError> {
    let schema_error = |err: sqlx::Error| StoreError::Schema {
        detail: err.to_string(),
    };
    if dialect == Dialect::Sqlite {
        // The lock row's table must exist before the transaction that writes it.
        sqlx::query("CREATE TABLE IF NOT EXISTS afe_migration_lock (id INTEGER PRIMARY KEY)")
            .execute(pool)
            .await?;
    }
    let mut tx = pool.begin().await?;
    match dialect {
        Dialect::Postgres => {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(LOCK_KEY)
                .execute(&mut *tx)
                .await?;
        }
        // A write first: the transaction holds SQLite's write lock from here to its end.
        Dialect::Sqlite => {
            sqlx::query("DELETE FROM afe_migration_lock")
                .execute(&mut *tx)
                .await?;
        }
    }
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS afe_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .execute(&mut *tx)
    .await?;
    let done: Vec<i32> = sqlx::query("SELECT version FROM afe_schema_migrations ORDER BY version")
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| row.try_get::<i32, _>(0))
        .collect::<Result<_, _>>()?;
    let known = MIGRATIONS.last().map_or(0, |(v, _, _)| *v);
    if let Some(newer) = done.iter().find(|v| **v > known) {
        return Err(StoreError::Schema {
            detail: format!(
                "the store is at schema version {newer}, written by a newer afe; this one knows up to {known}"
            ),
        });
    }
    let mut applied = Vec::new();
    for (version, name, statements) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        for statement in statements.split(';').filter(|s| !s.trim().is_empty()) {
            sqlx::query(&dialect.sql(statement))
                .execute(&mut *tx)
                .await
                .map_err(schema_error)?;
        }
        sqlx::query(&dialect.sql(
            "INSERT INTO afe_schema_migrations (version, name, applied_at) VALUES ($1, $2, {now})",
        ))
        .bind(*version)
        .bind(*name)
        .execute(&mut *tx)
        .await?;
        applied.push(*version);
    }
    tx.commit().await?;
    Ok(Migrated { applied })
}
