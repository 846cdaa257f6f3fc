//! `af up`, `af down`, `af status`: the manifest's environment on its runtime.

use std::path::Path;

use af_manifest::{EnvironmentId, Manifest, Provider};
use af_runtime::{
    CapturedItem, DatabaseStatus, DecisionQuery, DecisionRecord, Environment, EnvironmentStatus,
    InboxEntry, Runtime, RuntimeError, ShellOutput, WebhookDelivery, WebhookRequest,
};

use crate::cli::EnvArgs;
use crate::environment_name::load_environment;
use crate::exit::Exit;

pub enum Verb {
    Up,
    Down,
    Status,
    NetLog(DecisionQuery, bool),
    Inbox(Option<String>),
    Webhook(WebhookRequest),
    Logs {
        service: String,
        follow: bool,
    },
    DbReset,
    /// psql's arguments.
    DbPsql(Vec<String>),
}

/// What a verb answers with.
enum Answer {
    Status(EnvironmentStatus),
    Removed,
    Decisions(Vec<DecisionRecord>),
    /// The captured items; whole (one asked for by id) or a line each.
    Inbox(Vec<InboxEntry>, bool),
    Delivery(WebhookDelivery),
    /// The branch, just reset.
    Reset(DatabaseStatus),
    /// psql, run without a terminal.
    Shell(ShellOutput),
    /// A command to run in the user's terminal (an interactive psql).
    Interactive(Vec<String>),
    /// Already printed as it came.
    Printed,
}

pub fn run(verb: Verb, args: &EnvArgs, manifest_path: &Path, json: bool) -> anyhow::Result<Exit> {
    let (manifest, dir, id) = match load_environment(manifest_path, args.env.as_deref()) {
        Ok(loaded) => loaded,
        Err(exit) => return Ok(exit),
    };
    let dir = dir.as_path();
    let is_up = matches!(verb, Verb::Up);
    let runtime = tokio::runtime::Runtime::new()?;
    let outcome = runtime.block_on(async {
        let platform = connect(&manifest).await?;
        let progress = crate::progress::for_invocation(json);
        let progress = progress.as_ref();
        Ok::<_, RuntimeError>(match verb {
            Verb::Up => {
                let environment = Environment {
                    id: id.clone(),
                    manifest: manifest.clone(),
                    manifest_dir: dir.to_path_buf(),
                };
                let report = platform.up(&environment, progress).await?;
                if report.unchanged && !json {
                    eprintln!("nothing changed: the environment was already as the manifest says");
                }
                Answer::Status(report.status)
            }
            Verb::Down => {
                platform.down(&id, progress).await?;
                Answer::Removed
            }
            Verb::Status => Answer::Status(platform.status(&id).await?),
            Verb::NetLog(query, false) => Answer::Decisions(platform.net_log(&id, &query).await?),
            Verb::NetLog(query, true) => {
                follow_decisions(platform.as_ref(), &id, query, json).await?;
                Answer::Printed
            }
            Verb::Inbox(wanted) => {
                let entries = platform.inbox(&id).await?;
                let whole = wanted.is_some();
                Answer::Inbox(
                    match wanted {
                        Some(wanted) => entries.into_iter().filter(|e| e.id == wanted).collect(),
                        None => entries,
                    },
                    whole,
                )
            }
            Verb::Webhook(request) => {
                Answer::Delivery(platform.trigger_webhook(&id, &request).await?)
            }
            Verb::DbReset => Answer::Reset(platform.reset_database(&id).await?),
            Verb::DbPsql(args) => {
                use std::io::{IsTerminal, Read};
                if std::io::stdin().is_terminal() {
                    Answer::Interactive(platform.interactive_database_shell(&id, &args).await?)
                } else {
                    let mut input = Vec::new();
                    std::io::stdin().read_to_end(&mut input).map_err(|e| {
                        RuntimeError::platform_failed("reading standard input for psql", e)
                    })?;
                    Answer::Shell(platform.database_shell(&id, &args, input).await?)
                }
            }
            Verb::Logs { service, follow } => {
                use futures_util::StreamExt;
                let mut lines = platform.logs(&id, &service, follow).await?;
                while let Some(line) = lines.next().await {
                    let line = line?;
                    if json {
                        println!("{}", serde_json::to_string(&line).unwrap_or_default());
                    } else {
                        println!("{} | {}", line.instance, line.line);
                    }
                }
                Answer::Printed
            }
        })
    });
    match outcome {
        Ok(Answer::Inbox(entries, true)) if entries.is_empty() => {
            // An id that names nothing is a wrong argument, not an empty answer.
            eprintln!(
                "af inbox: no entry with that id in the inbox of {id} (`af inbox` lists them; ids \
                 are never reused, and the inbox keeps only its newest entries)"
            );
            Ok(Exit::Usage)
        }
        Ok(Answer::Shell(output)) => {
            print!("{}", output.stdout);
            eprint!("{}", output.stderr);
            Ok(Exit::Psql(u8::try_from(output.exit_code).unwrap_or(1)))
        }
        Ok(Answer::Interactive(command)) => run_in_terminal(&command),
        Ok(answer) => {
            print_answer(&id, answer, json)?;
            Ok(Exit::Success)
        }
        Err(err) => {
            report_error(&err, json, is_up);
            Ok(Exit::Runtime(err.code()))
        }
    }
}

