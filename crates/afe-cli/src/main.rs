//! `afe`: the agent flow engine's command.
//!
//! - `afe validate [-c DIR] [--json]`: every problem of the config, each with its AFE-CFG code,
//!   file, line:column and field path; exit 3 when there is one.
//! - `afe revision [-c DIR] [--explain]`: the config's revision hash (and the normalized document
//!   that is hashed); a pinned AgentFlowEngine in the folder that does not match is reported.
//! - `afe crdgen [--out DIR]`: writes the CustomResourceDefinitions.
//! - `afe engine-image`: the engine image sandboxes start from, built on this Docker if missing.
//! - `afe worker --store URL --broker URL|embedded ...`: a worker process.
//! - `afe run --local -c DIR --flow NAME --input FILE`: one ticket to its end on this machine.
//! - `afe serve [-c DIR] --store URL --broker URL`: the API (afe-api), publishing DIR's revision.
//! - `afe ticket start|get|list|cancel|pause|resume|rerun|events`: the API's client.
//!
//! Exit statuses: 0 done, 1 could not do it (a file could not be written, the store or the
//! sandbox platform could not be reached), 2 usage, 3 the config (or a ticket's input) is invalid
//! or its pin does not match, 4 a worker cannot start (store, broker or executor), 5 the ticket
//! failed, 6 it was cancelled, 130 interrupted.

mod broker;
mod client;
mod progress;
mod report;
mod run;
mod sandbox_args;
mod serve;
mod telemetry;
mod worker;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use afe_config::{Config, InvalidConfig, Revision};
use clap::{Parser, Subcommand};
use serde::Serialize;

pub(crate) const EXIT_FAILED: u8 = 1;
pub(crate) const EXIT_INVALID: u8 = 3;

#[derive(Debug, Parser)]
#[command(name = "afe", version, about = "The agent flow engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a config folder: report every problem at once.
    Validate {
        /// The config folder (every *.yaml file in it).
        #[arg(short = 'c', long = "config", default_value = ".")]
        config: PathBuf,
        /// Read the folder as the cluster objects `kubectl apply` takes: custom resources and the
        /// config's ConfigMap, whose keys are the prompts (the operator's source).
        #[arg(long)]
        objects: bool,
        /// Print the result as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
    /// Print the config's revision: the sha256 of its normalized form.
    Revision {
        #[arg(short = 'c', long = "config", default_value = ".")]
        config: PathBuf,
        /// Read the folder as cluster objects (see `validate --objects`).
        #[arg(long)]
        objects: bool,
        /// Also print the normalized document that is hashed.
        #[arg(long)]
        explain: bool,
    },
    /// Run a worker: claim tickets from the queue and run their flows.
    Worker(Box<worker::WorkerArgs>),
    /// Run one ticket to its end on this machine (SQLite, the in-process queue, the Docker
    /// sandbox), printing its events; exit with its outcome.
    Run(Box<run::RunArgs>),
    /// Serve the API: tickets, revisions, live events. Needs AFE_API_TOKEN.
    Serve(Box<serve::ServeArgs>),
    /// Start, read, follow and stop tickets through the API (AFE_SERVER, AFE_API_TOKEN).
    Ticket(Box<client::TicketArgs>),
    /// Make sure this machine's Docker has the engine image sandboxes start from (netlock and the
    /// proxy), building it from the static af-proxy (AF_PROXY_BINARY) when missing; print its tag.
    EngineImage,
    /// Write the CustomResourceDefinitions of every afe kind.
    Crdgen {
        #[arg(long, default_value = afe_config::crd::CRD_DIR)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Validate {
            config,
            objects,
            json,
        } => validate(&config, objects, json),
        Command::Revision {
            config,
            objects,
            explain,
        } => revision(&config, objects, explain),
        Command::Crdgen { out } => crdgen(&out),
        Command::Worker(args) => worker::run(*args),
        Command::Run(args) => run::run(*args),
        Command::Serve(args) => serve::run(*args),
        Command::Ticket(args) => client::run(*args),
        Command::EngineImage => engine_image(),
    }
}

