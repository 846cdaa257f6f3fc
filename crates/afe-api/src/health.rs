//! Probes, metrics and the API's own description.

use std::fmt::Write;

use afe_store::{Stats, TicketState};
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::ApiState;
use crate::error::{ApiError, Problem};
use crate::views::{DeadLetterView, Health, LeaseView, QueueView};

/// Liveness: the process answers. Needs no token.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_string(),
        problems: Vec::new(),
    })
}

/// Readiness: the store and the broker answer. Needs no token.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, body = Health),
        (status = 503, description = "The store or the broker does not answer", body = Health)))]
pub async fn readyz(State(state): State<ApiState>) -> (StatusCode, Json<Health>) {
    let (store, queue) = tokio::join!(state.store.ping(), state.queue.depth());
    let mut problems = Vec::new();
    if let Err(err) = store {
        problems.push(err.to_string());
    }
    if let Err(err) = queue {
        problems.push(err.to_string());
    }
    if problems.is_empty() {
        (
            StatusCode::OK,
            Json(Health {
                status: "ok".to_string(),
                problems,
            }),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "unavailable".to_string(),
                problems,
            }),
        )
    }
}

/// Prometheus metrics: tickets by state, queue lag, node durations, spend, live subscribers.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String),
        (status = 401, body = Problem), (status = 503, body = Problem)))]
pub async fn metrics(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let stats = state.store.stats().await?;
    let depth = state.queue.depth().await?;
    let text = render(&stats, depth, state.hub.subscribers());
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// A label value, escaped as the text format wants.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn usd(micros: i64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// The Prometheus text exposition of what the store and the queue report.
pub fn render(stats: &Stats, queue_depth: u64, subscribers: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# HELP afe_tickets Tickets by state.");
    let _ = writeln!(out, "# TYPE afe_tickets gauge");
    for state in [
        TicketState::Queued,
        TicketState::Running,
        TicketState::Paused,
        TicketState::Done,
        TicketState::Failed,
        TicketState::Cancelled,
    ] {
        let count = stats
            .tickets_by_state
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n);
        let _ = writeln!(out, "afe_tickets{{state=\"{state}\"}} {count}");
    }
    let _ = writeln!(
        out,
        "# HELP afe_queue_depth Queue entries waiting or being worked on: the lag workers scale on."
    );
    let _ = writeln!(out, "# TYPE afe_queue_depth gauge");
    let _ = writeln!(out, "afe_queue_depth {queue_depth}");
    let _ = writeln!(
        out,
        "# HELP afe_spent_usd_total Money settled with model providers, every ticket."
    );
    let _ = writeln!(out, "# TYPE afe_spent_usd_total counter");
    let _ = writeln!(out, "afe_spent_usd_total {}", usd(stats.spent_micros));
    let _ = writeln!(
        out,
        "# HELP afe_reserved_usd Money set aside for calls not settled yet."
    );
    let _ = writeln!(out, "# TYPE afe_reserved_usd gauge");
    let _ = writeln!(out, "afe_reserved_usd {}", usd(stats.reserved_micros));
    let _ = writeln!(
        out,
        "# HELP afe_node_duration_seconds How long completed node runs took, by flow and node."
    );
    let _ = writeln!(out, "# TYPE afe_node_duration_seconds summary");
    for d in &stats.node_durations {
        let labels = format!("flow=\"{}\",node=\"{}\"", label(&d.flow), label(&d.node));
        let _ = writeln!(
            out,
            "afe_node_duration_seconds_sum{{{labels}}} {}",
            d.total_ms as f64 / 1000.0
        );
        let _ = writeln!(
            out,
            "afe_node_duration_seconds_count{{{labels}}} {}",
            d.count
        );
    }
    let _ = writeln!(
        out,
        "# HELP afe_live_subscribers Live event streams open on this replica."
    );
    let _ = writeln!(out, "# TYPE afe_live_subscribers gauge");
    let _ = writeln!(out, "afe_live_subscribers {subscribers}");
    out
}

/// The queue and the workers: the lag, the running tickets' leases (who holds each, until when),
/// and the dead letters.
#[utoipa::path(get, path = "/v1/queue", tag = "health",
    responses((status = 200, body = QueueView), (status = 401, body = Problem),
        (status = 503, body = Problem)))]
pub async fn queue(State(state): State<ApiState>) -> Result<Json<QueueView>, ApiError> {
    let running = afe_store::TicketFilter {
        state: Some(TicketState::Running),
        ..afe_store::TicketFilter::default()
    };
    let page = state.store.tickets(&running, None, 500).await?;
    let mut leases: Vec<LeaseView> = page
        .tickets
        .into_iter()
        .map(|t| LeaseView {
            ticket: t.id,
            flow: t.flow,
            worker: t.lease_owner,
            epoch: t.lease_epoch,
            expires_at: t.lease_expires_at,
            updated_at: t.updated_at,
        })
        .collect();
    leases.sort_by_key(|l| l.updated_at);
    let depth = state.queue.depth().await?;
    let dead_letters = state
        .queue
        .dead_letters()
        .await?
        .into_iter()
        .map(|d| DeadLetterView {
            ticket: d.ticket,
            reason: d.reason,
            deliveries: d.deliveries,
        })
        .collect();
    Ok(Json(QueueView {
        depth,
        leases,
        dead_letters,
    }))
}

/// This API's OpenAPI document.
#[utoipa::path(get, path = "/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object),
        (status = 401, body = Problem)))]
pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi_text(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use afe_store::NodeDurations;

    #[test]
    fn metrics_name_every_state_and_escape_labels() {
        let stats = Stats {
            tickets_by_state: vec![(TicketState::Running, 3)],
            spent_micros: 1_250_000,
            reserved_micros: 10,
            node_durations: vec![NodeDurations {
                flow: "f\"x".into(),
                node: "n".into(),
                count: 2,
                total_ms: 1500,
            }],
        };
        let text = render(&stats, 7, 4);
        assert!(text.contains("afe_tickets{state=\"running\"} 3\n"));
        assert!(text.contains("afe_tickets{state=\"paused\"} 0\n"));
        assert!(text.contains("afe_queue_depth 7\n"));
        assert!(text.contains("afe_spent_usd_total 1.25\n"));
        assert!(text.contains("afe_node_duration_seconds_sum{flow=\"f\\\"x\",node=\"n\"} 1.5\n"));
        assert!(text.contains("afe_node_duration_seconds_count{flow=\"f\\\"x\",node=\"n\"} 2\n"));
        assert!(text.contains("afe_live_subscribers 4\n"));
    }
}