/// Prints the matching decisions, then each new one as it is made: asks again every second for
/// what came at or after the last one printed, and skips what it has printed already.
async fn follow_decisions(
    platform: &dyn Runtime,
    id: &EnvironmentId,
    mut query: DecisionQuery,
    json: bool,
) -> Result<(), RuntimeError> {
    let mut printed_at_last_time: Vec<DecisionRecord> = Vec::new();
    loop {
        for record in platform.net_log(id, &query).await? {
            if printed_at_last_time.contains(&record) {
                continue;
            }
            print_decision(&record, json);
            if query.since.as_deref() != Some(record.time.as_str()) {
                query.since = Some(record.time.clone());
                printed_at_last_time.clear();
            }
            printed_at_last_time.push(record);
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

fn print_decision(r: &DecisionRecord, json: bool) {
    if json {
        println!("{}", serde_json::to_string(r).unwrap_or_default());
    } else {
        println!(
            "{} {:<8} {:<16} {:<7} {}:{} {} ({})",
            r.time,
            r.verdict_text(),
            r.protocol,
            r.method,
            r.host,
            r.port,
            r.rule,
            r.client
        );
    }
}

/// Runs `command` (`docker exec -it ...`) in this terminal, its status af's.
fn run_in_terminal(command: &[String]) -> anyhow::Result<Exit> {
    let Some((program, args)) = command.split_first() else {
        return Ok(Exit::Internal);
    };
    match std::process::Command::new(program).args(args).status() {
        Ok(status) => Ok(Exit::Psql(
            status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1),
        )),
        Err(err) => {
            eprintln!(
                "af db psql: {program} could not be run ({err}); an interactive psql needs the docker CLI. Without a terminal, af runs psql itself: pipe SQL in (`echo 'select 1' | af db psql`)"
            );
            Ok(Exit::Usage)
        }
    }
}

fn print_answer(id: &EnvironmentId, answer: Answer, json: bool) -> anyhow::Result<()> {
    match answer {
        Answer::Status(status) => print_status(&status, json)?,
        Answer::Removed if json => println!("{}", serde_json::json!({"removed": id})),
        Answer::Removed => eprintln!("environment {id} removed"),
        Answer::Decisions(records) => {
            for record in &records {
                print_decision(record, json);
            }
        }
        Answer::Inbox(entries, _) if json => println!("{}", serde_json::to_string(&entries)?),
        Answer::Inbox(entries, whole) => {
            for entry in entries {
                println!("{}", inbox_line(&entry));
                if whole {
                    print!("{}", inbox_whole(&entry));
                }
            }
        }
        Answer::Delivery(delivery) if json => println!("{}", serde_json::to_string(&delivery)?),
        Answer::Delivery(delivery) => println!("{}\n{}", delivery.status, delivery.body),
        Answer::Reset(database) if json => {
            println!("{}", serde_json::json!({ "reset": database }));
        }
        Answer::Reset(database) => eprintln!(
            "branch {} of {id} made fresh from its template ({})",
            database.branch,
            size_text(database.size_bytes)
        ),
        // Handled before: they decide the exit status.
        Answer::Shell(_) | Answer::Interactive(_) | Answer::Printed => {}
    }
    Ok(())
}

/// One captured item as `af inbox` lists it: id, time, what, and its body's size (and whether
/// the body was cut at the inbox's limit).
fn inbox_line(entry: &InboxEntry) -> String {
    let cut = |truncated: bool| if truncated { ", truncated" } else { "" };
    match &entry.item {
        CapturedItem::Http {
            method,
            host,
            path,
            body,
            truncated,
            ..
        } => format!(
            "{} {} http {method} {host}{path} ({} bytes{})",
            entry.id,
            entry.time,
            body.len(),
            cut(*truncated)
        ),
        CapturedItem::Mail {
            from,
            to,
            subject,
            body,
            truncated,
        } => format!(
            "{} {} mail from {from} to {} \"{subject}\" ({} bytes{})",
            entry.id,
            entry.time,
            to.join(", "),
            body.len(),
            cut(*truncated)
        ),
    }
}

/// What `af inbox ID` prints under the entry's line: a request's header fields, or a mail's
/// addresses and subject, then a blank line and the body as it was kept.
fn inbox_whole(entry: &InboxEntry) -> String {
    let (fields, body) = match &entry.item {
        CapturedItem::Http { headers, body, .. } => (
            headers
                .iter()
                .map(|(name, value)| format!("{name}: {value}\n"))
                .collect::<String>(),
            body,
        ),
        CapturedItem::Mail {
            from,
            to,
            subject,
            body,
            ..
        } => (
            format!("From: {from}\nTo: {}\nSubject: {subject}\n", to.join(", ")),
            body,
        ),
    };
    let end = if body.is_empty() || body.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    format!("{fields}\n{body}{end}")
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
            // The nodes must be able to pull the engine image: AF_PROXY_IMAGE names one they can;
            // otherwise the tag this build's image has, which the probe reports at once if the
            // nodes cannot pull it.
            let engine_image = af_docker::engine_image::expected().map_err(RuntimeError::from)?;
            let runtime = af_kube::KubeRuntime::connect(
                manifest.runtime.kubeconfig_context.as_deref(),
                manifest.runtime.namespace_prefix.clone(),
                engine_image,
                af_docker::probe::target_args(None),
            )
            .await?;
            // Where the ingress controller listens, when preview hosts do not resolve to it (a
            // k3d cluster's loopback port).
            let runtime = match std::env::var("AF_INGRESS_ADDRESS") {
                Ok(address) => runtime.with_ingress_address(address.parse().map_err(|e| {
                    RuntimeError::platform_failed(
                        "reading AF_INGRESS_ADDRESS",
                        format!("{address:?} is not an address:port ({e})"),
                    )
                })?),
                Err(_) => runtime,
            };
            // k3d and kind nodes take copies of local images, and nodes that run on this
            // machine's daemon have them already: af builds with the local daemon when it can
            // reach one (the runtime decides at `up` which of these the cluster is).
            if *runtime.loader() != af_kube::images::Loader::Registry {
                let docker = af_docker::connect().await.map_err(RuntimeError::from)?;
                return Ok(Box::new(runtime.with_image_work(std::sync::Arc::new(
                    af_kube::images::DockerImageWork::new(docker),
                ))));
            }
            match af_docker::connect().await {
                Ok(docker) => Ok(Box::new(runtime.with_image_work(std::sync::Arc::new(
                    af_kube::images::DockerImageWork::new(docker),
                )))),
                Err(_) => Ok(Box::new(runtime)),
            }
        }
    }
}