#[derive(Serialize)]
struct JsonDiagnostic {
    code: &'static str,
    origin: String,
    line: Option<u32>,
    column: Option<u32>,
    path: String,
    message: String,
    help: String,
}

#[derive(Serialize)]
struct JsonResult {
    valid: bool,
    config: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    revision: Option<String>,
    problems: Vec<JsonDiagnostic>,
}

fn json_diagnostics(invalid: &InvalidConfig) -> Vec<JsonDiagnostic> {
    invalid
        .diagnostics
        .iter()
        .map(|d| JsonDiagnostic {
            code: d.code.as_str(),
            origin: d.place.origin.to_string(),
            line: d.place.line_column.map(|(l, _)| l),
            column: d.place.line_column.map(|(_, c)| c),
            path: d.place.path.clone(),
            message: d.message.clone(),
            help: d.help.clone(),
        })
        .collect()
}

/// Loads the folder (as files, or as cluster objects) and checks the pins of the
/// AgentFlowEngines in it.
fn load(dir: &Path, objects: bool) -> Result<(Config, Revision), InvalidConfig> {
    let config = if objects {
        afe_config::load_cluster_folder(dir)?
    } else {
        afe_config::load_folder(dir)?
    };
    let revision = Revision::of(&config);
    let pins = revision.pin_problems(&config);
    if pins.is_empty() {
        Ok((config, revision))
    } else {
        Err(InvalidConfig { diagnostics: pins })
    }
}

fn validate(dir: &Path, objects: bool, json: bool) -> ExitCode {
    let loaded = load(dir, objects);
    if json {
        let result = match &loaded {
            Ok((_, revision)) => JsonResult {
                valid: true,
                config: dir.display().to_string(),
                revision: Some(revision.hash.clone()),
                problems: Vec::new(),
            },
            Err(invalid) => JsonResult {
                valid: false,
                config: dir.display().to_string(),
                revision: None,
                problems: json_diagnostics(invalid),
            },
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&result).expect("a result serializes")
        );
    }
    match loaded {
        Ok((config, revision)) => {
            if !json {
                println!(
                    "{} is valid: {} schema(s), {} agent(s), {} flow(s), {} plugin(s){}\nrevision {}",
                    dir.display(),
                    config.schemas.len(),
                    config.agents.len(),
                    config.flows.len(),
                    config.plugins.len(),
                    if config.runtime.is_some() {
                        ", a Runtime"
                    } else {
                        ""
                    },
                    revision.hash
                );
            }
            ExitCode::SUCCESS
        }
        Err(invalid) => {
            if !json {
                eprint!("{}", report::render(&invalid));
            }
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn revision(dir: &Path, objects: bool, explain: bool) -> ExitCode {
    match load(dir, objects) {
        Ok((_, revision)) => {
            println!("{}", revision.hash);
            if explain {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&revision.normalized)
                        .expect("a document serializes")
                );
            }
            ExitCode::SUCCESS
        }
        Err(invalid) => {
            eprint!("{}", report::render(&invalid));
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn engine_image() -> ExitCode {
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return ExitCode::FAILURE;
    };
    let made = runtime.block_on(async {
        let docker = af_docker::connect().await?;
        af_docker::engine_image::ensure(&docker).await
    });
    match made {
        Ok(tag) => {
            println!("{tag}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            let err = af_runtime::RuntimeError::from(err);
            eprintln!("afe engine-image: {err}\n  help: {}", err.help());
            ExitCode::from(EXIT_FAILED)
        }
    }
}

fn crdgen(out: &Path) -> ExitCode {
    match afe_config::crd::write(out) {
        Ok(paths) => {
            for path in paths {
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!(
                "afe crdgen: cannot write to {}: {err}\n  help: choose a folder you can write with --out",
                out.display()
            );
            ExitCode::from(EXIT_FAILED)
        }
    }
}
