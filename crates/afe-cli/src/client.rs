//! `afe ticket …`: the API's client, so a person never needs curl. The server is `--server` (or
//! AFE_SERVER), the token AFE_API_TOKEN. Answers are printed for a person, or as the API's JSON
//! with `--json`. `events --follow` reads the SSE stream and, when the connection drops,
//! reconnects with the last event id it printed: nothing missed, nothing twice.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use afe_api::Problem;
use afe_api::views::{EventView, TicketList, TicketView};
use afe_store::Event;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::progress::describe;
use crate::run::{EXIT_TICKET_CANCELLED, EXIT_TICKET_FAILED};

#[derive(Debug, Args)]
pub struct TicketArgs {
    /// The API's base URL.
    #[arg(
        long,
        env = "AFE_SERVER",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    server: String,
    /// Print the API's JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: TicketCommand,
}

#[derive(Debug, Subcommand)]
enum TicketCommand {
    /// Start a ticket of a flow of the current revision.
    Start {
        #[arg(long)]
        flow: String,
        /// The input: a JSON or YAML file (`-` for standard input).
        #[arg(long)]
        input: PathBuf,
        /// Then follow its events until it ends (exit as `afe run` does).
        #[arg(long)]
        follow: bool,
    },
    /// One ticket.
    Get { id: String },
    /// Tickets, newest first.
    List {
        #[arg(long)]
        flow: Option<String>,
        /// queued, running, paused, done, failed or cancelled.
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        revision: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Where to start: a page's `next`.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Cancel a ticket that has not ended.
    Cancel {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Pause a queued or running ticket.
    Pause { id: String },
    /// Queue a paused ticket again.
    Resume { id: String },
    /// Rerun a ticket from a completed node, as a new ticket.
    Rerun {
        id: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        follow: bool,
    },
    /// A ticket's events.
    Events {
        id: String,
        /// Start after this event id.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// Keep printing them live until the ticket ends (exit as `afe run` does).
        #[arg(long)]
        follow: bool,
    },
}

/// Why the client could not do what was asked.
enum Failure {
    /// The server could not be reached, or answered outside the API.
    Unreachable(String),
    /// The server answered with an error.
    Refused(u16, Problem),
}

impl Failure {
    fn exit(self, server: &str) -> ExitCode {
        match self {
            Failure::Unreachable(why) => {
                eprintln!(
                    "afe ticket: AFE-CLI-001 cannot talk to the API at {server}: {why}\n  help: check --server (or AFE_SERVER) and that `afe serve` runs there"
                );
                ExitCode::from(crate::EXIT_FAILED)
            }
            Failure::Refused(status, problem) => {
                eprintln!(
                    "afe ticket: {} {} (HTTP {status})\n  help: {}",
                    problem.code, problem.message, problem.help
                );
                for line in &problem.problems {
                    eprintln!("    {line}");
                }
                ExitCode::from(if status == 422 {
                    crate::EXIT_INVALID
                } else {
                    crate::EXIT_FAILED
                })
            }
        }
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    fn new(server: &str) -> Client {
        // The ring provider for https:// servers (reqwest is built without one of its own).
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client builds"),
            base: server.trim_end_matches('/').to_string(),
            token: std::env::var("AFE_API_TOKEN")
                .ok()
                .filter(|t| !t.trim().is_empty()),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token.trim()),
            None => request,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        let mut request = self.request(method, path).timeout(Duration::from_secs(60));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let answer = request
            .send()
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        let status = answer.status();
        let bytes = answer
            .bytes()
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map_err(|e| Failure::Unreachable(format!("an answer that is not JSON: {e}")));
        }
        match serde_json::from_slice::<Problem>(&bytes) {
            Ok(problem) => Err(Failure::Refused(status.as_u16(), problem)),
            Err(_) => Err(Failure::Unreachable(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ))),
        }
    }
}

