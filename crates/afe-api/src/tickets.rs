//! The ticket routes.

use afe_config::input::{budget_micros, input_problems};
use afe_store::{Cursor, NewTicket, TicketFilter};
use afe_worker::FrozenFlow;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::ApiState;
use crate::error::{ApiCode, ApiError, Problem};
use crate::extract::{Body, Params, at_least_zero, limit};
use crate::views::{
    CancelTicket, CheckpointView, EventView, EventsQuery, LedgerView, ListQuery, NodeRunView,
    RerunTicket, StartTicket, TicketList, TicketView, WorkspaceDiffView,
};
use crate::workspace::DiffError;

/// Enqueues a ticket the store holds. A queue that is down does not lose it: it waits in the
/// store, `queued`, and a worker's sweep finds it.
async fn wake_a_worker(state: &ApiState, ticket: &str) {
    if let Err(err) = state.queue.enqueue(ticket).await {
        tracing::warn!(%ticket, error = %err, "cannot enqueue; a worker's sweep will find the ticket");
    }
}

/// Start a ticket of a flow of the current revision.
///
/// The input is checked against the flow's input Schema; the ticket is pinned to the current
/// revision for its whole life and queued for a worker.
#[utoipa::path(post, path = "/v1/tickets", tag = "tickets", request_body = StartTicket,
    responses(
        (status = 201, description = "Queued", body = TicketView),
        (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 404, description = "No such flow", body = Problem),
        (status = 422, description = "The input does not match the Schema", body = Problem),
        (status = 503, body = Problem),
    ))]
pub async fn start(
    State(state): State<ApiState>,
    Body(start): Body<StartTicket>,
) -> Result<(StatusCode, Json<TicketView>), ApiError> {
    let current =
        state.store.current_revision().await?.ok_or_else(|| {
            ApiError::new(ApiCode::NoRevision, "no revision has been published yet")
        })?;
    let document = state.document(&current.hash).await?;
    match input_problems(&document, &start.flow, &start.input) {
        Ok(problems) if problems.is_empty() => {}
        Ok(problems) => {
            return Err(ApiError::new(
                ApiCode::InputInvalid,
                format!(
                    "the input does not match flow {}'s input Schema",
                    start.flow
                ),
            )
            .with_problems(problems));
        }
        Err(why) => return Err(ApiError::new(ApiCode::NoSuchFlow, why)),
    }
    let ticket = state
        .store
        .create_ticket(&NewTicket {
            flow: start.flow.clone(),
            input: start.input,
            revision: current.hash,
            budget_micros: budget_micros(&document, &start.flow),
        })
        .await?;
    // A new ticket's log starts with `ticket.created`, seq 1: live streams of every ticket hear
    // of it now rather than at their next poll.
    state
        .announce_notice(afe_queue::Notice {
            ticket: ticket.id.clone(),
            seq: 1,
            kind: "ticket.created".to_string(),
        })
        .await;
    wake_a_worker(&state, &ticket.id).await;
    Ok((StatusCode::CREATED, Json(ticket.into())))
}

/// List tickets, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/tickets", tag = "tickets", params(ListQuery),
    responses((status = 200, body = TicketList), (status = 400, body = Problem),
        (status = 401, body = Problem), (status = 503, body = Problem)))]
pub async fn list(
    State(state): State<ApiState>,
    Params(query): Params<ListQuery>,
) -> Result<Json<TicketList>, ApiError> {
    let after = match &query.cursor {
        None => None,
        Some(text) => Some(Cursor::decode(text).ok_or_else(|| {
            ApiError::new(
                ApiCode::BadRequest,
                format!(
                    "cursor {text:?} is not one this API gave out: pass a page's `next` as it is"
                ),
            )
        })?),
    };
    let filter = TicketFilter {
        flow: query.flow,
        state: query.state.map(Into::into),
        revision: query.revision,
        created_after: query.created_after,
        created_before: query.created_before,
    };
    let page = state
        .store
        .tickets(&filter, after.as_ref(), limit(query.limit, 50, 500)?)
        .await?;
    Ok(Json(TicketList {
        tickets: page.tickets.into_iter().map(Into::into).collect(),
        next: page.next.map(|c| c.encode()),
    }))
}

