//! The store on a SQL database: PostgreSQL for many machines, SQLite for one. One implementation,
//! two dialects (see `dialect`): every statement is written once. Each worker write opens a
//! transaction with the *fence* — an update of the ticket row that matches only the worker's
//! owner and epoch — so it both checks the lease and locks the ticket (a row lock on PostgreSQL,
//! the write lock on SQLite) for the rest of the transaction.

use std::str::FromStr;
use std::sync::Once;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Row, Transaction};

use crate::dialect::Dialect;
use crate::error::StoreError;
use crate::migrations::{Migrated, migrate};
use crate::model::{
    Checkpoint, Completion, Event, Finish, Lease, LedgerEntry, LedgerState, NewTicket, NodeRun,
    NodeState, Reservation, Settlement, Ticket, TicketId, TicketState, Turn,
};
use crate::store::Store;

/// Checkpoint bundles are stored in pieces of this size, far below any database's value limit
/// (PostgreSQL's is 1 GB).
pub const DEFAULT_CHUNK_SIZE: usize = 8 << 20;

pub(crate) const TICKET_COLUMNS: &str = "id, flow, input, revision, state, reason, lease_owner, lease_epoch, lease_expires_at, resume_token, budget_micros, created_at, updated_at";
pub(crate) const NODE_COLUMNS: &str =
    "ticket, node, state, output, error, attempts, started_at, finished_at";
const LEDGER_COLUMNS: &str = "id, ticket, node, provider, reserved_micros, settled_micros, tokens_in, tokens_out, state, epoch, generation";

/// The store over a connection pool.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    dialect: Dialect,
    chunk_size: usize,
    migrated: Migrated,
}

fn install_drivers() {
    static DRIVERS: Once = Once::new();
    DRIVERS.call_once(sqlx::any::install_default_drivers);
}

fn text(value: &Value) -> String {
    value.to_string()
}