fn print_ticket(value: &Value, json: bool) {
    if json {
        println!("{value}");
        return;
    }
    match serde_json::from_value::<TicketView>(value.clone()) {
        Ok(t) => {
            println!(
                "ticket {}  {}  flow {}  revision {}{}",
                t.id,
                serde_json::to_value(t.state)
                    .ok()
                    .and_then(|s| s.as_str().map(str::to_string))
                    .unwrap_or_default(),
                t.flow,
                t.revision.get(..12).unwrap_or(&t.revision),
                t.reason
                    .map(|r| format!("  reason: {r}"))
                    .unwrap_or_default()
            );
        }
        Err(_) => println!("{value}"),
    }
}

fn read_input(path: &std::path::Path) -> Result<Value, String> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| format!("{}: {e}", path.display()))?;
    serde_saphyr::from_str::<Value>(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(args: TicketArgs) -> ExitCode {
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    let server = args.server.clone();
    match runtime.block_on(dispatch(args)) {
        Ok(code) => code,
        Err(failure) => failure.exit(&server),
    }
}

async fn dispatch(args: TicketArgs) -> Result<ExitCode, Failure> {
    use reqwest::Method;
    let client = Client::new(&args.server);
    let json = args.json;
    let (value, follow) = match args.command {
        TicketCommand::Start {
            flow,
            input,
            follow,
        } => {
            let input = match read_input(&input) {
                Ok(input) => input,
                Err(why) => {
                    eprintln!(
                        "afe ticket: AFE-CLI-002 the input cannot be read: {why}\n  help: pass --input FILE with a JSON or YAML document"
                    );
                    return Ok(ExitCode::from(crate::EXIT_INVALID));
                }
            };
            let body = json!({"flow": flow, "input": input});
            (
                client.call(Method::POST, "/v1/tickets", Some(body)).await?,
                follow,
            )
        }
        TicketCommand::Get { id } => (
            client
                .call(Method::GET, &format!("/v1/tickets/{id}"), None)
                .await?,
            false,
        ),
        TicketCommand::List {
            flow,
            state,
            revision,
            limit,
            cursor,
        } => {
            let mut query: Vec<(&str, String)> = vec![("limit", limit.to_string())];
            for (key, value) in [
                ("flow", flow),
                ("state", state),
                ("revision", revision),
                ("cursor", cursor),
            ] {
                if let Some(value) = value {
                    query.push((key, value));
                }
            }
            let encoded = query
                .iter()
                .map(|(k, v)| format!("{k}={}", encode(v)))
                .collect::<Vec<_>>()
                .join("&");
            let value = client
                .call(Method::GET, &format!("/v1/tickets?{encoded}"), None)
                .await?;
            print_list(&value, json);
            return Ok(ExitCode::SUCCESS);
        }
        TicketCommand::Cancel { id, reason } => (
            client
                .call(
                    Method::POST,
                    &format!("/v1/tickets/{id}/cancel"),
                    Some(json!({"reason": reason})),
                )
                .await?,
            false,
        ),
        TicketCommand::Pause { id } => (
            client
                .call(Method::POST, &format!("/v1/tickets/{id}/pause"), None)
                .await?,
            false,
        ),
        TicketCommand::Resume { id } => (
            client
                .call(Method::POST, &format!("/v1/tickets/{id}/resume"), None)
                .await?,
            false,
        ),
        TicketCommand::Rerun { id, from, follow } => (
            client
                .call(
                    Method::POST,
                    &format!("/v1/tickets/{id}/rerun"),
                    Some(json!({"from": from})),
                )
                .await?,
            follow,
        ),
        TicketCommand::Events { id, after, follow } => {
            if follow {
                return follow_events(&client, &id, after, json).await;
            }
            let mut after = after;
            loop {
                let page = client
                    .call(
                        Method::GET,
                        &format!("/v1/tickets/{id}/events?after={after}&limit=1000"),
                        None,
                    )
                    .await?;
                let events: Vec<EventView> = serde_json::from_value(page)
                    .map_err(|e| Failure::Unreachable(format!("an answer outside the API: {e}")))?;
                for event in &events {
                    print_event(event, json, &mut Default::default());
                    after = event.seq;
                }
                if events.len() < 1000 {
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
    };
    print_ticket(&value, json);
    if follow && let Some(id) = value.get("id").and_then(Value::as_str) {
        return follow_events(&client, id, 0, json).await;
    }
    Ok(ExitCode::SUCCESS)
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn print_list(value: &Value, json: bool) {
    if json {
        println!("{value}");
        return;
    }
    let Ok(list) = serde_json::from_value::<TicketList>(value.clone()) else {
        println!("{value}");
        return;
    };
    for ticket in &list.tickets {
        print_ticket(&serde_json::to_value(ticket).unwrap_or_default(), false);
    }
    if let Some(next) = list.next {
        println!("more: --cursor {next}");
    }
}

fn print_event(
    event: &EventView,
    json: bool,
    started: &mut std::collections::HashMap<String, i64>,
) {
    if json {
        if let Ok(line) = serde_json::to_string(event) {
            println!("{line}");
        }
        return;
    }
    let event = Event {
        ticket: event.ticket.clone(),
        seq: event.seq,
        kind: event.kind.clone(),
        payload: event.payload.clone(),
        at: event.at,
    };
    let node = event
        .payload
        .get("node")
        .and_then(Value::as_str)
        .map(str::to_string);
    if event.kind == "node.started"
        && let Some(node) = &node
    {
        started.insert(node.clone(), event.at);
    }
    let since = node.and_then(|n| started.get(&n).copied());
    if let Some(line) = describe(&event, since) {
        println!("{line}");
    }
}

/// The exit status of a ticket that ended with `kind`; none while it runs.
fn ended(kind: &str) -> Option<ExitCode> {
    match kind {
        "ticket.done" => Some(ExitCode::SUCCESS),
        "ticket.failed" => Some(ExitCode::from(EXIT_TICKET_FAILED)),
        "ticket.cancelled" => Some(ExitCode::from(EXIT_TICKET_CANCELLED)),
        _ => None,
    }
}

/// Prints the ticket's events from the SSE stream until it ends, reconnecting after a drop with
/// the last id printed.
async fn follow_events(
    client: &Client,
    id: &str,
    mut after: i64,
    json: bool,
) -> Result<ExitCode, Failure> {
    use futures_util::StreamExt;
    let mut started = std::collections::HashMap::new();
    let mut failures = 0;
    loop {
        let answer = client
            .request(
                reqwest::Method::GET,
                &format!("/v1/tickets/{id}/events/sse?after={after}"),
            )
            .send()
            .await;
        let answer = match answer {
            Ok(answer) if answer.status().is_success() => answer,
            Ok(answer) => {
                let status = answer.status().as_u16();
                let bytes = answer.bytes().await.unwrap_or_default();
                let problem = serde_json::from_slice::<Problem>(&bytes)
                    .map_err(|_| Failure::Unreachable(format!("HTTP {status} outside the API")))?;
                // The store or broker is passing through a restart: wait and ask again.
                if status == 503 && failures < 30 {
                    failures += 1;
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    continue;
                }
                return Err(Failure::Refused(status, problem));
            }
            Err(err) if failures < 30 => {
                failures += 1;
                eprintln!(
                    "afe ticket: the stream dropped ({err}); reconnecting after event {after}"
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            Err(err) => return Err(Failure::Unreachable(err.to_string())),
        };
        failures = 0;
        let mut body = answer.bytes_stream();
        let mut buffer = String::new();
        while let Some(chunk) = body.next().await {
            let Ok(chunk) = chunk else { break };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            // One SSE message ends at a blank line; its `data:` line is the event's JSON.
            while let Some(end) = buffer.find("\n\n") {
                let message: String = buffer.drain(..end + 2).collect();
                let data: String = message
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect::<Vec<_>>()
                    .join("\n");
                let Ok(event) = serde_json::from_str::<EventView>(&data) else {
                    continue;
                };
                if event.seq <= after {
                    continue;
                }
                after = event.seq;
                print_event(&event, json, &mut started);
                if let Some(code) = ended(&event.kind) {
                    return Ok(code);
                }
            }
        }
        eprintln!("afe ticket: the stream ended; reconnecting after event {after}");
    }
}