/// One ticket.
#[utoipa::path(get, path = "/v1/tickets/{id}", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id")),
    responses((status = 200, body = TicketView), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 503, body = Problem)))]
pub async fn get(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<TicketView>, ApiError> {
    Ok(Json(state.store.ticket(&id).await?.into()))
}

/// Cancel a ticket that has not ended.
///
/// A running ticket's worker stops at once; money set aside for calls that never went out is
/// released.
#[utoipa::path(post, path = "/v1/tickets/{id}/cancel", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id")),
    request_body(content = Option<CancelTicket>),
    responses((status = 200, body = TicketView), (status = 400, body = Problem),
        (status = 401, body = Problem), (status = 404, body = Problem),
        (status = 409, description = "It has ended", body = Problem), (status = 503, body = Problem)))]
pub async fn cancel(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<TicketView>, ApiError> {
    // The body is optional: none, or a CancelTicket.
    let asked: CancelTicket = if body.iter().all(u8::is_ascii_whitespace) {
        CancelTicket::default()
    } else {
        serde_json::from_slice(&body).map_err(|err| {
            ApiError::new(
                ApiCode::BadRequest,
                format!("the body cannot be read: {err}"),
            )
        })?
    };
    let reason = asked
        .reason
        .unwrap_or_else(|| "cancelled through the API".to_string());
    let (ticket, events) = state.store.cancel(&id, &reason).await?;
    state.announce(&events).await;
    Ok(Json(ticket.into()))
}

/// Pause a queued or running ticket.
///
/// A running ticket's worker stops at once; the node it was running starts again on resume
/// (paid turns are journaled and not paid again).
#[utoipa::path(post, path = "/v1/tickets/{id}/pause", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id")),
    responses((status = 200, body = TicketView), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 503, body = Problem)))]
pub async fn pause(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<TicketView>, ApiError> {
    let (ticket, events) = state.store.pause(&id).await?;
    state.announce(&events).await;
    Ok(Json(ticket.into()))
}

/// Resume a paused ticket: it is queued again.
#[utoipa::path(post, path = "/v1/tickets/{id}/resume", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id")),
    responses((status = 200, body = TicketView), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 503, body = Problem)))]
pub async fn resume(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<TicketView>, ApiError> {
    let (ticket, events) = state.store.resume(&id).await?;
    state.announce(&events).await;
    wake_a_worker(&state, &ticket.id).await;
    Ok(Json(ticket.into()))
}

/// Rerun a ticket from one of its completed nodes, as a new ticket.
///
/// The new ticket has the same flow, input, revision and budget; the nodes before `from` are
/// copied completed with their outputs and checkpoints, so it restores their workspace and runs
/// `from` and everything after it.
#[utoipa::path(post, path = "/v1/tickets/{id}/rerun", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id")),
    request_body = RerunTicket,
    responses((status = 201, description = "The new ticket, queued", body = TicketView),
        (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 503, body = Problem)))]
pub async fn rerun(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    Body(rerun): Body<RerunTicket>,
) -> Result<(StatusCode, Json<TicketView>), ApiError> {
    let original = state.store.ticket(&id).await?;
    let document = state.document(&original.revision).await?;
    let flow = FrozenFlow::from_revision(&document, &original.flow)
        .map_err(|why| ApiError::new(ApiCode::NoSuchFlow, why))?;
    let order: Vec<String> = flow.order().iter().map(|n| n.id.clone()).collect();
    let Some(at) = order.iter().position(|n| *n == rerun.from) else {
        return Err(ApiError::new(
            ApiCode::NoSuchNode,
            format!(
                "flow {} has no node {:?}; its nodes are {}",
                original.flow,
                rerun.from,
                order.join(", ")
            ),
        ));
    };
    let (ticket, events) = state.store.rerun(&id, &rerun.from, &order[..at]).await?;
    state.announce(&events).await;
    wake_a_worker(&state, &ticket.id).await;
    Ok((StatusCode::CREATED, Json(ticket.into())))
}

