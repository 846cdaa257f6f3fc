//! `af up`, `af down`, `af status`: the manifest's environment on its runtime.

use std::io::Write;
use std::path::Path;

use af_manifest::{EnvironmentId, Manifest, Provider};
use af_runtime::{
    Capabilities, Capability, Environment, EnvironmentStatus, ProgressEvent, ProgressSink, Runtime,
    RuntimeError,
};

use crate::cli::EnvArgs;
use crate::environment_name::environment_name;
use crate::exit::Exit;
use crate::problem_report;

/// Shows progress: a line per event on standard error, or JSON lines on standard output.
struct Progress {
    json: bool,
}

impl ProgressSink for Progress {
    fn emit(&self, event: ProgressEvent) {
        if self.json {
            if let Ok(line) = serde_json::to_string(&event) {
                println!("{line}");
            }
            return;
        }
        let line = match event {
            ProgressEvent::StepStarted { step, detail } => format!("▸ {step:?}: {detail}"),
            ProgressEvent::StepFinished { step, elapsed } => {
                format!("✓ {step:?} ({:.1}s)", elapsed.as_secs_f64())
            }
            ProgressEvent::Waiting { on, .. } => format!("  waiting for {on}"),
            ProgressEvent::Url { service, url } => format!("  {service}: {url}"),
            ProgressEvent::Notice { message } => format!("  note: {message}"),
        };
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

pub enum Verb {
    Up,
    Down,
    Status,
}

pub fn run(verb: Verb, args: &EnvArgs, manifest_path: &Path, json: bool) -> anyhow::Result<Exit> {
    let manifest = match af_manifest::load(manifest_path) {
        Ok(manifest) => manifest,
        Err(invalid) => {
            eprint!("{}", problem_report::render(&invalid));
            return Ok(Exit::InvalidManifest);
        }
    };
    let dir = manifest_path.parent().unwrap_or(Path::new("."));
    let name = match environment_name(args.env.as_deref(), dir) {
        Ok(name) => name,
        Err(why) => {
            eprintln!("af: cannot tell which environment: {why}");
            return Ok(Exit::Usage);
        }
    };
    let id = EnvironmentId::derive(&manifest.name, &name);
    let runtime = tokio::runtime::Runtime::new()?;
    let outcome = runtime.block_on(async {
        let platform = connect(&manifest).await?;
        let progress = Progress { json };
        match verb {
            Verb::Up => {
                let environment = Environment {
                    id: id.clone(),
                    manifest: manifest.clone(),
                    manifest_dir: dir.to_path_buf(),
                };
                let report = platform.up(&environment, &progress).await?;
                Ok(Some(report.status))
            }
            Verb::Down => platform.down(&id, &progress).await.map(|()| None),
            Verb::Status => platform.status(&id).await.map(Some),
        }
    });
    match outcome {
        Ok(status) => {
            if let Some(status) = status {
                print_status(&status, json)?;
            } else if !json {
                eprintln!("environment {id} removed");
            }
            Ok(Exit::Success)
        }
        Err(err) => {
            report_error(&err, json);
            Ok(Exit::Runtime(err.code()))
        }
    }
}

/// The runtime the manifest names. Only the local one is built; asking for another is AF-RUN-044
/// naming it, never a quiet fallback to this machine's Docker.
async fn connect(manifest: &Manifest) -> Result<Box<dyn Runtime>, RuntimeError> {
    match manifest.runtime.provider {
        Provider::Local => {
            let docker = af_docker::connect().await.map_err(RuntimeError::from)?;
            Ok(Box::new(af_docker::LocalRuntime::new(
                docker,
                af_docker::probe::target_args(None),
            )))
        }
        Provider::Kubernetes => {
            Err(Capabilities::new("kubernetes", []).unsupported(Capability::Environments))
        }
    }
}

fn report_error(err: &RuntimeError, json: bool) {
    if json {
        let document = serde_json::json!({"error": {"code": err.code().as_str(), "message": err.message(), "help": err.help(), "details": err}});
        println!("{document}");
    } else {
        eprintln!("af: {err}\n  help: {}", err.help());
    }
}

fn print_status(status: &EnvironmentStatus, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(status)?);
        return Ok(());
    }
    println!("environment {}", status.id);
    println!(
        "{:<24} {:>7} {:>10} {:>12}",
        "SERVICE", "READY", "CPU", "MEMORY"
    );
    for service in &status.services {
        let cpu = service
            .applied_cpu_millis
            .map_or("-".to_string(), |m| format!("{m}m"));
        let memory = service
            .applied_memory_bytes
            .map_or("-".to_string(), |b| format!("{}Mi", b >> 20));
        println!(
            "{:<24} {:>7} {:>10} {:>12}",
            service.name,
            format!("{}/{}", service.ready, service.wanted),
            cpu,
            memory
        );
    }
    if let Some(containment) = &status.containment {
        let verdict = if containment.contained {
            "contained"
        } else {
            "NOT contained"
        };
        println!(
            "containment: {verdict} ({} routes denied, checked {})",
            containment.routes.len(),
            containment.checked_at
        );
    }
    Ok(())
}
