//! One instance of a service on Docker, as a pod: a holder that owns the network namespace (on the
//! services' network, resolving through the sidecar, reachable by the service's name), the
//! refusal rules, the startup gate, and only then the application container joining it.

use std::time::Duration;

use af_manifest::Service;
use bollard::Docker;

use crate::error::{DockerError, platform};
use crate::one_shot;
use crate::plan::containers;
use crate::sidecar::{DNS_PORT, PROXY_PORT};
use crate::{names, schedule, sidecar};

pub use crate::plan::service::{
    MIGRATION_SPEC, Placement, entry, environment, environment_with, instance_spec, migration,
    migration_holder_role, roles,
};

/// A running instance.
#[derive(Clone, Debug)]
pub struct Instance {
    pub holder: String,
    pub app: String,
    /// The holder's address on the services' network.
    pub ip: String,
}

/// Between the rounds of the startup gate and of the probe. Their defaults (500 ms, 250 ms) leave
/// time for a policy engine that enforces eventually (a CNI on Kubernetes); here nothing is
/// eventual: the internal network is fixed when created, and the refusal rules are applied, and
/// checked applied, before either starts. The rounds are still three, each trying every route.
/// (At the probe's 250 ms, `af up` paid half a second for rounds that could not differ.)
pub(crate) const ROUND_INTERVAL_MS: &str = "10";

/// [`environment_with`] af's own environment, as the placement reads it.
fn environment_at(at: Placement<'_>, service: &Service) -> Result<Vec<String>, DockerError> {
    environment_with(at, service, &|name| at.variables.get(name))
}

/// The first half of a pod, which needs nothing of the sidecar but its address: the holder (on the
/// services' network, resolving through the sidecar, reachable as `alias`) and the refusal rules.
/// Returns the `container:<holder>` network mode.
pub(crate) async fn hold_with_rules(
    docker: &Docker,
    at: Placement<'_>,
    holder: &str,
    holder_role: &str,
    alias: Option<&str>,
    spec: &str,
) -> Result<String, DockerError> {
    let body = containers::pod_holder(at, holder_role, alias, spec);
    one_shot::create_and_start(docker, holder, body, &[]).await?;
    one_shot::apply_refusal(docker, holder, &at.layout.refusal_args()).await?;
    Ok(format!("container:{holder}"))
}

/// The startup gate, in `holder` itself (its namespace, its user, no capabilities): every route
/// refused, the sidecar answering. Needs the sidecar running. A refusal is AF-RUN-043 naming
/// `workload`'s gate and its reason.
pub(crate) async fn gate(
    docker: &Docker,
    at: Placement<'_>,
    holder: &str,
    workload: &str,
) -> Result<(), DockerError> {
    let sidecar_ip = at.sidecar_ip.to_string();
    let mut gate = vec![
        "gate".to_string(),
        "--sidecar-proxy".to_string(),
        format!("{sidecar_ip}:{PROXY_PORT}"),
        "--sidecar-dns".to_string(),
        format!("{sidecar_ip}:{DNS_PORT}"),
        "--deadline-s".to_string(),
        "30".to_string(),
        "--interval-ms".to_string(),
        ROUND_INTERVAL_MS.to_string(),
    ];
    gate.extend(at.gate_targets.iter().cloned());
    let verdict = one_shot::exec_in_holder(docker, holder, &gate).await?;
    if verdict.exit_code != 0 {
        return Err(DockerError::Runtime(af_runtime::gate_refusal(
            workload,
            &verdict.stdout,
            &verdict.stderr,
        )));
    }
    Ok(())
}

/// An instance after [`prepare`].
#[derive(Clone, Debug)]
pub enum Prepared {
    /// It already runs exactly as specified: nothing to do.
    Current(Instance),
    /// A new holder with the refusal rules applied, and the application created in its namespace,
    /// not started: the gate, then starting it, are next.
    Fresh { holder: String, app: String },
}

impl Prepared {
    pub fn is_current(&self) -> bool {
        matches!(self, Prepared::Current(_))
    }
}

