//! The revisions view: every published configuration, newest first, the current one marked.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;

use crate::Ui;
use crate::layout::{page, refusal};
use crate::session::Person;
use crate::time::utc;

pub async fn view(State(ui): State<Ui>, person: Person) -> Response {
    let body = match ui.api.get("/v1/revisions", &person.token).await {
        Err(refused) => refusal(&refused),
        Ok(list) => {
            let revisions = list.as_array().cloned().unwrap_or_default();
            html! {
                div class="scroll" {
                    table {
                        caption class="visually-hidden" { "Revisions, newest first" }
                        thead { tr { th { "Revision" } th { "Stored" } th { "Last published" } th { "Current" } } }
                        tbody {
                            @for r in &revisions {
                                tr {
                                    td { code { (r["hash"].as_str().unwrap_or("")) } }
                                    td { (utc(r["createdAt"].as_i64().unwrap_or(0))) }
                                    td { (r["publishedAt"].as_i64().map(utc).unwrap_or_default()) }
                                    td { @if r["current"] == true { strong { "current" } } }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page("Revisions", Some(&person.csrf), body).into_response()
}
