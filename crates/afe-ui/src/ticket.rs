//! One ticket: its flow's nodes with their states, outputs and errors, the ledger against the
//! budget, the event timeline, the revision it is pinned to, and what a person may do to it.

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Ui;
use crate::graph;
use crate::layout::{Live, live_page, page, refusal, state};
use crate::session::{Person, allowed};
use crate::time::utc;

fn usd(micros: Option<i64>) -> String {
    match micros {
        Some(m) => format!("${:.4}", m as f64 / 1_000_000.0),
        None => "no limit".to_string(),
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn needs_of(node: &Value) -> Vec<String> {
    node["needs"]
        .as_array()
        .map(|needs| {
            needs
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// What a node was given: the ticket's input under its Schema's name and the output of every
/// completed node it comes after (its needs, and theirs), each under its id as the node's
/// expressions name it (`-` written `_`).
fn node_input(
    node: &Value,
    declared: &[Value],
    runs: &[Value],
    schema: &str,
    input: &Value,
) -> Value {
    let variable = |name: &str| name.replace('-', "_");
    let mut seen = serde_json::Map::new();
    seen.insert(variable(schema), input.clone());
    let mut pending = needs_of(node);
    while let Some(need) = pending.pop() {
        if seen.contains_key(&variable(&need)) {
            continue;
        }
        if let Some(run) = runs
            .iter()
            .find(|r| r["node"] == need.as_str() && r["state"] == "completed")
        {
            seen.insert(variable(&need), run["output"].clone());
        }
        if let Some(upstream) = declared.iter().find(|n| n["id"] == need.as_str()) {
            pending.extend(needs_of(upstream));
        }
    }
    Value::Object(seen)
}

/// The flow's nodes: a graph of them and their states, then each in file order with its
/// definition, what it was given, its run (if any), what it said and did (its events: model
/// turns, tool calls and results, an ACP agent's updates, the proxy's decisions), and a link to
/// the diff of the workspace it saved.
fn nodes(
    ticket: &Value,
    document: &Value,
    runs: &[Value],
    checkpoints: &[Value],
    events: &[Value],
) -> Markup {
    let flow = ticket["flow"].as_str().unwrap_or("");
    let id_of_ticket = ticket["id"].as_str().unwrap_or("");
    let declared = document
        .pointer(&format!("/flows/{flow}/nodes"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let schema = document
        .pointer(&format!("/flows/{flow}/input"))
        .and_then(Value::as_str)
        .unwrap_or("input");
    let drawn: Vec<(String, Vec<String>, String)> = declared
        .iter()
        .map(|node| {
            let id = node["id"].as_str().unwrap_or("");
            let run_state = runs
                .iter()
                .find(|r| r["node"] == id)
                .and_then(|r| r["state"].as_str())
                .unwrap_or("pending");
            (id.to_string(), needs_of(node), run_state.to_string())
        })
        .collect();
    html! {
        (graph::render(&drawn))
        ol class="nodes" {
            @for node in &declared {
                @let id = node["id"].as_str().unwrap_or("");
                @let run = runs.iter().find(|r| r["node"] == id);
                @let run_state = run.and_then(|r| r["state"].as_str()).unwrap_or("pending");
                @let kind = ["git", "agent", "deep", "acp", "exec"].into_iter().find(|k| node.get(*k).is_some()).unwrap_or("node");
                li id={ "node-" (id) } class="node" {
                    div class="node-head" {
                        strong { (id) } " " span class="kind" { (kind) } " " (state(run_state))
                        @if let Some(needs) = node["needs"].as_array() {
                            @if !needs.is_empty() {
                                span class="needs" { " after " (needs.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")) }
                            }
                        }
                    }
                    details { summary { "Definition" } pre { (pretty(node)) } }
                    @if run.is_some() {
                        details { summary { "Input" } pre { (pretty(&node_input(node, &declared, runs, schema, &ticket["input"]))) } }
                    }
                    @if let Some(run) = run {
                        p class="meta" {
                            "attempts " (run["attempts"].as_i64().unwrap_or(0))
                            " · started " (utc(run["startedAt"].as_i64().unwrap_or(0)))
                            @if let Some(at) = run["finishedAt"].as_i64() { " · finished " (utc(at)) }
                        }
                        @if let Some(error) = run["error"].as_str() {
                            div class="problem" { p { (error) } }
                        }
                        @if !run["output"].is_null() {
                            details { summary { "Output" } pre { (pretty(&run["output"])) } }
                        }
                    }
                    @let own: Vec<&Value> = events.iter().filter(|e| e["payload"]["node"] == id && !e["kind"].as_str().unwrap_or("").starts_with("node.")).collect();
                    @if !own.is_empty() {
                        details {
                            summary { "Calls and events (" (own.len()) ")" }
                            ol class="timeline" {
                                @for e in &own {
                                    li { code { (e["kind"].as_str().unwrap_or("")) } pre { (pretty(&e["payload"])) } }
                                }
                            }
                        }
                    }
                    @for checkpoint in checkpoints.iter().filter(|c| c["node"] == id) {
                        p { a href={ "/ui/tickets/" (id_of_ticket) "/checkpoints/" (checkpoint["id"].as_i64().unwrap_or(0)) } { "Workspace diff" } " (" (checkpoint["size"].as_i64().unwrap_or(0)) " bytes saved)" }
                    }
                }
            }
        }
    }
}

/// Each node's settled and open money, in the order the node first appears in the ledger.
fn per_node(entries: &[Value]) -> Vec<(String, i64, i64)> {
    let mut sums: Vec<(String, i64, i64)> = Vec::new();
    for e in entries {
        let node = e["node"].as_str().unwrap_or("").to_string();
        let at = match sums.iter().position(|(n, _, _)| *n == node) {
            Some(at) => at,
            None => {
                sums.push((node, 0, 0));
                sums.len() - 1
            }
        };
        sums[at].1 += e["settledMicros"].as_i64().unwrap_or(0);
        if e["state"] == "reserved" {
            sums[at].2 += e["reservedMicros"].as_i64().unwrap_or(0);
        }
    }
    sums
}

fn ledger(ledger: &Value) -> Markup {
    let entries = ledger["entries"].as_array().cloned().unwrap_or_default();
    html! {
        p {
            "Spent " strong { (usd(ledger["spentMicros"].as_i64())) }
            ", reserved " (usd(ledger["reservedMicros"].as_i64()))
            ", budget " (usd(ledger["budgetMicros"].as_i64()))
        }
        @if !entries.is_empty() {
            ul class="per-node" aria-label="Money per node" {
                @for (node, spent, reserved) in per_node(&entries) {
                    li { strong { (node) } ": spent " (usd(Some(spent))) @if reserved > 0 { ", reserved " (usd(Some(reserved))) } }
                }
            }
        }
        @if !entries.is_empty() {
            div class="scroll" {
                table {
                    caption class="visually-hidden" { "Ledger entries" }
                    thead { tr { th { "Node" } th { "Provider" } th { "Reserved" } th { "Settled" } th { "Tokens in / out" } th { "State" } } }
                    tbody {
                        @for e in &entries {
                            tr {
                                td { (e["node"].as_str().unwrap_or("")) }
                                td { (e["provider"].as_str().unwrap_or("")) }
                                td { (usd(e["reservedMicros"].as_i64())) }
                                td { (e["settledMicros"].as_i64().map(|m| usd(Some(m))).unwrap_or_default()) }
                                td { (e["tokensIn"].as_i64().unwrap_or(0)) " / " (e["tokensOut"].as_i64().unwrap_or(0)) }
                                td { (e["state"].as_str().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn timeline(events: &[Value]) -> Markup {
    html! {
        ol class="timeline" id="timeline" {
            @for e in events {
                li id={ "event-" (e["seq"].as_i64().unwrap_or(0)) } {
                    span class="seq" { "#" (e["seq"].as_i64().unwrap_or(0)) } " "
                    code { (e["kind"].as_str().unwrap_or("")) } " "
                    span class="meta" { (utc(e["at"].as_i64().unwrap_or(0))) }
                    @if let Some(node) = e["payload"]["node"].as_str() { " " span class="needs" { (node) } }
                }
            }
        }
    }
}

fn actions(id: &str, ticket_state: &str, runs: &[Value], csrf: &str) -> Markup {
    let completed: Vec<&str> = runs
        .iter()
        .filter(|r| r["state"] == "completed")
        .filter_map(|r| r["node"].as_str())
        .collect();
    html! {
        div class="actions" id="actions" {
            @if matches!(ticket_state, "queued" | "running" | "paused") {
                form method="post" action={ "/ui/tickets/" (id) "/cancel" } {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" class="danger" { "Cancel" }
                }
            }
            @if matches!(ticket_state, "queued" | "running") {
                form method="post" action={ "/ui/tickets/" (id) "/pause" } {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" { "Pause" }
                }
            }
            @if ticket_state == "paused" {
                form method="post" action={ "/ui/tickets/" (id) "/resume" } {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" { "Resume" }
                }
            }
            @if !completed.is_empty() {
                form method="post" action={ "/ui/tickets/" (id) "/rerun" } class="rerun" {
                    input type="hidden" name="csrf" value=(csrf);
                    label { "Rerun from "
                        select name="from" {
                            @for node in &completed { option value=(node) { (node) } }
                        }
                    }
                    label class="confirm" {
                        input type="checkbox" name="confirm" value="yes" required;
                        " I understand this starts a new ticket, whose model calls are paid again"
                    }
                    button type="submit" { "Rerun" }
                }
            }
        }
    }
}

pub async fn view(State(ui): State<Ui>, person: Person, Path(id): Path<String>) -> Response {
    let token = &person.token;
    let ticket = match ui.api.get(&format!("/v1/tickets/{id}"), token).await {
        Ok(ticket) => ticket,
        Err(refused) => {
            let status = refused.status;
            return (
                status,
                page("Ticket", Some(&person.csrf), refusal(&refused)),
            )
                .into_response();
        }
    };
    let revision = ticket["revision"].as_str().unwrap_or("").to_string();
    let paths = [
        format!("/v1/tickets/{id}/nodes"),
        format!("/v1/tickets/{id}/ledger"),
        format!("/v1/tickets/{id}/events?limit=1000"),
        format!("/v1/revisions/{revision}"),
        format!("/v1/tickets/{id}/checkpoints"),
    ];
    let (runs, money, events, document, checkpoints) = tokio::join!(
        ui.api.get(&paths[0], token),
        ui.api.get(&paths[1], token),
        ui.api.get(&paths[2], token),
        ui.api.get(&paths[3], token),
        ui.api.get(&paths[4], token),
    );
    let checkpoints = checkpoints
        .ok()
        .and_then(|c| c.as_array().cloned())
        .unwrap_or_default();
    let runs = runs
        .ok()
        .and_then(|r| r.as_array().cloned())
        .unwrap_or_default();
    let events = events
        .ok()
        .and_then(|e| e.as_array().cloned())
        .unwrap_or_default();
    let document = document
        .map(|d| d["document"].clone())
        .unwrap_or(Value::Null);
    let ticket_state = ticket["state"].as_str().unwrap_or("");
    let flow = ticket["flow"].as_str().unwrap_or("");
    let body = html! {
        section aria-labelledby="summary" {
            h2 id="summary" class="visually-hidden" { "Summary" }
            dl class="summary" {
                dt { "Id" } dd { code { (id) } }
                dt { "Flow" } dd { (flow) }
                dt { "State" } dd id="ticket-state" { (state(ticket_state)) @if let Some(reason) = ticket["reason"].as_str() { " " (reason) } }
                dt { "Revision" } dd { code { (revision) } }
                dt { "Created" } dd { (utc(ticket["createdAt"].as_i64().unwrap_or(0))) }
                @if let Some(worker) = ticket["worker"].as_str() { dt { "Worker" } dd { (worker) } }
            }
            details { summary { "Input" } pre { (pretty(&ticket["input"])) } }
            (actions(&id, ticket_state, &runs, &person.csrf))
        }
        section aria-labelledby="nodes-title" {
            h2 id="nodes-title" { "Nodes" }
            (nodes(&ticket, &document, &runs, &checkpoints, &events))
        }
        section aria-labelledby="ledger-title" {
            h2 id="ledger-title" { "Money" }
            @match &money {
                Ok(money) => (ledger(money)),
                Err(refused) => (refusal(refused)),
            }
        }
        section aria-labelledby="events-title" {
            h2 id="events-title" { "Events" }
            (timeline(&events))
        }
    };
    let after = events.last().and_then(|e| e["seq"].as_i64()).unwrap_or(0);
    live_page(
        &format!("Ticket {}", id.get(..8).unwrap_or(&id)),
        Some(&person.csrf),
        Live::Ticket { id: &id, after },
        body,
    )
    .into_response()
}

/// The diff of the workspace a node saved.
pub async fn checkpoint(
    State(ui): State<Ui>,
    person: Person,
    Path((id, checkpoint)): Path<(String, String)>,
) -> Response {
    let answer = ui
        .api
        .get(
            &format!("/v1/tickets/{id}/checkpoints/{checkpoint}/diff"),
            &person.token,
        )
        .await;
    let back = html! { p { a href={ "/ui/tickets/" (id) } { "Back to the ticket" } } };
    match answer {
        Ok(diff) => {
            let text = diff["diff"].as_str().unwrap_or("");
            let body = html! {
                (back)
                p {
                    "Node " strong { (diff["node"].as_str().unwrap_or("")) } ": "
                    @match diff["from"].as_str() {
                        Some(from) => { "from " code { (from.get(..12).unwrap_or(from)) } " to " }
                        None => { "the first saved workspace, " }
                    }
                    code { (diff["to"].as_str().unwrap_or("").get(..12).unwrap_or("")) }
                    @if diff["truncated"] == true { " (cut at 256 KiB)" }
                }
                pre class="diff" id="diff" {
                    @for line in text.lines() {
                        @if line.starts_with('+') && !line.starts_with("+++") { ins { (line) } "\n" }
                        @else if line.starts_with('-') && !line.starts_with("---") { del { (line) } "\n" }
                        @else { (line) "\n" }
                    }
                }
            };
            page("Workspace diff", Some(&person.csrf), body).into_response()
        }
        Err(refused) => (
            refused.status,
            page(
                "Workspace diff",
                Some(&person.csrf),
                html! { (refusal(&refused)) (back) },
            ),
        )
            .into_response(),
    }
}

#[derive(Debug, Deserialize)]
pub struct Act {
    csrf: String,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    confirm: Option<String>,
}

/// cancel, pause, resume or rerun, through the API; back to the ticket (the new one, for a rerun).
pub async fn act(
    State(ui): State<Ui>,
    person: Person,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    Form(act): Form<Act>,
) -> Response {
    if !allowed(&person, &act.csrf, &headers) {
        return (
            StatusCode::FORBIDDEN,
            page("Not allowed", Some(&person.csrf), html! {
                p { "This form did not come from this server's page (its CSRF token or origin does not match). Nothing was done. Go back, reload the page and try again." }
            }),
        )
            .into_response();
    }
    let (path, body) = match action.as_str() {
        "cancel" | "pause" | "resume" => (format!("/v1/tickets/{id}/{action}"), None),
        "rerun" if act.confirm.as_deref() == Some("yes") => (
            format!("/v1/tickets/{id}/rerun"),
            Some(json!({"from": act.from.unwrap_or_default()})),
        ),
        "rerun" => {
            return (StatusCode::BAD_REQUEST, page("Rerun", Some(&person.csrf), html! {
                p { "A rerun starts paid model calls again: tick the confirmation to go on." }
                p { a href={ "/ui/tickets/" (id) } { "Back to the ticket" } }
            })).into_response();
        }
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    match ui.api.call(Method::POST, &path, &person.token, body).await {
        Ok(ticket) => {
            let target = ticket["id"].as_str().unwrap_or(&id).to_string();
            Redirect::to(&format!("/ui/tickets/{target}")).into_response()
        }
        Err(refused) => (
            refused.status,
            page(
                "Not done",
                Some(&person.csrf),
                html! {
                    (refusal(&refused))
                    p { a href={ "/ui/tickets/" (id) } { "Back to the ticket" } }
                },
            ),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_is_summed_per_node_settled_and_still_reserved() {
        let entries = vec![
            json!({"node": "a", "settledMicros": 5, "reservedMicros": 9, "state": "settled"}),
            json!({"node": "b", "settledMicros": null, "reservedMicros": 7, "state": "reserved"}),
            json!({"node": "a", "settledMicros": 3, "reservedMicros": 4, "state": "settled"}),
            json!({"node": "b", "settledMicros": null, "reservedMicros": 2, "state": "released"}),
        ];
        assert_eq!(
            per_node(&entries),
            vec![("a".to_string(), 8, 0), ("b".to_string(), 0, 7)]
        );
    }
}
