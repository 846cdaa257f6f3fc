//! What people do to tickets and revisions, through the API, as opposed to what a worker does
//! under its lease: list, cancel, pause, resume, rerun from a node, publish a revision, and the
//! figures `/metrics` shows. None of these needs a lease. Stopping a running ticket (cancel,
//! pause) takes its lease away in the same statement (a new epoch, no owner), so whatever its
//! worker writes next is refused by the fence exactly as if another worker had taken it over —
//! the path every crash test already exercises.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::Row;

use crate::error::StoreError;
use crate::model::{Event, NodeState, Ticket, TicketState};
use crate::sql::{NODE_COLUMNS, SqlStore, TICKET_COLUMNS, event_of, ticket_of};
use crate::store::Store;

/// Which tickets a listing returns; every field narrows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TicketFilter {
    pub flow: Option<String>,
    pub state: Option<TicketState>,
    pub revision: Option<String>,
    /// Created at or after (ms since the epoch).
    pub created_after: Option<i64>,
    /// Created before (ms since the epoch).
    pub created_before: Option<i64>,
}

/// Where a page of a listing starts: after the last ticket of the page before (newest first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: i64,
    pub id: String,
}

impl Cursor {
    /// The opaque text a client passes back: `<created_at>.<id>`.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at, self.id)
    }

    pub fn decode(text: &str) -> Option<Cursor> {
        let (at, id) = text.split_once('.')?;
        let valid_id = !id.is_empty()
            && id.len() <= 64
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        valid_id.then_some(())?;
        Some(Cursor {
            created_at: at.parse().ok()?,
            id: id.to_string(),
        })
    }
}

/// One page of tickets, newest first, and where the next one starts.
#[derive(Clone, Debug, PartialEq)]
pub struct TicketPage {
    pub tickets: Vec<Ticket>,
    pub next: Option<Cursor>,
}

/// A stored revision, and when it was last published (made current).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionInfo {
    pub hash: String,
    pub created_at: i64,
    pub published_at: Option<i64>,
}

/// Completed node runs of one node of one flow: how many, and how long they took in all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDurations {
    pub flow: String,
    pub node: String,
    pub count: i64,
    pub total_ms: i64,
}

/// What `/metrics` reports from the store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub tickets_by_state: Vec<(TicketState, i64)>,
    /// Settled money, all tickets (micro-dollars).
    pub spent_micros: i64,
    /// Money set aside for calls not yet settled.
    pub reserved_micros: i64,
    pub node_durations: Vec<NodeDurations>,
}

