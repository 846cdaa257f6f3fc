//! The web UI `afe serve --ui` serves on the API's host and port: server-rendered HTML (maud) and
//! a stylesheet of its own, all inside the binary. Every figure it shows comes from the API's own
//! routes, called in process with the person's token: the UI has no back door to the store. The
//! read-only views work with JavaScript off. A person signs in with the API token; it is kept in
//! an HTTP-only, SameSite=Strict cookie, and every form that changes something carries a CSRF
//! token. See docs/ui.md.

mod api;
mod diff;
mod graph;
mod layout;
mod queue;
mod revisions;
mod session;
mod start;
mod ticket;
mod tickets;
mod time;

use axum::Router;
use axum::extract::{Form, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::html;
use serde::Deserialize;

pub use api::Api;
pub use session::{COOKIE_NAME, csrf_for};
pub use tickets::STUCK_AFTER_MS;

use crate::layout::page;
use crate::session::{Person, allowed};

/// What every view reaches: the API.
#[derive(Clone, Debug)]
pub struct Ui {
    api: Api,
}

/// The UI's routes, under `/ui`, reading everything through `api` (the API's router, with its
/// authentication).
pub fn router(api: Router) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .route("/ui", get(tickets::view))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/tickets/{id}", get(ticket::view))
        .route("/ui/tickets/{id}/{action}", post(ticket::act))
        .route(
            "/ui/tickets/{id}/checkpoints/{checkpoint}",
            get(ticket::checkpoint),
        )
        .route("/ui/revisions", get(revisions::view))
        .route("/ui/start", get(start::view).post(start::submit))
        .route("/ui/queue", get(queue::view))
        .route("/ui/static/app.css", get(stylesheet))
        .route("/ui/static/app.js", get(script))
        .with_state(Ui { api: Api::new(api) })
}

/// `key=value&…`, each value percent-encoded.
pub(crate) fn query_string(params: &[(&str, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| {
            let encoded: String = v
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("{k}={encoded}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

async fn stylesheet() -> Response {
    (
        [
            (CONTENT_TYPE, "text/css; charset=utf-8"),
            (CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("../assets/app.css"),
    )
        .into_response()
}

async fn script() -> Response {
    (
        [
            (CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("../assets/app.js"),
    )
        .into_response()
}

fn login_page(problem: Option<&str>) -> maud::Markup {
    page(
        "Sign in",
        None,
        html! {
            form method="post" action="/ui/login" class="login" {
                @if let Some(problem) = problem {
                    div class="problem" role="alert" { p { (problem) } }
                }
                label for="token" { "API token" }
                input id="token" name="token" type="password" autocomplete="current-password" required autofocus;
                p class="meta" { "The server's AFE_API_TOKEN. It is kept in this browser only, in a cookie scripts cannot read." }
                button type="submit" { "Sign in" }
            }
        },
    )
}

async fn login_form() -> Response {
    login_page(None).into_response()
}

#[derive(Debug, Deserialize)]
struct Login {
    token: String,
}

/// Checks the token against the API itself (any route that needs it) before keeping it.
async fn login(State(ui): State<Ui>, Form(login): Form<Login>) -> Response {
    let token = login.token.trim().to_string();
    match ui.api.get("/v1/revisions", &token).await {
        Ok(_) => signed_in(&token),
        // The form again, saying why (a page, not an error of the page: 200).
        Err(refused) if refused.status == StatusCode::UNAUTHORIZED => login_page(Some(
            "AFE-API-001 That is not the server's token. Nothing was kept; try again.",
        ))
        .into_response(),
        // The token was accepted (not 401) though the API could not answer (say, the store is
        // down): keep it, the views will say what is wrong.
        Err(_) => signed_in(&token),
    }
}

/// To the tickets, the token kept.
fn signed_in(token: &str) -> Response {
    let mut answer = Redirect::to("/ui").into_response();
    answer
        .headers_mut()
        .insert(SET_COOKIE, session::keep(token));
    answer
}

#[derive(Debug, Deserialize)]
struct Logout {
    csrf: String,
}

async fn logout(person: Person, headers: HeaderMap, Form(logout): Form<Logout>) -> Response {
    if !allowed(&person, &logout.csrf, &headers) {
        return StatusCode::FORBIDDEN.into_response();
    }
    let mut answer = Redirect::to("/ui/login").into_response();
    answer.headers_mut().insert(SET_COOKIE, session::forget());
    answer
}