/// What a failed `af up` leaves: it does not undo its steps (an environment half made is easier
/// to look into than one that vanished), so the user is told where things stand and what clears it.
const AFTER_FAILED_UP: &str = "anything this af up made before it stopped is left as it was, to look into (af status, af logs SERVICE, af net log); af down removes all of it";

fn report_error(err: &RuntimeError, json: bool, after_up: bool) {
    let left = after_up.then_some(AFTER_FAILED_UP);
    if json {
        let mut error = serde_json::json!({"code": err.code().as_str(), "category": err.category().as_str(), "message": err.message(), "help": err.help(), "details": err});
        if let Some(left) = left {
            error["left"] = left.into();
        }
        println!("{}", serde_json::json!({ "error": error }));
    } else {
        eprintln!("af: {err}\n  help: {}", err.help());
        if let Some(left) = left {
            eprintln!("  left: {left}");
        }
    }
}

/// A branch's size as a person reads it.
fn size_text(bytes: Option<u64>) -> String {
    match bytes {
        None => "size unknown".to_string(),
        Some(b) if b >= 10 << 20 => format!("{} MiB", b >> 20),
        Some(b) => format!("{} KiB", b >> 10),
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
    for service in &status.services {
        for url in &service.urls {
            println!("{}: {url}", service.name);
        }
    }
    if let Some(database) = &status.database {
        println!(
            "database: branch {} ({}, {}) on {}",
            database.branch,
            if database.running {
                "running"
            } else {
                "NOT running"
            },
            size_text(database.size_bytes),
            database.image
        );
    }
    if let Some(external) = &status.external_database {
        println!(
            "database: external {}:{}, relayed by the sidecar at {} ({})",
            external.host,
            external.port,
            external.relay,
            external
                .named_by
                .as_deref()
                .map_or("allowed by egress.allow".to_string(), |named| format!(
                    "named by {named}"
                ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inbox_line_says_what_was_captured_and_whether_its_body_was_cut() {
        let entry = |item| InboxEntry {
            id: "000007".into(),
            time: "2026-12-01T21:00:00.000Z".into(),
            item,
        };
        let request = entry(CapturedItem::Http {
            method: "POST".into(),
            host: "api.payments.example".into(),
            path: "/v1/charges".into(),
            headers: Default::default(),
            body: "{}".into(),
            truncated: false,
        });
        assert_eq!(
            inbox_line(&request),
            "000007 2026-12-01T21:00:00.000Z http POST api.payments.example/v1/charges (2 bytes)"
        );
        let mail = entry(CapturedItem::Mail {
            from: "shop@example.com".into(),
            to: vec!["ana@example.com".into(), "bo@example.com".into()],
            subject: "Order 7".into(),
            body: "abcd".into(),
            truncated: true,
        });
        assert_eq!(
            inbox_whole(&request),
            "\n{}\n",
            "no header fields, the body"
        );
        assert_eq!(
            inbox_line(&mail),
            "000007 2026-12-01T21:00:00.000Z mail from shop@example.com to ana@example.com, bo@example.com \"Order 7\" (4 bytes, truncated)"
        );
        assert_eq!(
            inbox_whole(&mail),
            "From: shop@example.com\nTo: ana@example.com, bo@example.com\nSubject: Order 7\n\nabcd\n"
        );
    }
}
