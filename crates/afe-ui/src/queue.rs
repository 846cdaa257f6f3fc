//! The workers and the queue: the lag, who holds which running ticket and until when (a lease
//! its worker's heartbeat keeps pushing on; one that has run out belongs to a worker that went
//! quiet, and the next worker takes the ticket over), and the dead letters.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;
use serde_json::Value;

use crate::Ui;
use crate::layout::{page, refusal};
use crate::session::Person;
use crate::time::{ago, now_ms};

/// `worker-host-1:0` → `worker-host-1`: the process, whatever slot holds the ticket.
fn process(consumer: &str) -> &str {
    consumer
        .rsplit_once(':')
        .map_or(consumer, |(process, _)| process)
}

pub async fn view(State(ui): State<Ui>, person: Person) -> Response {
    let body = match ui.api.get("/v1/queue", &person.token).await {
        Err(refused) => refusal(&refused),
        Ok(queue) => {
            let now = now_ms();
            let leases = queue["leases"].as_array().cloned().unwrap_or_default();
            let mut workers: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
            for lease in &leases {
                let worker = lease["worker"].as_str().map(process).unwrap_or("(none)");
                workers.entry(worker.to_string()).or_default().push(lease);
            }
            let dead = queue["deadLetters"].as_array().cloned().unwrap_or_default();
            html! {
                p { "Queue lag: " strong id="queue-depth" { (queue["depth"].as_u64().unwrap_or(0)) } " entries waiting or being worked on." }
                h2 { "Workers" }
                @if workers.is_empty() { p { "No ticket is running." } }
                @for (worker, held) in &workers {
                    h3 { code { (worker) } " — " (held.len()) " ticket(s)" }
                    div class="scroll" {
                        table {
                            caption class="visually-hidden" { "Leases of " (worker) }
                            thead { tr { th { "Ticket" } th { "Flow" } th { "Epoch" } th { "Lease" } th { "Last write" } } }
                            tbody {
                                @for lease in held {
                                    @let id = lease["ticket"].as_str().unwrap_or("");
                                    tr {
                                        td { a href={ "/ui/tickets/" (id) } { code { (id.get(..8).unwrap_or(id)) } } }
                                        td { (lease["flow"].as_str().unwrap_or("")) }
                                        td { (lease["epoch"].as_i64().unwrap_or(0)) }
                                        td {
                                            @match lease["expiresAt"].as_i64() {
                                                Some(at) if at > now => { "ends in " ((at - now) / 1000) " s" }
                                                Some(at) => { span class="state state-stuck" { "ran out " (ago(at, now)) " ago" } }
                                                None => { "released" }
                                            }
                                        }
                                        td { (ago(lease["updatedAt"].as_i64().unwrap_or(0), now)) " ago" }
                                    }
                                }
                            }
                        }
                    }
                }
                h2 { "Dead letters" }
                @if dead.is_empty() { p { "None." } } @else {
                    ul {
                        @for d in &dead {
                            @let id = d["ticket"].as_str().unwrap_or("");
                            li { a href={ "/ui/tickets/" (id) } { code { (id) } } " — " (d["reason"].as_str().unwrap_or("")) " (" (d["deliveries"].as_u64().unwrap_or(0)) " deliveries)" }
                        }
                    }
                }
            }
        }
    };
    page("Workers and queue", Some(&person.csrf), body).into_response()
}