/// The part of instance `index` of `service` that runs no workload code and needs no sidecar: a
/// running instance that matches its specification is kept; otherwise it is replaced by a fresh
/// holder with the refusal rules and an application container created, not started. `up` does
/// this for every instance while the probe runs. `holder_ready` is told a fresh holder's name as
/// soon as its refusal rules apply (the probe can run there from then on).
pub async fn prepare(
    docker: &Docker,
    at: Placement<'_>,
    service: &Service,
    image: &str,
    index: u32,
    holder_ready: &(dyn Fn(&str) + Sync),
) -> Result<Prepared, DockerError> {
    let (holder_role, app_role) = roles(&service.name, index);
    let holder = names::container(at.env, &holder_role);
    let app = names::container(at.env, &app_role);
    let spec = instance_spec(at, service, image, &environment_at(at, service)?);
    if one_shot::running_with_spec(docker, &app, at.env, &spec).await?
        && one_shot::running_with_spec(docker, &holder, at.env, &spec).await?
    {
        let ip = sidecar::address_on(docker, &holder, at.internal).await?;
        return Ok(Prepared::Current(Instance { holder, app, ip }));
    }
    one_shot::clear(docker, &app, at.env).await?;
    one_shot::clear(docker, &holder, at.env).await?;
    let joined = hold_with_rules(
        docker,
        at,
        &holder,
        &holder_role,
        Some(&service.name),
        &spec,
    )
    .await?;
    holder_ready(&holder);
    create_app(docker, at, service, image, index, joined, &spec).await?;
    Ok(Prepared::Fresh { holder, app })
}

/// Starts instance `index` of `service` once [`prepare`]d: the startup gate, then the
/// application. `true` when something was created.
pub async fn start(
    docker: &Docker,
    at: Placement<'_>,
    service: &Service,
    prepared: Prepared,
) -> Result<(Instance, bool), DockerError> {
    let (holder, app) = match prepared {
        Prepared::Current(instance) => return Ok((instance, false)),
        Prepared::Fresh { holder, app } => (holder, app),
    };
    gate(docker, at, &holder, &service.name).await?;
    one_shot::start(docker, &app).await?;
    let ip = sidecar::address_on(docker, &holder, at.internal).await?;
    Ok((Instance { holder, app, ip }, true))
}

/// Creates (without starting) the application container of instance `index` of `service` from
/// `image` (its `image:`, or the one built from its `build:` context), in the namespace `joined`.
async fn create_app(
    docker: &Docker,
    at: Placement<'_>,
    service: &Service,
    image: &str,
    index: u32,
    joined: String,
    spec: &str,
) -> Result<(), DockerError> {
    let (_, app_role) = roles(&service.name, index);
    let app = names::container(at.env, &app_role);
    let environment = environment_at(at, service)?;
    // A scheduled service runs the engine's scheduler, from the engine volume, around its own
    // command.
    let (volume, cron_command) = match &service.cron {
        Some(_) => (
            Some(schedule::ensure_engine_volume(docker, at.env, at.engine_image).await?),
            Some(schedule::command_of(docker, service, image).await?),
        ),
        None => (None, None),
    };
    let (entrypoint, cmd) = entry(service, cron_command);
    let body = containers::application(containers::Application {
        at,
        service,
        image,
        index,
        joined,
        spec,
        environment,
        entrypoint,
        cmd,
        engine_volume: volume.as_deref(),
    });
    one_shot::create(docker, &app, body, &[]).await
}

