//! `afe worker`: one worker process over a store and a broker. SIGTERM or Ctrl-C stops it
//! gracefully: no new tickets, the current node gets the grace period to finish, then the ticket
//! is released for another worker.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use afe_queue::QueueSettings;
use afe_store::{SqlStore, Store};
use afe_worker::{NodeExecutor, Script, ScriptedExecutor, Worker, WorkerSettings};
use clap::Args;

/// Exit status when the worker cannot start (its store, broker or executor is unusable).
const EXIT_CANNOT_START: u8 = 4;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    backends: crate::broker::Backends,
    /// This worker's name (default: worker-HOSTNAME-PID).
    #[arg(long)]
    id: Option<String>,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    lease_ttl: Duration,
    /// A queue entry idle this long goes to another worker; keep it above --lease-ttl.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    reclaim_after: Duration,
    /// An entry delivered more often than this is dead-lettered and its ticket fails.
    #[arg(long, default_value_t = 5)]
    max_deliveries: u64,
    /// After SIGTERM, how long the current node may take before it is left for the next worker.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    grace: Duration,
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    sweep_every: Duration,
    /// A queued ticket this old is requeued by the sweep, in case its entry was lost.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    requeue_queued_after: Duration,
    /// What runs nodes: `sandbox` (git and exec nodes in a Docker sandbox per ticket), or
    /// `scripted` (tests and benchmarks; needs --script).
    #[arg(long, default_value = "sandbox")]
    executor: String,
    /// The scripted executor's script (JSON; see afe_worker::scripted).
    #[arg(long)]
    script: Option<PathBuf>,
    /// An OTLP/HTTP collector's base URL: the worker's spans (tickets, nodes, model and tool
    /// calls) are exported there (`<URL>/v1/traces`).
    #[arg(long, env = "AFE_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// The variable holding the collector's headers (`key=value,…`).
    #[arg(long, env = "AFE_OTLP_HEADERS_ENV", requires = "otlp_endpoint")]
    otlp_headers_env: Option<String>,
    /// Put prompts and answers' text into model-call spans.
    #[arg(long, env = "AFE_OTLP_CAPTURE_PROMPTS", requires = "otlp_endpoint")]
    otlp_capture_prompts: bool,
    #[command(flatten)]
    sandbox: crate::sandbox_args::SandboxArgs,
}

/// `worker-HOST-PID`: unique across containers and pods, where every worker is PID 1 (the host
/// name is the container's or the pod's).
fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    if host.is_empty() {
        format!("worker-{}", std::process::id())
    } else {
        format!("worker-{host}-{}", std::process::id())
    }
}

fn cannot_start(what: &str, err: impl std::fmt::Display, help: &str) -> ExitCode {
    eprintln!("afe worker: {what}: {err}\n  help: {help}");
    ExitCode::from(EXIT_CANNOT_START)
}

/// The scripted executor, when asked for; `None` for the sandbox executor, which needs the store
/// and the daemon and is made once both are reached.
fn scripted_executor(args: &WorkerArgs) -> Result<Option<Arc<dyn NodeExecutor>>, ExitCode> {
    match (args.executor.as_str(), &args.script) {
        ("sandbox", _) => Ok(None),
        ("scripted", Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|err| {
                cannot_start(
                    &format!("cannot read {}", path.display()),
                    err,
                    "pass --script FILE",
                )
            })?;
            let script: Script = serde_json::from_str(&text).map_err(|err| {
                cannot_start(
                    &format!("{} is not a script", path.display()),
                    err,
                    "see afe_worker::scripted::Script",
                )
            })?;
            Ok(Some(Arc::new(ScriptedExecutor::new(script))))
        }
        ("scripted", None) => Err(cannot_start(
            "the scripted executor needs a script",
            "--script is missing",
            "pass --script FILE",
        )),
        (other, _) => Err(cannot_start(
            "no such executor",
            other,
            "use --executor sandbox (the default) or --executor scripted --script FILE",
        )),
    }
}

pub fn run(args: WorkerArgs) -> ExitCode {
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    let tracer = args
        .otlp_endpoint
        .as_ref()
        .map(|endpoint| afe_config::runtime::OtlpRuntime {
            endpoint: endpoint.clone(),
            headers_env: args.otlp_headers_env.clone(),
            capture_prompts: args.otlp_capture_prompts,
        });
    let telemetry =
        match crate::telemetry::start("info", tracer.as_ref(), runtime.handle(), EXIT_CANNOT_START)
        {
            Ok(telemetry) => telemetry,
            Err(code) => return code,
        };
    let scripted = match scripted_executor(&args) {
        Ok(scripted) => scripted,
        Err(code) => return code,
    };
    let code = runtime.block_on(serve(args, scripted));
    telemetry.shutdown();
    code
}

async fn serve(args: WorkerArgs, scripted: Option<Arc<dyn NodeExecutor>>) -> ExitCode {
    args.backends.make_sqlite_folder();
    let store: Arc<dyn Store> = match SqlStore::connect(&args.backends.store).await {
        Ok(store) => Arc::new(store),
        Err(err) => return cannot_start("cannot open the store", &err, err.help()),
    };
    let settings = QueueSettings {
        reclaim_after: args.reclaim_after,
        max_deliveries: args.max_deliveries,
    };
    let (queue, notifier) = match crate::broker::connect(
        &args.backends.broker,
        &args.backends.prefix,
        settings,
    )
    .await
    {
        Ok(pair) => pair,
        Err(err) => return cannot_start("cannot reach the broker", &err, err.help()),
    };
    let id = args.id.clone().unwrap_or_else(default_id);
    let executor = match scripted {
        Some(scripted) => scripted,
        None => match args.sandbox.executor(store.clone(), &id).await {
            Ok(executor) => Arc::new(executor),
            Err(err) => return cannot_start("cannot make the node executor", &err, err.help()),
        },
    };
    let settings = WorkerSettings {
        id,
        lease_ttl: args.lease_ttl,
        grace: args.grace,
        concurrency: args.concurrency,
        sweep_every: args.sweep_every,
        requeue_queued_after: args.requeue_queued_after,
        ..WorkerSettings::default()
    };
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return,
            };
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("stopping: finishing the current node, then releasing");
        let _ = stop.send(true);
    });
    tracing::info!(
        store = store.backend(),
        broker = queue.backend(),
        "worker started"
    );
    Arc::new(Worker::new(store, queue, notifier, executor, settings))
        .run(shutdown)
        .await;
    ExitCode::SUCCESS
}
