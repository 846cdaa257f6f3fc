//! The revisions view: every published configuration, newest first, the current one marked; and
//! the difference between two (their normalized documents, line by line).

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use crate::diff::{Line, lines};

use crate::Ui;
use crate::layout::{page, refusal};
use crate::session::Person;
use crate::time::utc;

#[derive(Debug, Default, Deserialize)]
pub struct Compare {
    #[serde(default)]
    a: Option<String>,
    #[serde(default)]
    b: Option<String>,
}

async fn document(ui: &Ui, token: &str, hash: &str) -> Result<String, crate::api::Refused> {
    let revision = ui.api.get(&format!("/v1/revisions/{hash}"), token).await?;
    Ok(serde_json::to_string_pretty(&revision["document"]).unwrap_or_default())
}

async fn difference(ui: &Ui, token: &str, a: &str, b: &str) -> Markup {
    match (document(ui, token, a).await, document(ui, token, b).await) {
        (Ok(old), Ok(new)) => {
            let diff = lines(&old, &new);
            let changed = diff.iter().filter(|l| !matches!(l, Line::Same(_))).count();
            html! {
                h2 { "From " code { (a.get(..12).unwrap_or(a)) } " to " code { (b.get(..12).unwrap_or(b)) } }
                p { (changed) " line(s) differ." }
                pre class="diff" {
                    @for line in &diff {
                        @match line {
                            Line::Same(text) => { span { "  " (text) } "\n" }
                            Line::Removed(text) => { del { "- " (text) } "\n" }
                            Line::Added(text) => { ins { "+ " (text) } "\n" }
                        }
                    }
                }
            }
        }
        (Err(refused), _) | (_, Err(refused)) => refusal(&refused),
    }
}

pub async fn view(
    State(ui): State<Ui>,
    person: Person,
    Query(compare): Query<Compare>,
) -> Response {
    let diff = match (&compare.a, &compare.b) {
        (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => {
            Some(difference(&ui, &person.token, a, b).await)
        }
        _ => None,
    };
    let listed = match ui.api.get("/v1/revisions", &person.token).await {
        Err(refused) => refusal(&refused),
        Ok(list) => {
            let revisions = list.as_array().cloned().unwrap_or_default();
            html! {
                form method="get" action="/ui/revisions" {
                div class="scroll" {
                    table {
                        caption class="visually-hidden" { "Revisions, newest first" }
                        thead { tr { th { "From" } th { "To" } th { "Revision" } th { "Stored" } th { "Last published" } th { "Current" } } }
                        tbody {
                            @for (n, r) in revisions.iter().enumerate() {
                                @let hash = r["hash"].as_str().unwrap_or("");
                                tr {
                                    td { input type="radio" name="a" value=(hash) aria-label={ "from " (hash.get(..12).unwrap_or(hash)) } checked[n == 1]; }
                                    td { input type="radio" name="b" value=(hash) aria-label={ "to " (hash.get(..12).unwrap_or(hash)) } checked[n == 0]; }
                                    td { code { (hash) } }
                                    td { (utc(r["createdAt"].as_i64().unwrap_or(0))) }
                                    td { (r["publishedAt"].as_i64().map(utc).unwrap_or_default()) }
                                    td { @if r["current"] == true { strong { "current" } } }
                                }
                            }
                        }
                    }
                }
                @if revisions.len() > 1 { button type="submit" { "Compare" } }
                }
            }
        }
    };
    let body = html! { (listed) @if let Some(diff) = diff { (diff) } };
    page("Revisions", Some(&person.csrf), body).into_response()
}
