//! The tickets view: newest first, filtered by flow, state and revision, a page at a time; a
//! running ticket with no progress for a while is marked stuck.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;
use serde_json::Value;

use crate::layout::{Live, live_page, refusal, state};
use crate::session::Person;
use crate::time::{ago, now_ms, utc};
use crate::{Ui, query_string};

/// A running ticket none of whose writes came for this long is shown as stuck.
pub const STUCK_AFTER_MS: i64 = 5 * 60 * 1000;

#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    #[serde(default)]
    flow: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    revision: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

const STATES: [&str; 6] = ["queued", "running", "paused", "done", "failed", "cancelled"];

/// Whether a ticket is running with no progress for `STUCK_AFTER_MS`.
pub fn stuck(ticket: &Value, now: i64) -> bool {
    ticket["state"] == "running"
        && ticket["updatedAt"]
            .as_i64()
            .is_some_and(|at| now - at > STUCK_AFTER_MS)
}

pub async fn view(State(ui): State<Ui>, person: Person, Query(filter): Query<Filter>) -> Response {
    let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let params: Vec<(&str, String)> = [
        ("flow", nonempty(&filter.flow)),
        ("state", nonempty(&filter.state)),
        ("revision", nonempty(&filter.revision)),
        ("cursor", nonempty(&filter.cursor)),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect();
    let listed = ui
        .api
        .get(
            &format!("/v1/tickets?limit=50&{}", query_string(&params)),
            &person.token,
        )
        .await;
    let now = now_ms();
    let body = match &listed {
        Err(refused) => refusal(refused),
        Ok(list) => {
            let tickets = list["tickets"].as_array().cloned().unwrap_or_default();
            let next = list["next"].as_str().map(|cursor| {
                let mut next: Vec<(&str, String)> = params
                    .iter()
                    .filter(|(k, _)| *k != "cursor")
                    .cloned()
                    .collect();
                next.push(("cursor", cursor.to_string()));
                format!("/ui?{}", query_string(&next))
            });
            html! {
                form method="get" action="/ui" class="filters" {
                    label { "Flow " input type="text" name="flow" value=[filter.flow.as_deref()]; }
                    label { "State "
                        select name="state" {
                            option value="" { "any" }
                            @for s in STATES {
                                option value=(s) selected[filter.state.as_deref() == Some(s)] { (s) }
                            }
                        }
                    }
                    label { "Revision " input type="text" name="revision" value=[filter.revision.as_deref()]; }
                    button type="submit" { "Filter" }
                }
                p id="new-tickets" role="status" hidden { "New tickets have started: " a href="/ui" { "show them" } }
                @if tickets.is_empty() {
                    p { "No tickets." }
                } @else {
                    div class="scroll" {
                        table {
                            caption class="visually-hidden" { "Tickets, newest first" }
                            thead { tr { th { "Ticket" } th { "Flow" } th { "State" } th { "Revision" } th { "Created" } th { "Last change" } } }
                            tbody {
                                @for t in &tickets {
                                    @let id = t["id"].as_str().unwrap_or("");
                                    tr id={ "ticket-" (id) } {
                                        td { a href={ "/ui/tickets/" (id) } { code { (id.get(..8).unwrap_or(id)) } } }
                                        td { (t["flow"].as_str().unwrap_or("")) }
                                        td {
                                            (state(t["state"].as_str().unwrap_or("")))
                                            @if stuck(t, now) { " " span class="state state-stuck" title="running, with no progress for five minutes" { "stuck" } }
                                        }
                                        td { code { (t["revision"].as_str().unwrap_or("").get(..12).unwrap_or("")) } }
                                        td { (utc(t["createdAt"].as_i64().unwrap_or(0))) }
                                        td { (ago(t["updatedAt"].as_i64().unwrap_or(0), now)) " ago" }
                                    }
                                }
                            }
                        }
                    }
                }
                @if let Some(next) = next { p { a href=(next) { "Older tickets →" } } }
            }
        }
    };
    live_page("Tickets", Some(&person.csrf), Live::Tickets, body).into_response()
}
