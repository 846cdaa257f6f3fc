//! The frame every page shares: the navigation, the stylesheet, a main landmark, and how a
//! refusal of the API is shown.

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use crate::api::Refused;

/// What a page's script follows live: nothing, every ticket (the tickets list), or one ticket
/// after the last event the page shows.
#[derive(Clone, Copy, Debug)]
pub enum Live<'a> {
    Nothing,
    Tickets,
    Ticket { id: &'a str, after: i64 },
}

/// A whole page. `csrf`: the CSRF token of a signed-in person (the sign-out form), none on the
/// login page.
pub fn page(title: &str, csrf: Option<&str>, body: Markup) -> Markup {
    live_page(title, csrf, Live::Nothing, body)
}

/// A page whose script follows `live`.
pub fn live_page(title: &str, csrf: Option<&str>, live: Live, body: Markup) -> Markup {
    let (ticket, after, list) = match live {
        Live::Nothing => (None, None, None),
        Live::Tickets => (None, None, Some("tickets")),
        Live::Ticket { id, after } => (Some(id), Some(after), None),
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · afe" }
                link rel="stylesheet" href="/ui/static/app.css";
                // No icon: and no request for one.
                link rel="icon" href="data:,";
                @if csrf.is_some() { script src="/ui/static/app.js" defer {} }
            }
            body data-ticket=[ticket] data-after=[after] data-live=[list] {
                a class="skip" href="#main" { "Skip to content" }
                header {
                    nav aria-label="Main" {
                        a class="brand" href="/ui" { "afe" }
                        @if let Some(csrf) = csrf {
                            a href="/ui" { "Tickets" }
                            a href="/ui/revisions" { "Revisions" }
                            a href="/ui/queue" { "Workers" }
                            a href="/ui/start" { "Start a ticket" }
                            form method="post" action="/ui/logout" class="inline" {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main id="main" {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// What the API said when it refused, with its code and its advice.
pub fn refusal(refused: &Refused) -> Markup {
    let text = |key: &str| {
        refused
            .problem
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    html! {
        div class="problem" role="alert" {
            p { strong { (text("code")) } " " (text("message")) }
            @if !text("help").is_empty() { p { "What to do: " (text("help")) } }
        }
    }
}

/// A ticket's or a node's state as a badge a screen reader reads as text.
pub fn state(state: &str) -> Markup {
    html! { span class={ "state state-" (state) } { (state) } }
}
