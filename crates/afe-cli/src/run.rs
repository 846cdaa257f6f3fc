//! `afe run --local`: one ticket to its end on this machine, with the embedded defaults — SQLite
//! (the Runtime's store, or `.afe/afe.db` in the config folder), the in-process queue, a worker in
//! this process, the Docker sandbox — printing its events as they happen (lines and a spinner on a
//! terminal, JSON lines with `--json`) and exiting with the ticket's outcome.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use afe_config::input::{budget_micros, input_problems};
use afe_config::{Config, Revision};
use afe_queue::{EmbeddedNotifier, EmbeddedQueue, Queue, QueueSettings};
use afe_store::{Event, NewTicket, SqlStore, Store, TicketState};
use afe_worker::{Worker, WorkerSettings};
use clap::Args;
use serde_json::Value;

use crate::progress::describe;
use crate::sandbox_args::SandboxArgs;

/// Exit statuses of `afe run` beyond the command's own (docs/errors.md).
pub const EXIT_TICKET_FAILED: u8 = 5;
pub const EXIT_TICKET_CANCELLED: u8 = 6;
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run on this machine with the embedded defaults (the only way for now: the API comes with
    /// `afe serve`).
    #[arg(long, required = true)]
    local: bool,
    /// The config folder.
    #[arg(short = 'c', long = "config", default_value = ".")]
    config: PathBuf,
    /// The flow to run.
    #[arg(long)]
    flow: String,
    /// The ticket's input: a JSON or YAML file (`-` for standard input).
    #[arg(long)]
    input: PathBuf,
    /// Print the ticket's events as JSON lines on standard output.
    #[arg(long)]
    json: bool,
    /// The store (default: the folder's Runtime store, or sqlite://DIR/.afe/afe.db).
    #[arg(long, env = "AFE_STORE_URL")]
    store: Option<String>,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// Why `afe run` could not start a ticket, with its `AFE-RUN-0xx` code.
#[derive(Debug)]
enum Refusal {
    /// The input file cannot be read or is not JSON or YAML.
    InputUnreadable(String),
    /// The input does not match the flow's input Schema.
    InputInvalid { flow: String, problems: Vec<String> },
    /// The config has no such flow.
    NoSuchFlow(String),
}

impl Refusal {
    fn print(&self) {
        let (code, what, help) = match self {
            Refusal::InputUnreadable(why) => (
                "AFE-RUN-001",
                format!("the input cannot be read: {why}"),
                "pass --input FILE with a JSON or YAML document (an object of the flow's input fields)".to_string(),
            ),
            Refusal::InputInvalid { flow, problems } => (
                "AFE-RUN-002",
                format!(
                    "the input does not match flow {flow}'s input Schema:\n    {}",
                    problems.join("\n    ")
                ),
                "fix the input's fields as listed; `afe revision --explain` shows the Schema".to_string(),
            ),
            Refusal::NoSuchFlow(why) => (
                "AFE-RUN-003",
                why.clone(),
                "name one of the config's flows with --flow".to_string(),
            ),
        };
        eprintln!("afe run: {code} {what}\n  help: {help}");
    }
}

fn read_input(path: &Path) -> Result<Value, Refusal> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| Refusal::InputUnreadable(format!("{}: {e}", path.display())))?;
    // JSON is YAML: one parser reads both.
    serde_saphyr::from_str::<Value>(&text)
        .map_err(|e| Refusal::InputUnreadable(format!("{}: {e}", path.display())))
}

/// The store URL: the flag, else the Runtime's SQLite path (relative to the folder), else the
/// folder's `.afe/afe.db`. A Postgres Runtime store is read from its variable.
fn store_url(args: &RunArgs, config: &Config) -> Result<String, String> {
    if let Some(url) = &args.store {
        return Ok(url.clone());
    }
    let runtime = config.runtime.as_ref().and_then(|r| r.spec.store.as_ref());
    if let Some(postgres) = runtime.and_then(|s| s.postgres.as_ref()) {
        return std::env::var(&postgres.url_env).map_err(|_| {
            format!(
                "the Runtime's store is PostgreSQL at ${}, and that variable is not set",
                postgres.url_env
            )
        });
    }
    let path = runtime
        .and_then(|s| s.sqlite.as_ref())
        .map(|s| s.path.clone())
        .unwrap_or_else(|| afe_config::runtime::DEFAULT_SQLITE_PATH.to_string());
    let path = args.config.join(path);
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    Ok(format!("sqlite://{}", path.display()))
}

pub fn run(args: RunArgs) -> ExitCode {
    let config = match afe_config::load_folder(&args.config) {
        Ok(config) => config,
        Err(invalid) => {
            eprint!("{}", crate::report::render(&invalid));
            return ExitCode::from(crate::EXIT_INVALID);
        }
    };
    let revision = Revision::of(&config);
    let input = match read_input(&args.input) {
        Ok(input) => input,
        Err(refusal) => {
            refusal.print();
            return ExitCode::from(crate::EXIT_INVALID);
        }
    };
    match input_problems(&revision.normalized, &args.flow, &input) {
        Ok(problems) if problems.is_empty() => {}
        Ok(problems) => {
            Refusal::InputInvalid {
                flow: args.flow.clone(),
                problems,
            }
            .print();
            return ExitCode::from(crate::EXIT_INVALID);
        }
        Err(why) => {
            Refusal::NoSuchFlow(why).print();
            return ExitCode::from(crate::EXIT_INVALID);
        }
    }
    let url = match store_url(&args, &config) {
        Ok(url) => url,
        Err(why) => {
            eprintln!("afe run: {why}\n  help: set it, or pass --store URL");
            return ExitCode::from(crate::EXIT_FAILED);
        }
    };
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    // The worker's own log, for a person debugging (`AFE_LOG=debug`), quiet otherwise; and the
    // Runtime's tracer, when it names one.
    let tracer = config
        .runtime
        .as_ref()
        .and_then(|r| r.spec.tracer.as_ref())
        .map(|t| &t.otlp);
    let telemetry =
        match crate::telemetry::start("warn", tracer, runtime.handle(), crate::EXIT_FAILED) {
            Ok(telemetry) => telemetry,
            Err(code) => return code,
        };
    let code = runtime.block_on(run_ticket(args, revision, input, url));
    telemetry.shutdown();
    code
}

