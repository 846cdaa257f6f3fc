//! Live events over WebSocket and Server-Sent Events, per ticket and for all tickets. A message
//! is one event as JSON (`EventView`); over SSE its `id` is the event's `seq`, so a browser's
//! EventSource reconnects with `Last-Event-ID` and misses nothing.

use std::convert::Infallible;
use std::sync::Arc;

use afe_store::Event;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;

use crate::ApiState;
use crate::error::{ApiCode, ApiError, Problem};
use crate::extract::{Params, at_least_zero};
use crate::live::{AllSubscription, CLOSE_TOO_SLOW, Ended, Subscription};
use crate::views::{AllEventsQuery, EventView, EventsQuery};

/// Either kind of subscription, as the pumps below read it.
enum Source {
    Ticket(Subscription),
    All(AllSubscription),
}

impl Source {
    async fn next(&mut self) -> Result<Arc<Event>, Ended> {
        match self {
            Source::Ticket(s) => s.next().await,
            Source::All(s) => s.next().await,
        }
    }
}

fn json(event: &Event) -> String {
    serde_json::to_string(&EventView::from(event)).expect("an event serializes")
}

/// Where a per-ticket stream starts: `after`, else the `Last-Event-ID` header, else 0.
fn start_after(query: &EventsQuery, headers: &HeaderMap) -> Result<i64, ApiError> {
    if query.after.is_some() {
        return at_least_zero("after", query.after, 0);
    }
    match headers.get("last-event-id") {
        None => Ok(0),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map(|v| v.max(0))
            .ok_or_else(|| {
                ApiError::new(
                    ApiCode::BadRequest,
                    "Last-Event-ID is not an event's seq (a whole number)",
                )
            }),
    }
}

async fn subscribe_ticket(
    state: &ApiState,
    id: &str,
    query: &EventsQuery,
    headers: &HeaderMap,
) -> Result<Source, ApiError> {
    let after = start_after(query, headers)?;
    state.store.ticket(id).await?;
    // Subscribed before anything is read: the replay and the live feed overlap, never gap.
    Ok(Source::Ticket(state.hub.subscribe(id, after).await?))
}

/// A ticket's events, live, over a WebSocket.
///
/// Replays the events after `after` (or `Last-Event-ID`), then sends each new one as a text
/// message of JSON. A client too slow to keep up is closed with code 1013; it reconnects with
/// `after` set to the last `seq` it has.
#[utoipa::path(get, path = "/v1/tickets/{id}/events/ws", tag = "events",
    params(("id" = String, Path, description = "The ticket's id"), EventsQuery),
    responses((status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 503, body = Problem)))]
pub async fn ticket_ws(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    Params(query): Params<EventsQuery>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = small(upgrade.map_err(|_| not_a_websocket())?);
    let source = subscribe_ticket(&state, &id, &query, &headers).await?;
    let timeout = state.hub.settings().send_timeout;
    Ok(upgrade.on_upgrade(move |socket| pump_ws(socket, source, timeout)))
}

/// Every ticket's events, live, over a WebSocket (`since`: replay those written since then).
#[utoipa::path(get, path = "/v1/events/ws", tag = "events", params(AllEventsQuery),
    responses((status = 101, description = "Switching to the WebSocket protocol"),
        (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn all_ws(
    State(state): State<ApiState>,
    Params(query): Params<AllEventsQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = small(upgrade.map_err(|_| not_a_websocket())?);
    let since = query
        .since
        .map(|since| at_least_zero("since", Some(since), 0))
        .transpose()?;
    let source = Source::All(state.hub.subscribe_all(since));
    let timeout = state.hub.settings().send_timeout;
    Ok(upgrade.on_upgrade(move |socket| pump_ws(socket, source, timeout)))
}

/// A live stream only sends: its clients say nothing but control frames, and each event is
/// written out as it comes. Small buffers keep a subscriber's memory small (the library's
/// defaults, 128 KiB each way, made a thousand subscribers cost 131 KiB each).
fn small(upgrade: WebSocketUpgrade) -> WebSocketUpgrade {
    upgrade
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_message_size(64 * 1024)
        .max_frame_size(64 * 1024)
}

fn not_a_websocket() -> ApiError {
    ApiError::new(
        ApiCode::BadRequest,
        "this route speaks WebSocket: send an Upgrade request (or use the …/sse route)",
    )
}

async fn pump_ws(mut socket: WebSocket, mut source: Source, timeout: std::time::Duration) {
    loop {
        tokio::select! {
            next = source.next() => {
                let close = match next {
                    Ok(event) => {
                        let sent = tokio::time::timeout(timeout, socket.send(Message::Text(json(&event).into()))).await;
                        match sent {
                            Ok(Ok(())) => continue,
                            // Gone, or not reading: nothing more can be sent to it.
                            _ => return,
                        }
                    }
                    Err(Ended::TooSlow { last }) => CloseFrame {
                        code: CLOSE_TOO_SLOW,
                        reason: format!("too slow; reconnect with after={last}").into(),
                    },
                    Err(Ended::Store(err)) => CloseFrame {
                        code: 1011,
                        reason: err.code().into(),
                    },
                    Err(Ended::Closed) => CloseFrame { code: 1001, reason: "going away".into() },
                };
                let _ = tokio::time::timeout(timeout, socket.send(Message::Close(Some(close)))).await;
                return;
            }
            received = socket.recv() => match received {
                // Pings are answered by the library; anything else a client says is ignored.
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
        }
    }
}

fn sse(source: Source) -> Sse<impl Stream<Item = Result<axum::response::sse::Event, Infallible>>> {
    let stream = futures_util::stream::unfold(Some(source), |source| async move {
        let mut source = source?;
        let item = match source.next().await {
            Ok(event) => axum::response::sse::Event::default()
                .id(event.seq.to_string())
                .event(event.kind.clone())
                .data(json(&event)),
            // The stream ends after saying why; an EventSource reconnects with Last-Event-ID.
            Err(Ended::TooSlow { last }) => {
                return Some((
                    Ok(axum::response::sse::Event::default()
                        .event("afe.dropped")
                        .data(format!("too slow; reconnect with after={last}"))),
                    None,
                ));
            }
            Err(_) => return None,
        };
        Some((Ok(item), Some(source)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// A ticket's events, live, as Server-Sent Events (the fallback where WebSocket is not
/// possible). Each event's `id` is its `seq`; `event` is its kind.
#[utoipa::path(get, path = "/v1/tickets/{id}/events/sse", tag = "events",
    params(("id" = String, Path, description = "The ticket's id"), EventsQuery),
    responses((status = 200, description = "An event stream", content_type = "text/event-stream", body = String),
        (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 503, body = Problem)))]
pub async fn ticket_sse(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    Params(query): Params<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let source = subscribe_ticket(&state, &id, &query, &headers).await?;
    Ok(sse(source).into_response())
}

/// Every ticket's events, live, as Server-Sent Events.
#[utoipa::path(get, path = "/v1/events/sse", tag = "events", params(AllEventsQuery),
    responses((status = 200, description = "An event stream", content_type = "text/event-stream", body = String),
        (status = 400, body = Problem), (status = 401, body = Problem)))]
pub async fn all_sse(
    State(state): State<ApiState>,
    Params(query): Params<AllEventsQuery>,
) -> Result<Response, ApiError> {
    let since = query
        .since
        .map(|since| at_least_zero("since", Some(since), 0))
        .transpose()?;
    Ok(sse(Source::All(state.hub.subscribe_all(since))).into_response())
}
