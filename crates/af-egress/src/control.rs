//! The control API: the decision log, the inbox, webhook delivery, health and metrics, for the
//! host side only. Every route but `/healthz` needs the environment's bearer token, and a
//! connection that arrives on one of the sidecar's workload-facing addresses is closed unread.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use af_runtime::{DecisionQuery, InboxEntry, Verdict, WebhookRequest};
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use tokio::net::TcpListener;

use crate::context::Shared;
use crate::decision_log::matches;
use crate::webhook;

struct ControlState {
    shared: Arc<Shared>,
    token: String,
    webhooks: BTreeMap<String, String>,
}

/// Serves the control API until the listener fails for good.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    token: String,
    webhooks: BTreeMap<String, String>,
    workload_addresses: Vec<IpAddr>,
) {
    let state = Arc::new(ControlState {
        shared,
        token,
        webhooks,
    });
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/decisions", get(decisions))
        .route("/v1/inbox", get(inbox_list).delete(inbox_clear))
        .route("/v1/inbox/{id}", get(inbox_show))
        .route("/v1/webhooks", post(trigger_webhook))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(state);
    let workload_addresses = Arc::new(workload_addresses);
    crate::accept::accept_forever(listener, "control", |stream, peer| {
        let (router, workload_addresses) = (router.clone(), workload_addresses.clone());
        async move {
            // Workloads must never reach the control API; refuse on their side whatever the bind.
            match stream.local_addr() {
                Ok(local) if !workload_addresses.contains(&local.ip()) => {}
                _ => return tracing::warn!(%peer, "control connection on a workload-facing address refused"),
            }
            let service = TowerToHyperService::new(router.layer(axum::Extension(ConnectInfo(peer))));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    })
    .await;
}

/// Compares in time independent of where the strings differ, so the token cannot be guessed a
/// byte at a time.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn require_token(
    State(state): State<Arc<ControlState>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(token) if same_secret(token.as_bytes(), state.token.as_bytes()) => {
            next.run(request).await
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            "a bearer token is required: Authorization: Bearer <the environment's control token>\n",
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<Arc<ControlState>>) -> Response {
    let shared = &state.shared;
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared
            .metrics
            .render(&shared.log, &shared.inbox, &shared.in_flight()),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct DecisionParams {
    verdict: Option<Verdict>,
    host: Option<String>,
    since: Option<String>,
    #[serde(default)]
    follow: bool,
}

/// JSON lines: the stored decisions that match, and with `follow=true` every new one as it is made.
async fn decisions(
    State(state): State<Arc<ControlState>>,
    Query(params): Query<DecisionParams>,
) -> Response {
    let query = DecisionQuery {
        verdict: params.verdict,
        host: params.host,
        since: params.since,
    };
    // Subscribe before reading the stored records, so nothing made in between is lost.
    let live = params.follow.then(|| state.shared.log.subscribe());
    let stored = match state.shared.log.query(&query) {
        Ok(stored) => stored,
        Err(err) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read the decision log: {err}\n"),
            )
                .into_response();
        }
    };
    let mut text = String::new();
    for record in &stored {
        if let Ok(line) = serde_json::to_string(record) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    let content_type = [(header::CONTENT_TYPE, "application/x-ndjson")];
    let Some(live) = live else {
        return (content_type, text).into_response();
    };
    let first = futures_util::stream::once(async move { Ok::<_, Infallible>(Bytes::from(text)) });
    let rest = futures_util::stream::unfold((live, query), |(mut live, query)| async move {
        loop {
            match live.recv().await {
                Ok(record) if matches(&record, &query) => {
                    let mut line = serde_json::to_string(&*record).unwrap_or_default();
                    line.push('\n');
                    return Some((Ok::<_, Infallible>(Bytes::from(line)), (live, query)));
                }
                Ok(_) => continue,
                // A follower that fell behind skips what it missed rather than ending.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    (
        content_type,
        Body::from_stream(futures_util::StreamExt::chain(first, rest)),
    )
        .into_response()
}

async fn inbox_list(State(state): State<Arc<ControlState>>) -> Response {
    let entries = state.shared.inbox.list();
    axum::Json(
        entries
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<&InboxEntry>>(),
    )
    .into_response()
}

async fn inbox_show(State(state): State<Arc<ControlState>>, Path(id): Path<String>) -> Response {
    match state.shared.inbox.get(&id) {
        Some(entry) => axum::Json(entry.as_ref()).into_response(),
        None => (StatusCode::NOT_FOUND, format!("no inbox entry {id}\n")).into_response(),
    }
}

async fn inbox_clear(State(state): State<Arc<ControlState>>) -> Response {
    axum::Json(serde_json::json!({ "removed": state.shared.inbox.clear() })).into_response()
}

async fn trigger_webhook(
    State(state): State<Arc<ControlState>>,
    axum::Extension(ConnectInfo(peer)): axum::Extension<ConnectInfo<SocketAddr>>,
    axum::Json(request): axum::Json<WebhookRequest>,
) -> Response {
    match webhook::deliver(&request, &state.webhooks, &state.shared, peer).await {
        Ok(delivery) => axum::Json(delivery).into_response(),
        Err(why) => (StatusCode::BAD_GATEWAY, format!("{why}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::same_secret;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcdef", b"0123456789abcdeX"));
        assert!(!same_secret(b"0123", b"0123456789abcdef"));
    }
}
