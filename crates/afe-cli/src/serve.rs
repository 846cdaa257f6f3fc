//! `afe serve`: the API (afe-api) on a store and a broker. It holds no provider or git
//! credential and runs no node; workers do. With `-c DIR` it publishes the folder's revision at
//! start and again whenever the folder changes (checked every `--watch-every`) or on SIGHUP,
//! without restarting anything: tickets keep the revision they were started on.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use afe_api::{ApiState, LiveSettings, Published, Token};
use afe_queue::QueueSettings;
use afe_store::{Admin, SqlStore};
use clap::Args;

/// Exit status when the server cannot start.
const EXIT_CANNOT_START: u8 = 4;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen.
    #[arg(long, env = "AFE_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A config folder to publish as the current revision, and to watch.
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    /// How often the folder is checked for changes (SIGHUP checks at once).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    watch_every: Duration,
    #[command(flatten)]
    backends: crate::broker::Backends,
    /// Serve without authentication: anyone who reaches the port can start and cancel tickets.
    /// For one person on a laptop, never on a network.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Also serve the web UI, on the same host and port (`/ui`).
    #[arg(long)]
    ui: bool,
    /// How many events a live subscriber may fall behind before it is dropped.
    #[arg(long, default_value_t = 1024)]
    live_buffer: usize,
}

/// Why `afe serve` did not start, each with its `AFE-SRV-0xx` code.
fn refuse(code: &str, what: impl std::fmt::Display, help: &str) -> ExitCode {
    eprintln!("afe serve: {code} {what}\n  help: {help}");
    ExitCode::from(EXIT_CANNOT_START)
}

fn token(args: &ServeArgs) -> Result<Token, ExitCode> {
    match std::env::var("AFE_API_TOKEN") {
        Ok(token) if !token.trim().is_empty() => {
            if args.insecure_no_auth {
                eprintln!(
                    "afe serve: --insecure-no-auth ignored: AFE_API_TOKEN is set, and every route but health needs it"
                );
            }
            Ok(Token::required(token.trim()))
        }
        _ if args.insecure_no_auth => {
            eprintln!(
                "afe serve: WARNING: --insecure-no-auth: no token is needed. Anyone who reaches {} can start, cancel and read every ticket. Use it on a laptop only.",
                args.listen
            );
            Ok(Token::insecure_none())
        }
        _ => Err(refuse(
            "AFE-SRV-001",
            "AFE_API_TOKEN is not set: the API would be open to anyone who reaches it",
            "set AFE_API_TOKEN to a long random value (e.g. `openssl rand -hex 32`) and give it to clients; on a laptop alone, --insecure-no-auth",
        )),
    }
}

pub fn run(args: ServeArgs) -> ExitCode {
    let token = match token(&args) {
        Ok(token) => token,
        Err(code) => return code,
    };
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    let telemetry = match crate::telemetry::start("info", None, runtime.handle(), EXIT_CANNOT_START)
    {
        Ok(telemetry) => telemetry,
        Err(code) => return code,
    };
    let code = runtime.block_on(serve(args, token));
    telemetry.shutdown();
    code
}

/// A cheap fingerprint of the folder: every file's path, size and modification time (hidden
/// entries, like a SQLite store in `.afe/`, left out). Publishing re-reads only when it moves.
fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                out.push((entry.path(), meta.len(), meta.modified().ok()));
            }
        }
    }
    out.sort();
    out
}

async fn publish(store: &dyn Admin, dir: &Path) -> Result<Published, afe_store::StoreError> {
    let published = afe_api::publish_folder(store, dir).await?;
    match &published {
        Published::New(revision) => {
            tracing::info!(revision = %revision.hash, folder = %dir.display(), "published a new current revision")
        }
        Published::Unchanged(_) => {}
        Published::Invalid(invalid) => tracing::warn!(
            folder = %dir.display(),
            "the folder is not a valid config; the current revision stays:\n{}",
            crate::report::render(invalid)
        ),
    }
    Ok(published)
}

/// Publishes the folder again whenever it changes or SIGHUP arrives.
async fn watch(store: Arc<dyn Admin>, dir: PathBuf, every: Duration) {
    let mut seen = fingerprint(&dir);
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(err) => {
            tracing::warn!(error = %err, "no SIGHUP: the folder is watched by its changes only");
            None
        }
    };
    loop {
        let forced = tokio::select! {
            _ = tokio::time::sleep(every) => false,
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let now = fingerprint(&dir);
        if !forced && now == seen {
            continue;
        }
        seen = now;
        if let Err(err) = publish(store.as_ref(), &dir).await {
            tracing::warn!(error = %err, "cannot publish the folder's revision; trying again at its next change");
            // Try again next time round even if nothing changes.
            seen.clear();
        }
    }
}

async fn serve(args: ServeArgs, token: Token) -> ExitCode {
    args.backends.make_sqlite_folder();
    let store: Arc<dyn Admin> = match SqlStore::connect(&args.backends.store).await {
        Ok(store) => Arc::new(store),
        Err(err) => {
            return refuse(
                "AFE-SRV-002",
                format!("cannot open the store: {err}"),
                err.help(),
            );
        }
    };
    let (queue, notifier) = match crate::broker::connect(
        &args.backends.broker,
        &args.backends.prefix,
        QueueSettings::default(),
    )
    .await
    {
        Ok(pair) => pair,
        Err(err) => {
            return refuse(
                "AFE-SRV-003",
                format!("cannot reach the broker: {err}"),
                err.help(),
            );
        }
    };
    if args.backends.broker == "embedded" {
        tracing::warn!(
            "the broker is embedded: workers in other processes do not hear of new tickets and find them only by their sweep (--requeue-queued-after); give serve and the workers the same --broker redis://…"
        );
    }
    if let Some(dir) = &args.config {
        match publish(store.as_ref(), dir).await {
            Ok(Published::Invalid(invalid)) => {
                eprint!("{}", crate::report::render(&invalid));
                return ExitCode::from(crate::EXIT_INVALID);
            }
            Ok(_) => {}
            Err(err) => {
                return refuse(
                    "AFE-SRV-002",
                    format!("cannot store the folder's revision: {err}"),
                    err.help(),
                );
            }
        }
        tokio::spawn(watch(store.clone(), dir.clone(), args.watch_every));
    }
    let live = LiveSettings {
        buffer: args.live_buffer.max(1),
        ..LiveSettings::default()
    };
    let state = ApiState::new(store, queue, notifier, live);
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            return refuse(
                "AFE-SRV-004",
                format!("cannot listen on {}: {err}", args.listen),
                "choose a free address with --listen (or AFE_LISTEN)",
            );
        }
    };
    let address = listener.local_addr().unwrap_or(args.listen);
    // Tests and scripts read the address from this line (`--listen 127.0.0.1:0` picks a port).
    println!("afe serve: listening on http://{address}");
    tracing::info!(%address, "serving the API");
    let app = afe_api::router(state.clone(), token.clone());
    // The UI reads everything through the API's own router, token and all.
    let app = if args.ui {
        app.merge(afe_ui::router(afe_api::router(state, token)))
    } else {
        app
    };
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let mut terminate =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(signal) => signal,
                    Err(_) => return std::future::pending().await,
                };
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("stopping: no new connections");
        })
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("afe serve: the server stopped: {err}");
            ExitCode::from(crate::EXIT_FAILED)
        }
    }
}
