//! Running the containment probe Pod and reading its verdict, before any service image runs. A
//! probe that does not finish or prints no verdict refuses the environment (an unanswered
//! question about a security control is not a pass); one that says it will never run — refused
//! by admission, its image unpullable, its netlock step failed — says why at once.

use std::time::Duration;

use af_runtime::{
    ContainmentSummary, FindingKind, PodFailureKind, RouteFinding, RuntimeError, RuntimeErrorKind,
    judge_probe,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, LogParams, PostParams};

use super::Patience;

fn refused(outcome: String) -> RuntimeError {
    RuntimeErrorKind::ContainmentRefused {
        findings: vec![RouteFinding {
            route: "the probe itself".to_string(),
            outcome,
            kind: FindingKind::NoVerdict,
        }],
    }
    .into()
}

/// Why a pod cannot start, when its image cannot be had: said at once, with the image.
pub fn image_problem(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?;
    statuses
        .container_statuses
        .iter()
        .flatten()
        .chain(statuses.init_container_statuses.iter().flatten())
        .find_map(|status| {
            let waiting = status.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            matches!(reason, "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName").then(|| {
                format!(
                    "{reason}: the nodes cannot pull {}; on k3d and kind af imports its images, on other clusters they must be in a registry the nodes can pull from (AF_PROXY_IMAGE names the engine's)",
                    status.image
                )
            })
        })
}

/// How the probe's pod is named to the person.
const WORKLOAD: &str = "the containment probe";

/// Creates `pod` (replacing a leftover of an earlier run), waits until it finishes, reads its
/// verdict, removes it.
pub async fn run(
    client: kube::Client,
    namespace: &str,
    pod: &Pod,
    patience: Patience,
) -> Result<ContainmentSummary, RuntimeError> {
    let (exit_code, output) = run_to_output(client, namespace, pod, patience).await?;
    let checked_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    judge_probe(&output, exit_code, "", checked_at)
}

/// Creates `pod` (replacing a leftover of an earlier run), waits until it finishes, removes it:
/// its first container's exit code and its output. One that does not finish within `patience`
/// is an unanswered probe (AF-RUN-043).
pub async fn run_to_output(
    client: kube::Client,
    namespace: &str,
    pod: &Pod,
    patience: Patience,
) -> Result<(i64, String), RuntimeError> {
    let api: Api<Pod> = Api::namespaced(client, namespace);
    let name = pod.metadata.name.clone().unwrap_or_default();
    remove(&api, &name).await?;
    match api.create(&PostParams::default(), pod).await {
        Ok(_) => {}
        // Admission (a Pod Security level, a policy webhook) refuses it: nothing of the
        // environment's would be admitted either.
        Err(kube::Error::Api(status)) if status.code == 403 => {
            return Err(RuntimeErrorKind::PodWillNotStart {
                workload: WORKLOAD.to_string(),
                pod: format!("{namespace}/{name}"),
                cause: PodFailureKind::AdmissionRefused,
                detail: status.message,
            }
            .into());
        }
        Err(err) => {
            return Err(crate::error::api(
                format!("creating the probe pod {namespace}/{name}"),
                err,
            ));
        }
    }
    let started = tokio::time::Instant::now();
    let finished = loop {
        let current = api.get(&name).await.map_err(|e| {
            crate::error::api(format!("reading the probe pod {namespace}/{name}"), e)
        })?;
        if let Some(problem) = super::readiness::pod_problem(&current) {
            let err =
                super::readiness::problem_error(&api, namespace, WORKLOAD, &current, problem).await;
            let _ = remove(&api, &name).await;
            return Err(err);
        }
        let phase = current.status.as_ref().and_then(|s| s.phase.clone());
        if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
            break current;
        }
        if started.elapsed() >= patience.timeout {
            let _ = remove(&api, &name).await;
            return Err(refused(format!(
                "unanswered: the probe pod did not finish within {} s (phase {})",
                patience.timeout.as_secs(),
                phase.unwrap_or_else(|| "unknown".into())
            )));
        }
        tokio::time::sleep(patience.interval).await;
    };
    let exit_code = finished
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|statuses| statuses.first())
        .and_then(|s| s.state.as_ref())
        .and_then(|state| state.terminated.as_ref())
        .map_or(-1, |terminated| i64::from(terminated.exit_code));
    let output = api.logs(&name, &LogParams::default()).await.map_err(|e| {
        crate::error::api(
            format!("reading the probe pod's verdict ({namespace}/{name})"),
            e,
        )
    })?;
    remove(&api, &name).await?;
    Ok((exit_code, output))
}

/// Deletes the pod if it is there and waits until it is gone (a new one of the same name cannot
/// be created before); what is already gone is fine.
async fn remove(api: &Api<Pod>, name: &str) -> Result<(), RuntimeError> {
    match api
        .delete(name, &DeleteParams::background().grace_period(0))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(err) => {
            return Err(crate::error::api(
                format!("removing the probe pod {name}"),
                err,
            ));
        }
    }
    for _ in 0..60 {
        let present = api
            .get_opt(name)
            .await
            .map_err(|e| crate::error::api(format!("reading the probe pod {name}"), e))?;
        if present.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(crate::error::unexpected(
        format!("removing the probe pod {name}"),
        "it is still there 30 s after its deletion",
    ))
}

/// The probe's patience: the image is pulled and the routes tried, each for at most a few
/// seconds.
pub const PATIENCE: Patience = Patience {
    timeout: Duration::from_secs(120),
    interval: Duration::from_secs(1),
};