/// A ticket's node runs, with their outputs.
#[utoipa::path(get, path = "/v1/tickets/{id}/nodes", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id")),
    responses((status = 200, body = Vec<NodeRunView>), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 503, body = Problem)))]
pub async fn nodes(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<NodeRunView>>, ApiError> {
    state.store.ticket(&id).await?;
    let runs = state.store.node_runs(&id).await?;
    Ok(Json(runs.into_iter().map(Into::into).collect()))
}

/// A ticket's ledger: every reservation and settlement, and the sums against its budget.
#[utoipa::path(get, path = "/v1/tickets/{id}/ledger", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id")),
    responses((status = 200, body = LedgerView), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 503, body = Problem)))]
pub async fn ledger(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<LedgerView>, ApiError> {
    let ticket = state.store.ticket(&id).await?;
    let entries = state.store.ledger(&id).await?;
    Ok(Json(LedgerView::of(entries, ticket.budget_micros)))
}

/// A ticket's events after `after`, in order.
#[utoipa::path(get, path = "/v1/tickets/{id}/events", tag = "events",
    params(("id" = String, Path, description = "The ticket's id"), EventsQuery),
    responses((status = 200, body = Vec<EventView>), (status = 400, body = Problem),
        (status = 401, body = Problem), (status = 404, body = Problem), (status = 503, body = Problem)))]
pub async fn events(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    Params(query): Params<EventsQuery>,
) -> Result<Json<Vec<EventView>>, ApiError> {
    state.store.ticket(&id).await?;
    let after = at_least_zero("after", query.after, 0)?;
    let events = state
        .store
        .events(&id, after, limit(query.limit, 200, 1000)?)
        .await?;
    Ok(Json(events.iter().map(Into::into).collect()))
}

/// A ticket's checkpoints: the workspace each node saved, in order.
#[utoipa::path(get, path = "/v1/tickets/{id}/checkpoints", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id")),
    responses((status = 200, body = Vec<CheckpointView>), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 503, body = Problem)))]
pub async fn checkpoints(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<CheckpointView>>, ApiError> {
    state.store.ticket(&id).await?;
    let checkpoints = state.store.checkpoints(&id).await?;
    Ok(Json(
        checkpoints
            .into_iter()
            .map(|c| CheckpointView {
                id: c.id,
                node: c.node,
                head: c.head,
                parent: c.parent,
                size: c.size,
            })
            .collect(),
    ))
}

/// What a node changed in the workspace: its checkpoint against the one before.
#[utoipa::path(get, path = "/v1/tickets/{id}/checkpoints/{checkpoint}/diff", tag = "tickets",
    params(("id" = String, Path, description = "The ticket's id"),
        ("checkpoint" = i64, Path, description = "The checkpoint's id")),
    responses((status = 200, body = WorkspaceDiffView), (status = 400, body = Problem),
        (status = 401, body = Problem), (status = 404, body = Problem),
        (status = 503, description = "The store is down, or git could not make the diff", body = Problem)))]
pub async fn checkpoint_diff(
    State(state): State<ApiState>,
    Path((id, checkpoint)): Path<(String, String)>,
) -> Result<Json<WorkspaceDiffView>, ApiError> {
    let checkpoint: i64 = checkpoint.parse().map_err(|_| {
        ApiError::new(
            ApiCode::BadRequest,
            format!("checkpoint {checkpoint:?} is not a checkpoint's id (a whole number)"),
        )
    })?;
    state.store.ticket(&id).await?;
    match crate::workspace::diff(state.store.as_ref(), &id, checkpoint).await {
        Ok(made) => Ok(Json(WorkspaceDiffView {
            checkpoint: made.checkpoint.id,
            node: made.checkpoint.node,
            from: made.from,
            to: made.checkpoint.head,
            diff: made.text,
            truncated: made.truncated,
        })),
        Err(DiffError::Store(err)) => Err(err.into()),
        Err(DiffError::NoCheckpoint(n)) => Err(afe_store::StoreError::NotFound {
            what: format!("checkpoint {n} of ticket {id}"),
        }
        .into()),
        Err(DiffError::Git(why)) => Err(ApiError::new(
            ApiCode::NoDiff,
            format!("the workspace diff cannot be made: {why}"),
        )),
    }
}
