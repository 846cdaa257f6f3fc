//! `af-proxy`: the containment core as one binary, shipped as one image built FROM scratch.
//!
//! - `serve --config FILE`: the egress sidecar (or, configured with only the proxy listener, an
//!   afe ticket pod's allowlist proxy).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "af-proxy", version, about = "Antifailure's containment core")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the egress sidecar: proxy, DNS responder, SMTP sink, decision log, inbox, control API.
    Serve {
        /// The configuration file (on Kubernetes, the mounted Secret).
        #[arg(long, env = "AF_PROXY_CONFIG", value_name = "FILE")]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Serve { config } => serve(&config),
    }
}

/// Fails closed: a configuration that cannot be loaded, or a listener that cannot be bound, exits
/// non-zero before anything is served.
fn serve(config: &std::path::Path) -> ExitCode {
    let loaded = match af_egress::load_config(config) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("af-proxy: {err}\n  help: {}", err.help());
            return ExitCode::from(err.code().exit_status());
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("af-proxy: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let mut sidecar = match af_egress::start(loaded).await {
            Ok(sidecar) => sidecar,
            Err(err) => {
                eprintln!("af-proxy: {err}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(addresses = ?sidecar.addresses, "sidecar serving");
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sidecar.wait() => {
                eprintln!("af-proxy: a listener stopped; exiting so the platform restarts the sidecar");
                ExitCode::FAILURE
            }
            _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
            _ = terminate => ExitCode::SUCCESS,
        }
    })
}