/// The store as the API uses it: the worker's contract, and what people do.
#[async_trait]
pub trait Admin: Store {
    /// A round trip to the database (readiness).
    async fn ping(&self) -> Result<(), StoreError>;
    /// Tickets matching `filter`, newest first, `limit` at most, after `after`.
    async fn tickets(
        &self,
        filter: &TicketFilter,
        after: Option<&Cursor>,
        limit: i64,
    ) -> Result<TicketPage, StoreError>;
    /// Cancels a ticket that has not ended. A running one loses its lease at once: its worker
    /// stops at its next write or heartbeat; money set aside for calls that never went out is
    /// released. `Conflict` when it has ended.
    async fn cancel(&self, id: &str, reason: &str) -> Result<(Ticket, Vec<Event>), StoreError>;
    /// Pauses a queued or running ticket; a running one loses its lease at once, and the node it
    /// was running is started again on resume (as after a crash: paid turns are journaled).
    async fn pause(&self, id: &str) -> Result<(Ticket, Vec<Event>), StoreError>;
    /// A paused ticket is queued again (the caller enqueues it).
    async fn resume(&self, id: &str) -> Result<(Ticket, Vec<Event>), StoreError>;
    /// A new ticket with the input, flow, revision and budget of `id`, whose nodes `keep` (those
    /// before `from` in the flow's order) are copied completed with their outputs and
    /// checkpoints, so that it restores the workspace they left and runs `from` and what
    /// follows. `from` must have completed in `id`. Both tickets' logs say so.
    async fn rerun(
        &self,
        id: &str,
        from: &str,
        keep: &[String],
    ) -> Result<(Ticket, Vec<Event>), StoreError>;
    /// Makes a stored revision the current one; `false` when it already was.
    async fn publish_revision(&self, hash: &str) -> Result<bool, StoreError>;
    async fn current_revision(&self) -> Result<Option<RevisionInfo>, StoreError>;
    /// Every stored revision, newest first.
    async fn revisions(&self) -> Result<Vec<RevisionInfo>, StoreError>;
    async fn stats(&self) -> Result<Stats, StoreError>;
    /// The ticket's newest event's seq (0: none).
    async fn last_seq(&self, ticket: &str) -> Result<i64, StoreError>;
    /// Every ticket's events written at or after `since` (ms), in (time, ticket, seq) order,
    /// after the event `after` (ticket, seq) of a page before, `limit` at most.
    async fn events_since(
        &self,
        since: i64,
        after: Option<&Event>,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError>;
}

fn conflict(ticket: &Ticket, action: &str) -> StoreError {
    StoreError::Conflict {
        detail: format!(
            "ticket {} is {}: it cannot be {action}",
            ticket.id, ticket.state
        ),
    }
}

const REVISION_INFO: &str = "SELECT r.hash, r.created_at, (SELECT MAX(p.published_at) FROM afe_publications p WHERE p.hash = r.hash) AS published_at FROM afe_revisions r";

fn revision_info(row: &sqlx::any::AnyRow) -> Result<RevisionInfo, StoreError> {
    Ok(RevisionInfo {
        hash: row.try_get(0)?,
        created_at: row.try_get(1)?,
        published_at: row.try_get(2)?,
    })
}

impl SqlStore {
    /// Stops a ticket that has not ended as `state` (paused or cancelled), taking its lease away;
    /// `None` when it is not in one of `from`.
    async fn stop(
        &self,
        id: &str,
        from: &str,
        state: TicketState,
        reason: Option<&str>,
        kind: &str,
    ) -> Result<Option<(Ticket, Vec<Event>)>, StoreError> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query(&self.sql(&format!(
            "UPDATE afe_tickets SET state = $2, reason = $3, lease_owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1, updated_at = {{now}} \
             WHERE id = $1 AND state IN ({from}) RETURNING {TICKET_COLUMNS}"
        )))
        .bind(id)
        .bind(state.as_str())
        .bind(reason)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let ticket = ticket_of(&row)?;
        let released = self
            .release_reservations(&mut tx, id, "<=", ticket.lease_epoch)
            .await?;
        let event = self
            .append(&mut tx, id, kind, json!({"reason": reason}))
            .await?;
        tx.commit().await?;
        Ok(Some((
            ticket,
            released.into_iter().chain([event]).collect(),
        )))
    }
}