/// Runs the service's `migrate` command once, to completion, before its instances start: in a pod
/// of its own under exactly a service's rules (holder, refusal rules, gate). Never retried — a
/// half-applied migration is worse than a refused one — so a failure stops `up` with the
/// migration's last lines.
pub async fn migrate(
    docker: &Docker,
    at: Placement<'_>,
    service: &Service,
    image: &str,
    command: &[String],
) -> Result<(), DockerError> {
    let holder_role = migration_holder_role(&service.name);
    let holder = names::container(at.env, &holder_role);
    one_shot::clear(docker, &holder, at.env).await?;
    let env = environment_at(at, service)?;
    hold_with_rules(docker, at, &holder, &holder_role, None, MIGRATION_SPEC).await?;
    gate(docker, at, &holder, &holder_role).await?;
    let spec = migration(at, service, image, command, env);
    let finished = one_shot::run(docker, at.env, &spec).await;
    one_shot::remove(docker, &holder).await?;
    let finished = finished?;
    if finished.exit_code != 0 {
        let output = format!("{}{}", finished.stdout, finished.stderr);
        let last: Vec<&str> = output
            .lines()
            .rev()
            .take(10)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(DockerError::Runtime(
            af_runtime::RuntimeErrorKind::MigrationFailed {
                service: service.name.clone(),
                detail: format!(
                    "it exited with status {}; it is not retried; its last lines:\n  {}",
                    finished.exit_code,
                    last.join("\n  ")
                ),
            }
            .into(),
        ));
    }
    Ok(())
}

/// Whether `target` is ready: its port accepts a connection, or — with a health path — it answers
/// an HTTP GET for it with any status. Locally any status counts, including a 500: readiness here
/// means the process is listening and routing (Kubernetes, which decides readiness itself, counts
/// only 2xx/3xx; docs/manifest.md says so).
async fn answers(target: &str, health_path: Option<&str>) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(target).await else {
        return false;
    };
    let Some(path) = health_path else { return true };
    let request = format!("GET {path} HTTP/1.1\r\nhost: {target}\r\nconnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    matches!(stream.read(&mut head).await, Ok(n) if n >= 5 && head.starts_with(b"HTTP/"))
}

/// Waits until the instance's port accepts a connection from the host, failing fast (with its last
/// log lines) when the application exits first: AF-RUN-058, the service's own process ended.
pub async fn wait_ready(
    docker: &Docker,
    service: &str,
    instance: &Instance,
    port: u16,
    health_path: Option<&str>,
    timeout: Duration,
) -> Result<(), DockerError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let target = format!("{}:{port}", instance.ip);
    // Most processes listen within a few milliseconds of starting: ask again soon, then less often.
    let mut pause = Duration::from_millis(10);
    loop {
        if tokio::time::timeout(Duration::from_millis(1000), answers(&target, health_path))
            .await
            .unwrap_or(false)
        {
            return Ok(());
        }
        let state = docker
            .inspect_container(
                &instance.app,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .map_err(|e| platform(format!("inspecting container {}", instance.app), e))?
            .state;
        if state.as_ref().and_then(|s| s.running) == Some(false) {
            let code = state.and_then(|s| s.exit_code).unwrap_or_default();
            let last_lines = last_log_lines(docker, &instance.app, 10).await;
            // The service's own process ended: its fault to fix, never the daemon's.
            return Err(DockerError::Runtime(
                af_runtime::RuntimeErrorKind::PodWillNotStart {
                    workload: format!("service {service}"),
                    pod: instance.app.clone(),
                    cause: af_runtime::PodFailureKind::CrashLoop,
                    detail: format!(
                        "it exited with status {code} before its port {port} opened; its last lines:\n{last_lines}"
                    ),
                }
                .into(),
            ));
        }
        if tokio::time::Instant::now() >= deadline {
            let answer = health_path.map_or(String::new(), |path| format!(", answering {path}"));
            return Err(DockerError::Runtime(
                af_runtime::RuntimeErrorKind::NeverReady {
                    waiting: vec![format!("{} (port {port}{answer})", instance.app)],
                    waited_s: timeout.as_secs(),
                }
                .into(),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// The last `count` lines a container wrote, for an error message.
pub async fn last_log_lines(docker: &Docker, container: &str, count: usize) -> String {
    use futures_util::StreamExt;
    let options = bollard::query_parameters::LogsOptions {
        stdout: true,
        stderr: true,
        tail: count.to_string(),
        ..Default::default()
    };
    let mut out = String::new();
    let mut logs = docker.logs(container, Some(options));
    while let Some(Ok(chunk)) = logs.next().await {
        out.push_str(&chunk.to_string());
    }
    out.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
