//! `af-conformance`: run the roster on a runtime and check a run's records.
//!
//! - `run --runtime local|kubernetes [--cluster k3d|control-plane] [--out FILE] [--only TEXT]...`:
//!   every behaviour, a JSON line per behaviour in FILE, then the reader's check of those lines;
//!   exits 0 only when it accepts.
//! - `verdicts FILE --runtime local [--run ID]`: the reader alone, on a file of records.
//! - `roster`: the behaviours, what each proves, as a Markdown table.

use std::path::PathBuf;
use std::process::ExitCode;

use af_conformance::harness::Harness;
use af_conformance::kubernetes::KubeHarness;
use af_conformance::local::LocalHarness;
use af_conformance::plan::{Selection, plan};
use af_conformance::record::{Verdict, from_lines, to_lines};
use af_conformance::{context::Ctx, expected, new_run_id, reader, roster, runner};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "af-conformance",
    about = "The behaviours every runtime must pass"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the roster on a runtime; write one record per behaviour; check the records.
    Run {
        #[arg(long)]
        runtime: String,
        /// Where the records go (default: conformance-<runtime>-<run>.jsonl here).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Run only behaviours whose name contains this (repeatable); containment behaviours are
        /// never left out, and a selection that would leave one out is refused.
        #[arg(long)]
        only: Vec<String>,
        /// Kubernetes only: `k3d`, the kubeconfig's current context (a disposable k3d cluster:
        /// scripts/k8s-conformance), or `control-plane`, the project's own Kubernetes 1.20 and
        /// node, started and stopped by the run (scripts/control-plane install first).
        #[arg(long, default_value = "k3d", value_parser = ["k3d", "control-plane"])]
        cluster: String,
    },
    /// Check a run's records: every behaviour of the roster once, none failed, no containment
    /// behaviour skipped, the immediate-startup proof passed, one runtime, one run.
    Verdicts {
        file: PathBuf,
        #[arg(long)]
        runtime: String,
        /// The run the records must belong to (default: the first record's).
        #[arg(long)]
        run: Option<String>,
    },
    /// The roster as a Markdown table.
    Roster,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run {
            runtime,
            out,
            only,
            cluster,
        } => {
            let Ok(tokio) = tokio::runtime::Runtime::new() else {
                return ExitCode::FAILURE;
            };
            tokio.block_on(run(&runtime, &cluster, out, only))
        }
        Command::Verdicts { file, runtime, run } => verdicts(&file, &runtime, run.as_deref()),
        Command::Roster => {
            println!("| behaviour | area | skipped without | proves |\n|---|---|---|---|");
            for b in roster() {
                println!(
                    "| `{}` | {:?} | {} | {} |",
                    b.name,
                    b.area,
                    b.needs.map_or("—".to_string(), |c| format!("{c:?}")),
                    b.proves
                );
            }
            ExitCode::SUCCESS
        }
    }
}

async fn run(runtime: &str, cluster: &str, out: Option<PathBuf>, only: Vec<String>) -> ExitCode {
    let run_id = new_run_id();
    let started: Result<Box<dyn Harness>, String> = match runtime {
        "local" => LocalHarness::start(&run_id)
            .await
            .map(|h| Box::new(h) as Box<dyn Harness>),
        "kubernetes" if cluster == "control-plane" => KubeHarness::start_control_plane(&run_id)
            .await
            .map(|h| Box::new(h) as Box<dyn Harness>),
        "kubernetes" => KubeHarness::start(&run_id)
            .await
            .map(|h| Box::new(h) as Box<dyn Harness>),
        other => {
            eprintln!(
                "af-conformance: no harness for the {other} runtime (local, kubernetes); nothing was run and nothing is claimed"
            );
            return ExitCode::from(2);
        }
    };
    let harness = match started {
        Ok(harness) => harness,
        Err(err) => {
            // Nothing ran: a harness that cannot be set up is not a verdict on the runtime.
            eprintln!("af-conformance: cannot set up the {runtime} harness: {err}");
            return ExitCode::from(2);
        }
    };
    let harness = harness.as_ref();
    let planned = match plan(
        &roster(),
        harness.runtime().capabilities(),
        &Selection { only },
    ) {
        Ok(planned) => planned,
        Err(err) => {
            harness.close().await;
            eprintln!("af-conformance: {err}");
            return ExitCode::from(2);
        }
    };
    let ctx = Ctx::new(harness, run_id.clone());
    eprintln!(
        "af-conformance: run {run_id} on {runtime}, {} behaviours",
        planned.len()
    );
    let records = runner::run(&ctx, &planned, runtime, |record| {
        let mark = match record.verdict {
            Verdict::Passed => "pass",
            Verdict::Failed => "FAIL",
            Verdict::Skipped => "skip",
        };
        eprintln!(
            "{mark} {} ({} ms): {}",
            record.name, record.duration_ms, record.detail
        );
    })
    .await;
    let leftovers = ctx.teardown().await;
    harness.close().await;
    let out = out.unwrap_or_else(|| PathBuf::from(format!("conformance-{runtime}-{run_id}.jsonl")));
    if let Err(err) = std::fs::write(&out, to_lines(&records)) {
        eprintln!("af-conformance: cannot write {}: {err}", out.display());
        return ExitCode::FAILURE;
    }
    eprintln!("af-conformance: records in {}", out.display());
    for failure in &leftovers {
        eprintln!("af-conformance: teardown failed: {failure}");
    }
    let verdict = verdicts(&out, runtime, Some(&run_id));
    if leftovers.is_empty() {
        verdict
    } else {
        ExitCode::FAILURE
    }
}

fn verdicts(file: &std::path::Path, runtime: &str, run: Option<&str>) -> ExitCode {
    let records = match std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| from_lines(&t))
    {
        Ok(records) => records,
        Err(err) => {
            eprintln!("af-conformance verdicts: {}: {err}", file.display());
            return ExitCode::FAILURE;
        }
    };
    match reader::check(&records, &expected(), runtime, run) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(problems) => {
            println!("refused: {} problem(s)", problems.len());
            for problem in problems {
                println!("  {problem}");
            }
            ExitCode::FAILURE
        }
    }
}