#[async_trait]
impl Admin for SqlStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(self.pool()).await?;
        Ok(())
    }

    async fn tickets(
        &self,
        filter: &TicketFilter,
        after: Option<&Cursor>,
        limit: i64,
    ) -> Result<TicketPage, StoreError> {
        // One statement for every filter: a parameter left NULL matches everything.
        let rows = sqlx::query(&self.sql(&format!(
            "SELECT {TICKET_COLUMNS} FROM afe_tickets WHERE ($1 IS NULL OR flow = $1) AND ($2 IS NULL OR state = $2) \
             AND ($3 IS NULL OR revision = $3) AND ($4 IS NULL OR created_at >= $4) AND ($5 IS NULL OR created_at < $5) \
             AND ($6 IS NULL OR created_at < $6 OR (created_at = $6 AND id < $7)) \
             ORDER BY created_at DESC, id DESC LIMIT $8"
        )))
        .bind(filter.flow.as_deref())
        .bind(filter.state.map(TicketState::as_str))
        .bind(filter.revision.as_deref())
        .bind(filter.created_after)
        .bind(filter.created_before)
        .bind(after.map(|c| c.created_at))
        .bind(after.map(|c| c.id.as_str()))
        .bind(limit + 1)
        .fetch_all(self.pool())
        .await?;
        let mut tickets = rows.iter().map(ticket_of).collect::<Result<Vec<_>, _>>()?;
        let next = if tickets.len() as i64 > limit {
            tickets.truncate(limit.max(0) as usize);
            tickets.last().map(|t| Cursor {
                created_at: t.created_at,
                id: t.id.clone(),
            })
        } else {
            None
        };
        Ok(TicketPage { tickets, next })
    }

    async fn cancel(&self, id: &str, reason: &str) -> Result<(Ticket, Vec<Event>), StoreError> {
        let stopped = self
            .stop(
                id,
                "'queued', 'running', 'paused'",
                TicketState::Cancelled,
                Some(reason),
                "ticket.cancelled",
            )
            .await?;
        match stopped {
            Some(stopped) => Ok(stopped),
            None => Err(conflict(&self.ticket(id).await?, "cancelled")),
        }
    }

    async fn pause(&self, id: &str) -> Result<(Ticket, Vec<Event>), StoreError> {
        let stopped = self
            .stop(
                id,
                "'queued', 'running'",
                TicketState::Paused,
                None,
                "ticket.paused",
            )
            .await?;
        match stopped {
            Some(stopped) => Ok(stopped),
            None => Err(conflict(&self.ticket(id).await?, "paused")),
        }
    }

    async fn resume(&self, id: &str) -> Result<(Ticket, Vec<Event>), StoreError> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query(&self.sql(&format!(
            "UPDATE afe_tickets SET state = 'queued', updated_at = {{now}} WHERE id = $1 AND state = 'paused' RETURNING {TICKET_COLUMNS}"
        )))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            drop(tx);
            return Err(conflict(&self.ticket(id).await?, "resumed"));
        };
        let ticket = ticket_of(&row)?;
        let event = self
            .append(&mut tx, id, "ticket.resumed", json!({}))
            .await?;
        tx.commit().await?;
        Ok((ticket, vec![event]))
    }

    async fn rerun(
        &self,
        id: &str,
        from: &str,
        keep: &[String],
    ) -> Result<(Ticket, Vec<Event>), StoreError> {
        let original = self.ticket(id).await?;
        let runs = self.node_runs(id).await?;
        let completed = |node: &str| {
            runs.iter().any(|r| {
                r.node == node && matches!(r.state, NodeState::Completed | NodeState::Skipped)
            })
        };
        if !completed(from) {
            return Err(StoreError::Conflict {
                detail: format!(
                    "node {from} of ticket {id} has not completed: a ticket is rerun from a completed node"
                ),
            });
        }
        if let Some(missing) = keep.iter().find(|node| !completed(node)) {
            return Err(StoreError::Conflict {
                detail: format!(
                    "node {missing} of ticket {id}, which comes before {from}, has not completed"
                ),
            });
        }
        let new_id = uuid::Uuid::new_v4().to_string();
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query(&self.sql(&format!(
            "INSERT INTO afe_tickets (id, flow, input, revision, state, budget_micros, created_at, updated_at) \
             SELECT $1, flow, input, revision, 'queued', budget_micros, {{now}}, {{now}} FROM afe_tickets WHERE id = $2 RETURNING {TICKET_COLUMNS}"
        )))
        .bind(&new_id)
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        let ticket = ticket_of(&row)?;
        for node in keep {
            sqlx::query(&self.sql(&format!(
                "INSERT INTO afe_node_runs ({NODE_COLUMNS}) SELECT $1, node, state, output, error, attempts, started_at, finished_at FROM afe_node_runs WHERE ticket = $2 AND node = $3"
            )))
            .bind(&new_id)
            .bind(id)
            .bind(node)
            .execute(&mut *tx)
            .await?;
        }
        // The kept nodes' checkpoints, in order, each pointing at its copied parent: the new
        // ticket's worker restores the workspace from the last of them.
        let mut copied: Vec<(i64, i64)> = Vec::new();
        for checkpoint in self.checkpoints(id).await? {
            if !keep.contains(&checkpoint.node) {
                continue;
            }
            let parent = checkpoint.parent.and_then(|p| {
                copied
                    .iter()
                    .find(|(old, _)| *old == p)
                    .map(|(_, new)| *new)
            });
            let new_checkpoint: i64 = sqlx::query(&self.sql(
                "INSERT INTO afe_checkpoints (ticket, node, git_ref, parent, sha256, size, created_at, head) \
                 SELECT $1, node, git_ref, $2, sha256, size, {now}, head FROM afe_checkpoints WHERE id = $3 RETURNING id",
            ))
            .bind(&new_id)
            .bind(parent)
            .bind(checkpoint.id)
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
            sqlx::query(&self.sql(
                "INSERT INTO afe_checkpoint_chunks (checkpoint, seq, data) SELECT $1, seq, data FROM afe_checkpoint_chunks WHERE checkpoint = $2",
            ))
            .bind(new_checkpoint)
            .bind(checkpoint.id)
            .execute(&mut *tx)
            .await?;
            copied.push((checkpoint.id, new_checkpoint));
        }
        let created = self
            .append(
                &mut tx,
                &new_id,
                "ticket.created",
                json!({"flow": original.flow, "revision": original.revision, "rerunOf": id, "from": from, "kept": keep}),
            )
            .await?;
        let noted = self
            .append(
                &mut tx,
                id,
                "ticket.rerun",
                json!({"ticket": new_id, "from": from}),
            )
            .await?;
        tx.commit().await?;
        Ok((ticket, vec![noted, created]))
    }

    async fn publish_revision(&self, hash: &str) -> Result<bool, StoreError> {
        if self
            .current_revision()
            .await?
            .is_some_and(|current| current.hash == hash)
        {
            return Ok(false);
        }
        let inserted = sqlx::query(
            &self.sql("INSERT INTO afe_publications (hash, published_at) VALUES ($1, {now})"),
        )
        .bind(hash)
        .execute(self.pool())
        .await;
        match inserted {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(err)) if err.is_foreign_key_violation() => {
                Err(StoreError::NotFound {
                    what: format!("revision {hash}"),
                })
            }
            Err(err) => Err(err.into()),
        }
    }

    async fn current_revision(&self) -> Result<Option<RevisionInfo>, StoreError> {
        let row = sqlx::query(&self.sql(&format!(
            "{REVISION_INFO} WHERE r.hash = (SELECT hash FROM afe_publications ORDER BY seq DESC LIMIT 1)"
        )))
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(revision_info).transpose()
    }

    async fn revisions(&self) -> Result<Vec<RevisionInfo>, StoreError> {
        sqlx::query(&self.sql(&format!(
            "{REVISION_INFO} ORDER BY r.created_at DESC, r.hash"
        )))
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(revision_info)
        .collect()
    }

    async fn stats(&self) -> Result<Stats, StoreError> {
        let mut stats = Stats::default();
        for row in sqlx::query("SELECT state, COUNT(*) FROM afe_tickets GROUP BY state")
            .fetch_all(self.pool())
            .await?
        {
            if let Some(state) = TicketState::parse(&row.try_get::<String, _>(0)?) {
                stats.tickets_by_state.push((state, row.try_get(1)?));
            }
        }
        let money = sqlx::query(
            "SELECT CAST(COALESCE(SUM(CASE WHEN state = 'settled' THEN settled_micros ELSE 0 END), 0) AS BIGINT), \
             CAST(COALESCE(SUM(CASE WHEN state = 'reserved' THEN reserved_micros ELSE 0 END), 0) AS BIGINT) FROM afe_ledger",
        )
        .fetch_one(self.pool())
        .await?;
        stats.spent_micros = money.try_get(0)?;
        stats.reserved_micros = money.try_get(1)?;
        for row in sqlx::query(
            "SELECT t.flow, n.node, COUNT(*), CAST(SUM(n.finished_at - n.started_at) AS BIGINT) FROM afe_node_runs n \
             JOIN afe_tickets t ON t.id = n.ticket WHERE n.state = 'completed' AND n.finished_at IS NOT NULL \
             GROUP BY t.flow, n.node ORDER BY t.flow, n.node",
        )
        .fetch_all(self.pool())
        .await?
        {
            stats.node_durations.push(NodeDurations {
                flow: row.try_get(0)?,
                node: row.try_get(1)?,
                count: row.try_get(2)?,
                total_ms: row.try_get(3)?,
            });
        }
        Ok(stats)
    }

    async fn last_seq(&self, ticket: &str) -> Result<i64, StoreError> {
        let row =
            sqlx::query(&self.sql(
                "SELECT CAST(COALESCE(MAX(seq), 0) AS BIGINT) FROM afe_events WHERE ticket = $1",
            ))
            .bind(ticket)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get(0)?)
    }

    async fn events_since(
        &self,
        since: i64,
        after: Option<&Event>,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError> {
        sqlx::query(&self.sql(
            "SELECT ticket, seq, kind, payload, at FROM afe_events WHERE at >= $1 \
             AND ($2 IS NULL OR at > $2 OR (at = $2 AND (ticket > $3 OR (ticket = $3 AND seq > $4)))) \
             ORDER BY at, ticket, seq LIMIT $5",
        ))
        .bind(since)
        .bind(after.map(|e| e.at))
        .bind(after.map(|e| e.ticket.as_str()))
        .bind(after.map(|e| e.seq))
        .bind(limit)
        .fetch_all(self.pool())
        .await?
        .iter()
        .map(event_of)
        .collect()
    }
}
