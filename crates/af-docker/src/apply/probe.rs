//! The containment probe on Docker: one container on the services' network, under exactly a
//! service's rules, tries every escape route before any service image runs.

use af_manifest::EnvironmentId;
use af_runtime::ContainmentSummary;
use bollard::Docker;

use crate::error::DockerError;
use crate::networks;
use crate::one_shot;

pub use crate::plan::{PROBE_HOLDER_ROLE as HOLDER_ROLE, probe_holder as holder};

/// Probe flags passed through from af's own environment, so a test (or a user) can point the
/// routes at its own hosts: `AF_PROBE_PUBLIC_TCP`, `AF_PROBE_PUBLIC_DNS`, `AF_PROBE_METADATA`,
/// `AF_PROBE_METADATA_V6`, `AF_PROBE_PLATFORM_API`.
pub fn target_args(platform_api_default: Option<String>) -> Vec<String> {
    let mut args = Vec::new();
    for (variable, flag) in [
        ("AF_PROBE_PUBLIC_TCP", "--public-tcp"),
        ("AF_PROBE_PUBLIC_DNS", "--public-dns"),
        ("AF_PROBE_METADATA", "--metadata"),
        ("AF_PROBE_METADATA_V6", "--metadata-v6"),
    ] {
        if let Ok(value) = std::env::var(variable) {
            args.extend([flag.to_string(), value]);
        }
    }
    // E6 locally: the host's side of the services' network, where the Docker API would listen.
    if let Some(api) = std::env::var("AF_PROBE_PLATFORM_API")
        .ok()
        .or(platform_api_default)
    {
        args.extend(["--platform-api".to_string(), api]);
    }
    args
}

/// The probe's positive control: the sidecar at `sidecar_ip`, its proxy port and its DNS
/// responder, which the probe must reach before any route it sees denied counts.
pub fn sidecar_args(sidecar_ip: std::net::Ipv4Addr) -> Vec<String> {
    vec![
        "--sidecar-proxy".to_string(),
        format!("{sidecar_ip}:{}", crate::sidecar::PROXY_PORT),
        "--sidecar-dns".to_string(),
        format!("{sidecar_ip}:{}", crate::sidecar::DNS_PORT),
    ]
}

/// Runs the probe as a service would run on `network`: in a holder's namespace with the refusal
/// rules applied. `Ok` with the verdict when every route was denied; AF-RUN-043 naming each route
/// that got out or could not be judged otherwise. The probe's [`holder`] is left for the caller to
/// remove, so that `up` need not wait for its removal before acting on the verdict.
pub async fn judge(
    docker: &Docker,
    env: &EnvironmentId,
    image: &str,
    network: &str,
    targets: Vec<String>,
) -> Result<ContainmentSummary, DockerError> {
    let holder = one_shot::start_holder(docker, env, HOLDER_ROLE, image, network).await?;
    let layout = networks::layout(docker, network).await?;
    run_in(docker, &holder, &layout, targets).await
}

/// Runs the probe in `holder`'s namespace, after the refusal rules for its network's `layout`.
pub async fn run_in(
    docker: &Docker,
    holder: &str,
    layout: &networks::Layout,
    targets: Vec<String>,
) -> Result<ContainmentSummary, DockerError> {
    one_shot::apply_refusal(docker, holder, &layout.refusal_args()).await?;
    judge_in_holder(docker, holder, targets).await
}

/// The probe in `holder` itself, whose refusal rules are applied: its namespace, its user, no
/// capabilities — a service's standing. `up` runs it in the first instance holder it prepares,
/// the very namespace a service will run in.
pub async fn judge_in_holder(
    docker: &Docker,
    holder: &str,
    targets: Vec<String>,
) -> Result<ContainmentSummary, DockerError> {
    // The holder's refusal rules are in place before the probe starts (no policy controller to
    // wait for), so a route open for a few seconds is open for good: a short deadline keeps a
    // refused `up` quick.
    let mut args = vec![
        "probe".to_string(),
        "--deadline-s".to_string(),
        PROBE_DEADLINE_S.to_string(),
        "--interval-ms".to_string(),
        crate::service::ROUND_INTERVAL_MS.to_string(),
    ];
    args.extend(targets);
    let finished = one_shot::exec_in_holder(docker, holder, &args).await?;
    let checked_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    af_runtime::judge_probe(
        &finished.stdout,
        finished.exit_code,
        &finished.stderr,
        checked_at,
    )
    .map_err(DockerError::Runtime)
}

/// How long the probe waits for its routes to settle denied on Docker.
const PROBE_DEADLINE_S: u32 = 5;

/// The role of the container that keeps the last verdict.
const VERDICT_ROLE: &str = "containment";
/// Its label carrying the verdict, as JSON.
const VERDICT_LABEL: &str = "dev.antifailure.containment";

/// Keeps `verdict` for `af status`: on a container that is created and never started (labels are
/// the one thing Docker keeps that a workload cannot reach), replaced by each probe.
pub async fn record(
    docker: &Docker,
    env: &EnvironmentId,
    image: &str,
    verdict: &ContainmentSummary,
) -> Result<(), DockerError> {
    let name = crate::names::container(env, VERDICT_ROLE);
    one_shot::clear(docker, &name, env).await?;
    let mut labels = crate::names::labels(env, VERDICT_ROLE);
    labels.insert(
        VERDICT_LABEL.to_string(),
        serde_json::to_string(verdict).map_err(|e| {
            DockerError::Runtime(
                af_runtime::RuntimeErrorKind::Internal {
                    operation: "recording the probe's verdict".into(),
                    detail: e.to_string(),
                }
                .into(),
            )
        })?,
    );
    let body = crate::plan::containers::inert(image, labels, Vec::new());
    let options = bollard::query_parameters::CreateContainerOptions {
        name: Some(name.clone()),
        ..Default::default()
    };
    docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| crate::error::platform(format!("creating container {name}"), e))?;
    Ok(())
}

/// The last recorded verdict of `env`, if a probe ran.
pub async fn last(docker: &Docker, env: &EnvironmentId) -> Option<ContainmentSummary> {
    let name = crate::names::container(env, VERDICT_ROLE);
    let found = docker
        .inspect_container(
            &name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()?;
    let labels = found.config?.labels?;
    if !crate::names::is_ours(Some(&labels), env) {
        return None;
    }
    serde_json::from_str(labels.get(VERDICT_LABEL)?).ok()
}