pub(crate) fn json_of(text: &str, what: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt {
        what: what.to_string(),
        detail: err.to_string(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl SqlStore {
    /// Connects to `postgres://…` or `sqlite://PATH` (created when missing) and brings the schema
    /// up to date.
    pub async fn connect(url: &str) -> Result<SqlStore, StoreError> {
        let dialect = Dialect::of_url(url).ok_or_else(|| StoreError::Unavailable {
            detail: format!(
                "{url:?} is not a store URL: write postgres://USER:PASSWORD@HOST/DB or sqlite://PATH"
            ),
        })?;
        install_drivers();
        let url = match dialect {
            Dialect::Sqlite if !url.contains("mode=") => {
                let joiner = if url.contains('?') { '&' } else { '?' };
                format!("{url}{joiner}mode=rwc")
            }
            _ => url.to_string(),
        };
        let options = AnyConnectOptions::from_str(&url)?;
        let pool = AnyPoolOptions::new()
            .max_connections(match dialect {
                Dialect::Postgres => 8,
                Dialect::Sqlite => 4,
            })
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        // WAL lets readers run beside the writer; the busy timeout makes a second
                        // process wait for the write lock instead of failing.
                        for pragma in [
                            "PRAGMA journal_mode = WAL",
                            "PRAGMA busy_timeout = 15000",
                            "PRAGMA foreign_keys = ON",
                            "PRAGMA synchronous = NORMAL",
                        ] {
                            sqlx::query(pragma).execute(&mut *conn).await?;
                        }
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        let migrated = migrate(&pool, dialect).await?;
        Ok(SqlStore {
            pool,
            dialect,
            chunk_size: DEFAULT_CHUNK_SIZE,
            migrated,
        })
    }

    /// Stores bundles in chunks of `bytes` (tests use a small size to exercise reassembly).
    pub fn with_chunk_size(mut self, bytes: usize) -> SqlStore {
        self.chunk_size = bytes.max(1);
        self
    }

    /// What connecting migrated.
    pub fn migrated(&self) -> &Migrated {
        &self.migrated
    }

    /// Runs the migrations again (idempotent), as connecting does.
    pub async fn migrate(&self) -> Result<Migrated, StoreError> {
        migrate(&self.pool, self.dialect).await
    }

    /// The pool, for maintenance statements and tests.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub(crate) fn sql(&self, statement: &str) -> String {
        self.dialect.sql(statement)
    }

    /// Checks the lease and locks the ticket for the rest of the transaction.
    async fn fence(&self, tx: &mut Transaction<'_, Any>, lease: &Lease) -> Result<(), StoreError> {
        let done = sqlx::query(&self.sql(
            "UPDATE afe_tickets SET updated_at = {now} WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'running'",
        ))
        .bind(&lease.ticket)
        .bind(&lease.owner)
        .bind(lease.epoch)
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        let now =
            sqlx::query(&self.sql("SELECT state, lease_epoch FROM afe_tickets WHERE id = $1"))
                .bind(&lease.ticket)
                .fetch_optional(&mut **tx)
                .await?;
        let (state, current) = match now {
            Some(row) => (
                TicketState::parse(&row.try_get::<String, _>(0)?),
                row.try_get::<i64, _>(1)?,
            ),
            None => (None, 0),
        };
        Err(StoreError::LeaseLost {
            ticket: lease.ticket.clone(),
            epoch: lease.epoch,
            current,
            state,
        })
    }

    /// Appends an event to the ticket's log; the caller's transaction holds the ticket, so
    /// sequence numbers are dense and ordered.
    pub(crate) async fn append(
        &self,
        tx: &mut Transaction<'_, Any>,
        ticket: &str,
        kind: &str,
        payload: Value,
    ) -> Result<Event, StoreError> {
        let row = sqlx::query(&self.sql(
            "INSERT INTO afe_events (ticket, seq, kind, payload, at) SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, {now} FROM afe_events WHERE ticket = $1 RETURNING seq, at",
        ))
        .bind(ticket)
        .bind(kind)
        .bind(text(&payload))
        .fetch_one(&mut **tx)
        .await?;
        Ok(Event {
            ticket: ticket.to_string(),
            seq: row.try_get(0)?,
            kind: kind.to_string(),
            payload,
            at: row.try_get(1)?,
        })
    }

    /// Releases a ticket's open reservations (of one epoch, or of every epoch before one) whose
    /// call never reached the provider — none has a generation id. One whose call did may have
    /// been charged: it stays reserved, counted against the budget, until it is settled with what
    /// the provider reports. The `ledger.released` event, when any were.
    pub(crate) async fn release_reservations(
        &self,
        tx: &mut Transaction<'_, Any>,
        ticket: &str,
        condition: &str,
        epoch: i64,
    ) -> Result<Option<Event>, StoreError> {
        let mut released: Vec<i64> = sqlx::query(&self.sql(&format!(
            "UPDATE afe_ledger SET state = 'released' WHERE ticket = $1 AND state = 'reserved' AND generation IS NULL AND epoch {condition} $2 RETURNING id"
        )))
        .bind(ticket)
        .bind(epoch)
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
        if released.is_empty() {
            return Ok(None);
        }
        released.sort_unstable();
        Ok(Some(
            self.append(
                tx,
                ticket,
                "ledger.released",
                json!({"reservations": released}),
            )
            .await?,
        ))
    }

    /// Settles open reservations of the ticket with what the provider reported, each with its
    /// `ledger.settled` event; one that is not open is refused (it was settled or released).
    /// A new ledger entry of `usd_micros` and its event: reserved (`ledger.reserved`), or, for
    /// money already spent, settled at once (`ledger.spent`).
    async fn ledger_entry(
        &self,
        tx: &mut Transaction<'_, Any>,
        lease: &Lease,
        node: &str,
        provider: &str,
        usd_micros: i64,
        spent: bool,
    ) -> Result<(i64, Event), StoreError> {
        let (settled, state, kind) = if spent {
            (Some(usd_micros), "settled", "ledger.spent")
        } else {
            (None, "reserved", "ledger.reserved")
        };
        let row = sqlx::query(&self.sql(
            "INSERT INTO afe_ledger (ticket, node, provider, reserved_micros, settled_micros, state, epoch, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, {now}) RETURNING id",
        ))
        .bind(&lease.ticket)
        .bind(node)
        .bind(provider)
        .bind(usd_micros)
        .bind(settled)
        .bind(state)
        .bind(lease.epoch)
        .fetch_one(&mut **tx)
        .await?;
        let id: i64 = row.try_get(0)?;
        let event = self
            .append(
                tx,
                &lease.ticket,
                kind,
                json!({"node": node, "reservation": id, "provider": provider, "usd_micros": usd_micros}),
            )
            .await?;
        Ok((id, event))
    }

    /// The ticket's budget, when it has one, and what its ledger holds against it (settled
    /// amounts and open reservations).
    async fn budget_and_committed(
        &self,
        tx: &mut Transaction<'_, Any>,
        lease: &Lease,
    ) -> Result<Option<(i64, i64)>, StoreError> {
        let budget: Option<i64> =
            sqlx::query(&self.sql("SELECT budget_micros FROM afe_tickets WHERE id = $1"))
                .bind(&lease.ticket)
                .fetch_one(&mut **tx)
                .await?
                .try_get(0)?;
        let Some(budget) = budget else {
            return Ok(None);
        };
        let committed: i64 = sqlx::query(&self.sql(
            "SELECT CAST(COALESCE(SUM(CASE WHEN state = 'settled' THEN settled_micros WHEN state = 'reserved' THEN reserved_micros ELSE 0 END), 0) AS BIGINT) FROM afe_ledger WHERE ticket = $1",
        ))
        .bind(&lease.ticket)
        .fetch_one(&mut **tx)
        .await?
        .try_get(0)?;
        Ok(Some((budget, committed)))
    }

    /// Fails the ticket for its budget: its lease given up, its open reservations released, and
    /// `budget.exceeded` then `ticket.failed` in its log.
    async fn stop_over_budget(
        &self,
        tx: &mut Transaction<'_, Any>,
        lease: &Lease,
        node: &str,
        budget: i64,
        committed: i64,
        asked: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(&self.sql(
            "UPDATE afe_tickets SET state = 'failed', reason = 'BudgetExceeded', lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
        ))
        .bind(&lease.ticket)
        .execute(&mut **tx)
        .await?;
        self.release_reservations(tx, &lease.ticket, "<=", lease.epoch)
            .await?;
        let detail = json!({"node": node, "budget_micros": budget, "committed_micros": committed, "asked_micros": asked});
        self.append(tx, &lease.ticket, "budget.exceeded", detail)
            .await?;
        self.append(
            tx,
            &lease.ticket,
            "ticket.failed",
            json!({"reason": "BudgetExceeded"}),
        )
        .await?;
        Ok(())
    }

    async fn settle_in(
        &self,
        tx: &mut Transaction<'_, Any>,
        lease: &Lease,
        settlements: &[Settlement],
    ) -> Result<Vec<Event>, StoreError> {
        let mut events = Vec::with_capacity(settlements.len());
        for settlement in settlements {
            let settled = sqlx::query(&self.sql(
                "UPDATE afe_ledger SET state = 'settled', settled_micros = $3, tokens_in = $4, tokens_out = $5 WHERE id = $1 AND ticket = $2 AND state = 'reserved'",
            ))
            .bind(settlement.reservation)
            .bind(&lease.ticket)
            .bind(settlement.usd_micros)
            .bind(settlement.tokens_in)
            .bind(settlement.tokens_out)
            .execute(&mut **tx)
            .await?;
            if settled.rows_affected() != 1 {
                return Err(StoreError::InvalidState {
                    detail: format!(
                        "ticket {}: reservation {} is not open, so it cannot be settled",
                        lease.ticket, settlement.reservation
                    ),
                });
            }
            events.push(
                self.append(
                    tx,
                    &lease.ticket,
                    "ledger.settled",
                    json!({"reservation": settlement.reservation, "usd_micros": settlement.usd_micros,
                        "tokens_in": settlement.tokens_in, "tokens_out": settlement.tokens_out}),
                )
                .await?,
            );
        }
        Ok(events)
    }
}

/// An event from `ticket, seq, kind, payload, at`.
pub(crate) fn event_of(row: &AnyRow) -> Result<Event, StoreError> {
    Ok(Event {
        ticket: row.try_get(0)?,
        seq: row.try_get(1)?,
        kind: row.try_get(2)?,
        payload: json_of(&row.try_get::<String, _>(3)?, "an event")?,
        at: row.try_get(4)?,
    })
}

pub(crate) fn ticket_of(row: &AnyRow) -> Result<Ticket, StoreError> {
    let state: String = row.try_get("state")?;
    Ok(Ticket {
        id: row.try_get("id")?,
        flow: row.try_get("flow")?,
        input: json_of(&row.try_get::<String, _>("input")?, "a ticket's input")?,
        revision: row.try_get("revision")?,
        state: TicketState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            what: "a ticket's state".to_string(),
            detail: state.clone(),
        })?,
        reason: row.try_get("reason")?,
        lease_owner: row.try_get("lease_owner")?,
        lease_epoch: row.try_get("lease_epoch")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        resume_token: row.try_get("resume_token")?,
        budget_micros: row.try_get("budget_micros")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

fn node_run_of(row: &AnyRow) -> Result<NodeRun, StoreError> {
    let state: String = row.try_get("state")?;
    let output: Option<String> = row.try_get("output")?;
    Ok(NodeRun {
        ticket: row.try_get("ticket")?,
        node: row.try_get("node")?,
        state: NodeState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            what: "a node run's state".to_string(),
            detail: state.clone(),
        })?,
        output: output.map(|o| json_of(&o, "a node's output")).transpose()?,
        error: row.try_get("error")?,
        attempts: row.try_get("attempts")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
    })
}

fn ledger_of(row: &AnyRow) -> Result<LedgerEntry, StoreError> {
    let state: String = row.try_get("state")?;
    Ok(LedgerEntry {
        id: row.try_get("id")?,
        ticket: row.try_get("ticket")?,
        node: row.try_get("node")?,
        provider: row.try_get("provider")?,
        reserved_micros: row.try_get("reserved_micros")?,
        settled_micros: row.try_get("settled_micros")?,
        tokens_in: row.try_get("tokens_in")?,
        tokens_out: row.try_get("tokens_out")?,
        state: LedgerState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            what: "a ledger row's state".to_string(),
            detail: state.clone(),
        })?,
        epoch: row.try_get("epoch")?,
        generation: row.try_get("generation")?,
    })
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> &'static str {
        self.dialect.name()
    }

    async fn put_revision(&self, hash: &str, document: &Value) -> Result<(), StoreError> {
        sqlx::query(&self.sql(
            "INSERT INTO afe_revisions (hash, document, created_at) VALUES ($1, $2, {now}) ON CONFLICT (hash) DO NOTHING",
        ))
        .bind(hash)
        .bind(text(document))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn revision(&self, hash: &str) -> Result<Value, StoreError> {
        let row = sqlx::query(&self.sql("SELECT document FROM afe_revisions WHERE hash = $1"))
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: format!("revision {hash}"),
            })?;
        json_of(&row.try_get::<String, _>(0)?, "a revision")
    }

    async fn create_ticket(&self, new: &NewTicket) -> Result<Ticket, StoreError> {
        // The insert comes first: on SQLite a transaction that reads before it writes can be
        // refused the write lock outright when another process writes; one that writes first
        // waits its turn. The revision's foreign key says whether it exists.
        let mut tx = self.pool.begin().await?;
        let id = uuid::Uuid::new_v4().to_string();
        let inserted = sqlx::query(&self.sql(&format!(
            "INSERT INTO afe_tickets (id, flow, input, revision, state, budget_micros, created_at, updated_at) VALUES ($1, $2, $3, $4, 'queued', $5, {{now}}, {{now}}) RETURNING {TICKET_COLUMNS}"
        )))
        .bind(&id)
        .bind(&new.flow)
        .bind(text(&new.input))
        .bind(&new.revision)
        .bind(new.budget_micros)
        .fetch_one(&mut *tx)
        .await;
        let row = match inserted {
            Ok(row) => row,
            Err(sqlx::Error::Database(err)) if err.is_foreign_key_violation() => {
                return Err(StoreError::NotFound {
                    what: format!("revision {}", new.revision),
                });
            }
            Err(err) => return Err(err.into()),
        };
        let ticket = ticket_of(&row)?;
        self.append(
            &mut tx,
            &id,
            "ticket.created",
            json!({"flow": new.flow, "revision": new.revision}),
        )
        .await?;
        tx.commit().await?;
        Ok(ticket)
    }

    async fn ticket(&self, id: &str) -> Result<Ticket, StoreError> {
        let row = sqlx::query(&self.sql(&format!(
            "SELECT {TICKET_COLUMNS} FROM afe_tickets WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            what: format!("ticket {id}"),
        })?;
        ticket_of(&row)
    }

    async fn claim(
        &self,
        id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<(Lease, Vec<Event>)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&self.sql(
            "UPDATE afe_tickets SET state = 'running', lease_owner = $2, lease_epoch = lease_epoch + 1, lease_expires_at = {now} + $3, updated_at = {now} \
             WHERE id = $1 AND state IN ('queued', 'running') AND (lease_owner IS NULL OR lease_expires_at < {now}) \
             RETURNING lease_epoch, lease_expires_at",
        ))
        .bind(id)
        .bind(owner)
        .bind(ttl.as_millis() as i64)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let lease = Lease {
            ticket: id.to_string(),
            owner: owner.to_string(),
            epoch: row.try_get(0)?,
            expires_at: row.try_get(1)?,
        };
        // Whatever an earlier holder set aside for a call that never went out is given back.
        let released = self
            .release_reservations(&mut tx, id, "<", lease.epoch)
            .await?;
        let event = self
            .append(
                &mut tx,
                id,
                "ticket.claimed",
                json!({"owner": owner, "epoch": lease.epoch}),
            )
            .await?;
        tx.commit().await?;
        Ok(Some((lease, released.into_iter().chain([event]).collect())))
    }

    async fn heartbeat(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let row = sqlx::query(&self.sql(
            "UPDATE afe_tickets SET lease_expires_at = {now} + $4 WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'running' RETURNING lease_expires_at",
        ))
        .bind(&lease.ticket)
        .bind(&lease.owner)
        .bind(lease.epoch)
        .bind(ttl.as_millis() as i64)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => Ok(Lease {
                expires_at: row.try_get(0)?,
                ..lease.clone()
            }),
            None => {
                let ticket = self.ticket(&lease.ticket).await?;
                Err(StoreError::LeaseLost {
                    ticket: lease.ticket.clone(),
                    epoch: lease.epoch,
                    current: ticket.lease_epoch,
                    state: Some(ticket.state),
                })
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<Vec<Event>, StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        sqlx::query(&self.sql(
            "UPDATE afe_tickets SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
        ))
        .bind(&lease.ticket)
        .execute(&mut *tx)
        .await?;
        let released = self
            .release_reservations(&mut tx, &lease.ticket, "=", lease.epoch)
            .await?;
        let event = self
            .append(
                &mut tx,
                &lease.ticket,
                "ticket.released",
                json!({"owner": lease.owner, "epoch": lease.epoch}),
            )
            .await?;
        tx.commit().await?;
        Ok(released.into_iter().chain([event]).collect())
    }

    async fn node_runs(&self, ticket: &str) -> Result<Vec<NodeRun>, StoreError> {
        sqlx::query(&self.sql(&format!(
            "SELECT {NODE_COLUMNS} FROM afe_node_runs WHERE ticket = $1 ORDER BY started_at, node"
        )))
        .bind(ticket)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(node_run_of)
        .collect()
    }

    async fn start_node(
        &self,
        lease: &Lease,
        node: &str,
    ) -> Result<(NodeRun, Vec<Event>), StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        let row = sqlx::query(&self.sql(&format!(
            "INSERT INTO afe_node_runs (ticket, node, state, attempts, started_at) VALUES ($1, $2, 'started', 1, {{now}}) \
             ON CONFLICT (ticket, node) DO UPDATE SET state = 'started', attempts = afe_node_runs.attempts + 1, started_at = {{now}}, error = NULL, finished_at = NULL \
             WHERE afe_node_runs.state IN ('started', 'failed') \
             RETURNING {NODE_COLUMNS}"
        )))
        .bind(&lease.ticket)
        .bind(node)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::InvalidState {
                detail: format!(
                    "ticket {}: node {node} has ended; a completed node is never run again",
                    lease.ticket
                ),
            });
        };
        let run = node_run_of(&row)?;
        let event = self
            .append(
                &mut tx,
                &lease.ticket,
                "node.started",
                json!({"node": node, "attempt": run.attempts}),
            )
            .await?;
        tx.commit().await?;
        Ok((run, vec![event]))
    }

    async fn reserve(
        &self,
        lease: &Lease,
        node: &str,
        provider: &str,
        usd_micros: i64,
    ) -> Result<Reservation, StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        if let Some((budget, committed)) = self.budget_and_committed(&mut tx, lease).await?
            && committed + usd_micros > budget
        {
            // The ticket stops here, in this transaction: it does not keep spending.
            self.stop_over_budget(&mut tx, lease, node, budget, committed, usd_micros)
                .await?;
            tx.commit().await?;
            return Err(StoreError::BudgetExceeded {
                ticket: lease.ticket.clone(),
                budget,
                committed,
                asked: usd_micros,
            });
        }
        let (id, event) = self
            .ledger_entry(&mut tx, lease, node, provider, usd_micros, false)
            .await?;
        tx.commit().await?;
        Ok(Reservation {
            id,
            ticket: lease.ticket.clone(),
            node: node.to_string(),
            usd_micros,
            events: vec![event],
        })
    }

    async fn complete_node(
        &self,
        lease: &Lease,
        completion: Completion,
    ) -> Result<Vec<Event>, StoreError> {
        if !matches!(completion.state, NodeState::Completed | NodeState::Skipped) {
            return Err(StoreError::InvalidState {
                detail: format!(
                    "a node completes as completed or skipped, not {}",
                    completion.state
                ),
            });
        }
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        // A completed node must have been started; a skipped one never was.
        let statement = match completion.state {
            NodeState::Completed => {
                "UPDATE afe_node_runs SET state = $3, output = $4, finished_at = {now} WHERE ticket = $1 AND node = $2 AND state = 'started'"
            }
            _ => {
                "INSERT INTO afe_node_runs (ticket, node, state, output, attempts, started_at, finished_at) VALUES ($1, $2, $3, $4, 0, {now}, {now}) \
                 ON CONFLICT (ticket, node) DO UPDATE SET state = $3, output = $4, finished_at = {now} WHERE afe_node_runs.state = 'started'"
            }
        };
        let done = sqlx::query(&self.sql(statement))
            .bind(&lease.ticket)
            .bind(&completion.node)
            .bind(completion.state.as_str())
            .bind(text(&completion.output))
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() != 1 {
            return Err(StoreError::InvalidState {
                detail: format!(
                    "ticket {}: node {} is not running, so it cannot complete",
                    lease.ticket, completion.node
                ),
            });
        }
        let mut events = self
            .settle_in(&mut tx, lease, &completion.settlements)
            .await?;
        let mut checkpoint_id = None;
        if let Some(checkpoint) = &completion.checkpoint {
            let digest = hex(&Sha256::digest(&checkpoint.bundle));
            let row = sqlx::query(&self.sql(
                "INSERT INTO afe_checkpoints (ticket, node, git_ref, head, parent, sha256, size, created_at) VALUES ($1, $2, $3, $7, $4, $5, $6, {now}) RETURNING id",
            ))
            .bind(&lease.ticket)
            .bind(&completion.node)
            .bind(&checkpoint.git_ref)
            .bind(checkpoint.parent)
            .bind(&digest)
            .bind(checkpoint.bundle.len() as i64)
            .bind(&checkpoint.head)
            .fetch_one(&mut *tx)
            .await?;
            let id: i64 = row.try_get(0)?;
            for (seq, chunk) in checkpoint.bundle.chunks(self.chunk_size).enumerate() {
                sqlx::query(&self.sql(
                    "INSERT INTO afe_checkpoint_chunks (checkpoint, seq, data) VALUES ($1, $2, $3)",
                ))
                .bind(id)
                .bind(seq as i32)
                .bind(chunk.to_vec())
                .execute(&mut *tx)
                .await?;
            }
            checkpoint_id = Some(id);
        }
        sqlx::query(&self.sql("UPDATE afe_tickets SET resume_token = $2 WHERE id = $1"))
            .bind(&lease.ticket)
            .bind(&completion.resume_token)
            .execute(&mut *tx)
            .await?;
        let kind = match completion.state {
            NodeState::Skipped => "node.skipped",
            _ => "node.completed",
        };
        let event = self
            .append(
                &mut tx,
                &lease.ticket,
                kind,
                json!({"node": completion.node, "output": completion.output, "checkpoint": checkpoint_id}),
            )
            .await?;
        tx.commit().await?;
        events.push(event);
        Ok(events)
    }

    async fn fail_node(
        &self,
        lease: &Lease,
        node: &str,
        error: &str,
    ) -> Result<Vec<Event>, StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        sqlx::query(&self.sql(
            "UPDATE afe_node_runs SET state = 'failed', error = $3, finished_at = {now} WHERE ticket = $1 AND node = $2 AND state = 'started'",
        ))
        .bind(&lease.ticket)
        .bind(node)
        .bind(error)
        .execute(&mut *tx)
        .await?;
        let event = self
            .append(
                &mut tx,
                &lease.ticket,
                "node.failed",
                json!({"node": node, "error": error}),
            )
            .await?;
        tx.commit().await?;
        Ok(vec![event])
    }

    async fn note_generation(
        &self,
        lease: &Lease,
        reservation: i64,
        generation: &str,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        let noted = sqlx::query(&self.sql(
            "UPDATE afe_ledger SET generation = $3 WHERE id = $1 AND ticket = $2 AND state = 'reserved'",
        ))
        .bind(reservation)
        .bind(&lease.ticket)
        .bind(generation)
        .execute(&mut *tx)
        .await?;
        if noted.rows_affected() != 1 {
            return Err(StoreError::InvalidState {
                detail: format!(
                    "ticket {}: reservation {reservation} is not open, so no generation can be kept with it",
                    lease.ticket
                ),
            });
        }
        tx.commit().await?;
        Ok(())
    }

    async fn settle(
        &self,
        lease: &Lease,
        settlements: &[Settlement],
    ) -> Result<Vec<Event>, StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        let events = self.settle_in(&mut tx, lease, settlements).await?;
        tx.commit().await?;
        Ok(events)
    }

    async fn spent(
        &self,
        lease: &Lease,
        node: &str,
        provider: &str,
        usd_micros: i64,
    ) -> Result<Vec<Event>, StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        let before = self.budget_and_committed(&mut tx, lease).await?;
        let (_, event) = self
            .ledger_entry(&mut tx, lease, node, provider, usd_micros, true)
            .await?;
        if let Some((budget, committed)) = before
            && committed + usd_micros > budget
        {
            // Spent already, so kept; and the ticket stops spending more.
            self.stop_over_budget(&mut tx, lease, node, budget, committed, usd_micros)
                .await?;
            tx.commit().await?;
            return Err(StoreError::BudgetExceeded {
                ticket: lease.ticket.clone(),
                budget,
                committed,
                asked: usd_micros,
            });
        }
        tx.commit().await?;
        Ok(vec![event])
    }

    async fn save_turn(
        &self,
        lease: &Lease,
        node: &str,
        turn: i64,
        payload: &Value,
        settlements: &[Settlement],
        event: (&str, Value),
    ) -> Result<Vec<Event>, StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        sqlx::query(&self.sql(
            "INSERT INTO afe_turns (ticket, node, turn, payload, created_at, updated_at) VALUES ($1, $2, $3, $4, {now}, {now}) \
             ON CONFLICT (ticket, node, turn) DO UPDATE SET payload = $4, updated_at = {now}",
        ))
        .bind(&lease.ticket)
        .bind(node)
        .bind(turn)
        .bind(text(payload))
        .execute(&mut *tx)
        .await?;
        let mut events = self.settle_in(&mut tx, lease, settlements).await?;
        events.push(
            self.append(&mut tx, &lease.ticket, event.0, event.1)
                .await?,
        );
        tx.commit().await?;
        Ok(events)
    }

    async fn turns(&self, ticket: &str, node: &str) -> Result<Vec<Turn>, StoreError> {
        sqlx::query(&self.sql(
            "SELECT ticket, node, turn, payload FROM afe_turns WHERE ticket = $1 AND node = $2 ORDER BY turn",
        ))
        .bind(ticket)
        .bind(node)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            Ok(Turn {
                ticket: row.try_get(0)?,
                node: row.try_get(1)?,
                turn: row.try_get(2)?,
                payload: json_of(&row.try_get::<String, _>(3)?, "a turn")?,
            })
        })
        .collect()
    }

    async fn record(&self, lease: &Lease, kind: &str, payload: Value) -> Result<Event, StoreError> {
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        let event = self.append(&mut tx, &lease.ticket, kind, payload).await?;
        tx.commit().await?;
        Ok(event)
    }

    async fn finish(&self, lease: &Lease, finish: Finish) -> Result<Vec<Event>, StoreError> {
        let (state, reason, kind) = match &finish {
            Finish::Done => (TicketState::Done, None, "ticket.done"),
            Finish::Failed { reason } => {
                (TicketState::Failed, Some(reason.as_str()), "ticket.failed")
            }
            Finish::Cancelled { reason } => (
                TicketState::Cancelled,
                Some(reason.as_str()),
                "ticket.cancelled",
            ),
        };
        let mut tx = self.pool.begin().await?;
        self.fence(&mut tx, lease).await?;
        sqlx::query(&self.sql(
            "UPDATE afe_tickets SET state = $2, reason = $3, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
        ))
        .bind(&lease.ticket)
        .bind(state.as_str())
        .bind(reason)
        .execute(&mut *tx)
        .await?;
        let released = self
            .release_reservations(&mut tx, &lease.ticket, "<=", lease.epoch)
            .await?;
        let event = self
            .append(&mut tx, &lease.ticket, kind, json!({"reason": reason}))
            .await?;
        tx.commit().await?;
        Ok(released.into_iter().chain([event]).collect())
    }

    async fn fail_unheld(&self, id: &str, reason: &str) -> Result<Vec<Event>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(&self.sql(
            "UPDATE afe_tickets SET state = 'failed', reason = $2, lease_owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1, updated_at = {now} \
             WHERE id = $1 AND state IN ('queued', 'running') AND (lease_owner IS NULL OR lease_expires_at < {now})",
        ))
        .bind(id)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(Vec::new());
        }
        sqlx::query(&self.sql(
            "UPDATE afe_ledger SET state = 'released' WHERE ticket = $1 AND state = 'reserved' AND generation IS NULL",
        ))
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let event = self
            .append(&mut tx, id, "ticket.failed", json!({"reason": reason}))
            .await?;
        tx.commit().await?;
        Ok(vec![event])
    }

    async fn events(&self, ticket: &str, after: i64, limit: i64) -> Result<Vec<Event>, StoreError> {
        sqlx::query(&self.sql(
            "SELECT ticket, seq, kind, payload, at FROM afe_events WHERE ticket = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        ))
        .bind(ticket)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(event_of)
        .collect()
    }

    async fn ledger(&self, ticket: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        sqlx::query(&self.sql(&format!(
            "SELECT {LEDGER_COLUMNS} FROM afe_ledger WHERE ticket = $1 ORDER BY id"
        )))
        .bind(ticket)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(ledger_of)
        .collect()
    }

    async fn checkpoints(&self, ticket: &str) -> Result<Vec<Checkpoint>, StoreError> {
        sqlx::query(&self.sql(
            "SELECT id, ticket, node, git_ref, parent, sha256, size, head FROM afe_checkpoints WHERE ticket = $1 ORDER BY id",
        ))
        .bind(ticket)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| {
            Ok(Checkpoint {
                id: row.try_get(0)?,
                ticket: row.try_get(1)?,
                node: row.try_get(2)?,
                git_ref: row.try_get(3)?,
                parent: row.try_get(4)?,
                sha256: row.try_get(5)?,
                size: row.try_get(6)?,
                head: row.try_get(7)?,
            })
        })
        .collect()
    }

    async fn bundle(&self, checkpoint: i64) -> Result<Vec<u8>, StoreError> {
        let what = format!("checkpoint {checkpoint}");
        let head = sqlx::query(&self.sql("SELECT sha256, size FROM afe_checkpoints WHERE id = $1"))
            .bind(checkpoint)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound { what: what.clone() })?;
        let (digest, size): (String, i64) = (head.try_get(0)?, head.try_get(1)?);
        let mut bundle = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        for row in sqlx::query(
            &self.sql("SELECT data FROM afe_checkpoint_chunks WHERE checkpoint = $1 ORDER BY seq"),
        )
        .bind(checkpoint)
        .fetch_all(&self.pool)
        .await?
        {
            bundle.extend_from_slice(&row.try_get::<Vec<u8>, _>(0)?);
        }
        let found = hex(&Sha256::digest(&bundle));
        if bundle.len() as i64 != size || found != digest {
            return Err(StoreError::Corrupt {
                what,
                detail: format!(
                    "{} bytes with sha256 {found}; {size} bytes with sha256 {digest} were stored",
                    bundle.len()
                ),
            });
        }
        Ok(bundle)
    }

    async fn needing_work(&self, queued_for: Duration) -> Result<Vec<TicketId>, StoreError> {
        sqlx::query(&self.sql(
            "SELECT id FROM afe_tickets WHERE (state = 'queued' AND updated_at < {now} - $1) \
             OR (state = 'running' AND (lease_owner IS NULL OR lease_expires_at < {now})) ORDER BY created_at LIMIT 10000",
        ))
        .bind(queued_for.as_millis() as i64)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|row| Ok(row.try_get(0)?))
        .collect()
    }
}