fn cannot(what: &str, err: impl std::fmt::Display, help: &str) -> ExitCode {
    eprintln!("afe run: {what}: {err}\n  help: {help}");
    ExitCode::from(crate::EXIT_FAILED)
}

async fn run_ticket(args: RunArgs, revision: Revision, input: Value, url: String) -> ExitCode {
    let store: Arc<dyn Store> = match SqlStore::connect(&url).await {
        Ok(store) => Arc::new(store),
        Err(err) => return cannot("cannot open the store", &err, err.help()),
    };
    let worker_id = format!("afe-run-{}", std::process::id());
    let executor = match args.sandbox.executor(store.clone(), &worker_id).await {
        Ok(executor) => Arc::new(executor),
        Err(err) => return cannot("cannot make the node executor", &err, err.help()),
    };
    if let Err(err) = store
        .put_revision(&revision.hash, &revision.normalized)
        .await
    {
        return cannot("cannot store the revision", &err, err.help());
    }
    let ticket = match store
        .create_ticket(&NewTicket {
            flow: args.flow.clone(),
            input,
            revision: revision.hash.clone(),
            budget_micros: budget_micros(&revision.normalized, &args.flow),
        })
        .await
    {
        Ok(ticket) => ticket,
        Err(err) => return cannot("cannot create the ticket", &err, err.help()),
    };
    if !args.json {
        println!(
            "ticket {} of flow {} (revision {}), store {url}",
            ticket.id,
            args.flow,
            &revision.hash[..12]
        );
    }
    let queue = Arc::new(EmbeddedQueue::new(QueueSettings::default()));
    let settings = WorkerSettings {
        id: worker_id,
        // This run's ticket only: tickets an earlier run left in the same store wait for a worker.
        sweep: false,
        ..WorkerSettings::default()
    };
    let worker = Arc::new(Worker::new(
        store.clone(),
        queue.clone(),
        Arc::new(EmbeddedNotifier::default()),
        executor,
        settings,
    ));
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let working = tokio::spawn(worker.run(shutdown));
    if let Err(err) = queue.enqueue(&ticket.id).await {
        return cannot("cannot queue the ticket", &err, err.help());
    }
    let followed = tokio::select! {
        state = follow(store.as_ref(), &ticket.id, args.json) => state,
        _ = tokio::signal::ctrl_c() => None,
    };
    let _ = stop.send(true);
    let Some(state) = followed else {
        eprintln!(
            "afe run: interrupted; the current node gets its grace period, then ticket {} is left running in {url}\n  help: `afe worker --store {url}` takes it up again from its last completed node",
            ticket.id
        );
        let _ = working.await;
        return ExitCode::from(EXIT_INTERRUPTED);
    };
    // The worker removes the ended ticket's sandbox before it stops.
    let _ = working.await;
    match state {
        Ok(TicketState::Done) => ExitCode::SUCCESS,
        Ok(TicketState::Cancelled) => ExitCode::from(EXIT_TICKET_CANCELLED),
        Ok(_) => ExitCode::from(EXIT_TICKET_FAILED),
        Err(err) => cannot("cannot follow the ticket", err, "check the store"),
    }
}

/// Prints the ticket's events as they are committed, until it ends; its final state.
async fn follow(
    store: &dyn Store,
    ticket: &str,
    json: bool,
) -> Option<Result<TicketState, afe_store::StoreError>> {
    let spinner = (!json && std::io::stdout().is_terminal()).then(|| {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stdout());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let say = |line: &str| match &spinner {
        Some(bar) => bar.println(line),
        None => println!("{line}"),
    };
    let mut after = 0;
    let mut started: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    loop {
        let events: Vec<Event> = match store.events(ticket, after, 200).await {
            Ok(events) => events,
            Err(err) => return Some(Err(err)),
        };
        for event in &events {
            after = event.seq;
            let node = event.payload.get("node").and_then(Value::as_str);
            if event.kind == "node.started"
                && let Some(node) = node
            {
                started.insert(node.to_string(), event.at);
                if let Some(bar) = &spinner {
                    bar.set_message(format!("running {node}"));
                    bar.reset_elapsed();
                }
            }
            if json {
                if let Ok(line) = serde_json::to_string(event) {
                    println!("{line}");
                }
            } else if let Some(line) = describe(event, node.and_then(|n| started.get(n).copied())) {
                say(&line);
            }
            let ended = match event.kind.as_str() {
                "ticket.done" => Some(TicketState::Done),
                "ticket.failed" => Some(TicketState::Failed),
                "ticket.cancelled" => Some(TicketState::Cancelled),
                _ => None,
            };
            if let Some(state) = ended {
                if let Some(bar) = &spinner {
                    bar.finish_and_clear();
                }
                return Some(Ok(state));
            }
        }
        if events.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
