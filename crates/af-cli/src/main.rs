//! `af`: environments ("twins") of a multi-service app from a manifest.

mod cli;
mod environment_commands;
mod environment_name;
mod exit;
mod problem_report;
mod progress;
mod render;
mod validate;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};
use crate::exit::Exit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.global.verbose);
    let outcome = match &cli.command {
        Command::Validate(args) => validate::run(args, &cli.global.manifest, cli.global.json),
        Command::Completion { shell } => completion(*shell, cli.global.json),
        Command::Render(args) => render::run(args, &cli.global.manifest, cli.global.json),
        Command::Up(args) => environment_commands::run(
            environment_commands::Verb::Up,
            args,
            &cli.global.manifest,
            cli.global.json,
        ),
        Command::Down(args) => environment_commands::run(
            environment_commands::Verb::Down,
            args,
            &cli.global.manifest,
            cli.global.json,
        ),
        Command::Net {
            command: cli::NetCommand::Log(args),
        } => {
            let verdict = match args
                .verdict
                .as_deref()
                .map(str::parse::<af_runtime::Verdict>)
            {
                Some(Err(why)) => {
                    eprintln!("af: {why}");
                    return ExitCode::from(Exit::Usage.status());
                }
                Some(Ok(v)) => Some(v),
                None => None,
            };
            let query = af_runtime::DecisionQuery {
                verdict,
                host: args.host.clone(),
                since: args.since.clone(),
            };
            environment_commands::run(
                environment_commands::Verb::NetLog(query, args.follow),
                &args.env,
                &cli.global.manifest,
                cli.global.json,
            )
        }
        Command::Logs(args) => environment_commands::run(
            environment_commands::Verb::Logs {
                service: args.service.clone(),
                follow: args.follow,
            },
            &args.env,
            &cli.global.manifest,
            cli.global.json,
        ),
        Command::Inbox(args) => environment_commands::run(
            environment_commands::Verb::Inbox(args.id.clone()),
            &args.env,
            &cli.global.manifest,
            cli.global.json,
        ),
        Command::Webhook {
            command: cli::WebhookCommand::Trigger(args),
        } => {
            let headers = args
                .headers
                .iter()
                .filter_map(|h| {
                    h.split_once(':')
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                })
                .collect();
            let request = af_runtime::WebhookRequest {
                service: args.service.clone(),
                path: args.path.clone(),
                method: args.method.clone(),
                headers,
                body: args.body.clone(),
            };
            environment_commands::run(
                environment_commands::Verb::Webhook(request),
                &args.env,
                &cli.global.manifest,
                cli.global.json,
            )
        }
        Command::Db {
            command: cli::DbCommand::Reset(args),
        } => environment_commands::run(
            environment_commands::Verb::DbReset,
            args,
            &cli.global.manifest,
            cli.global.json,
        ),
        Command::Db {
            command: cli::DbCommand::Psql(args),
        } => environment_commands::run(
            environment_commands::Verb::DbPsql(args.args.clone()),
            &args.env,
            &cli.global.manifest,
            cli.global.json,
        ),
        Command::Status(args) => environment_commands::run(
            environment_commands::Verb::Status,
            args,
            &cli.global.manifest,
            cli.global.json,
        ),
    };
    let exit = outcome.unwrap_or_else(|err| {
        eprintln!("af: internal error: {err:#}");
        Exit::Internal
    });
    ExitCode::from(exit.status())
}

/// Prints the completion script; with `--json`, inside a JSON document so that every verb's
/// output can be read the same way.
fn completion(shell: clap_complete::Shell, json: bool) -> anyhow::Result<Exit> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "af", &mut script);
    if json {
        let document = serde_json::json!({
            "shell": shell.to_string(),
            "script": String::from_utf8(script)?,
        });
        println!("{document}");
    } else {
        std::io::Write::write_all(&mut std::io::stdout(), &script)?;
    }
    Ok(Exit::Success)
}

/// Diagnostics on standard error: warnings by default, more with each -v. `RUST_LOG` overrides.
fn init_tracing(verbose: u8) {
    // kube's client logs a failed request itself; af reports it once, with its code, so kube's
    // own line is kept for -v and up.
    let level = match verbose {
        0 => "warn,kube_client=off",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .init();
}
