//! A migration Job: created, waited for until it completes or fails. It is never retried (the Job
//! carries `backoffLimit: 0`); a failure stops `up` with the migration's last log lines. A Job
//! whose pod template changed (the migration's image, command or environment) is replaced, never
//! patched: an API server refuses any change to a Job's template (`field is immutable`). The old
//! one is let finish first — a migration cut half-way is worse than one that waits — then deleted
//! with its pods, and the new one made.

use std::time::Duration;

use af_runtime::{RuntimeError, RuntimeErrorKind};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams};

use super::Patience;

/// The last `count` lines of `text`.
pub fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n  ")
}

/// Applies `job` (unless it is there as desired: a migration that ran is not run again) and waits
/// until it completes; a failed Job is an error carrying the last lines its pod wrote. `true` when
/// the Job was written.
pub async fn run(
    client: kube::Client,
    namespace: &str,
    job: &Job,
    patience: Patience,
) -> Result<bool, RuntimeError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let name = job.metadata.name.clone().unwrap_or_default();
    let current = jobs.get_opt(&name).await.map_err(|e| {
        crate::error::api(format!("reading the migration Job {namespace}/{name}"), e)
    })?;
    if let Some(current) = current.filter(|c| !same_template(c, job)) {
        replace(client.clone(), namespace, &current, patience).await?;
    }
    let (_, wrote) =
        super::objects::apply(client.clone(), &crate::render::Object::Job(job.clone())).await?;
    settle(client, namespace, job, patience).await?;
    Ok(wrote)
}

/// Whether `current` runs the pod template `desired` says (what the server added aside).
fn same_template(current: &Job, desired: &Job) -> bool {
    let template = |job: &Job| {
        job.spec
            .as_ref()
            .map(|s| serde_json::to_value(&s.template).unwrap_or_default())
            .unwrap_or_default()
    };
    super::objects::contains(&template(current), &template(desired))
}

/// The Job `current`, whose template is no longer the manifest's, let finish and then deleted with
/// its pods (foreground: the Job is gone only once they are).
async fn replace(
    client: kube::Client,
    namespace: &str,
    current: &Job,
    patience: Patience,
) -> Result<(), RuntimeError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let name = current.metadata.name.clone().unwrap_or_default();
    // How it ends does not matter: the manifest now says another migration.
    let _ = settle(client.clone(), namespace, current, patience).await;
    jobs.delete(&name, &DeleteParams::foreground())
        .await
        .map_err(|e| {
            crate::error::api(
                format!("deleting the migration Job {namespace}/{name}, whose template changed"),
                e,
            )
        })?;
    let started = tokio::time::Instant::now();
    loop {
        let left = jobs.get_opt(&name).await.map_err(|e| {
            crate::error::api(format!("reading the migration Job {namespace}/{name}"), e)
        })?;
        // Gone, or a new one made meanwhile (another uid): the old one is not in the way.
        if left.is_none_or(|l| l.metadata.uid != current.metadata.uid) {
            return Ok(());
        }
        if started.elapsed() >= patience.timeout {
            return Err(crate::error::unexpected(
                format!("replacing the migration Job {namespace}/{name}"),
                format!(
                    "the old Job was not gone {} s after it was deleted (its pods' finalizers?)",
                    patience.timeout.as_secs()
                ),
            ));
        }
        tokio::time::sleep(patience.interval).await;
    }
}

/// Waits until `job` completes; its failure, a pod of it that will never run, or the patience
/// running out is an error.
async fn settle(
    client: kube::Client,
    namespace: &str,
    job: &Job,
    patience: Patience,
) -> Result<(), RuntimeError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let name = job.metadata.name.clone().unwrap_or_default();
    let started = tokio::time::Instant::now();
    loop {
        let current = jobs.get(&name).await.map_err(|e| {
            crate::error::api(format!("reading the migration Job {namespace}/{name}"), e)
        })?;
        let status = current.status.unwrap_or_default();
        if status.succeeded.unwrap_or(0) > 0 {
            return Ok(());
        }
        if status.failed.unwrap_or(0) > 0 {
            let lines = pod_log(client.clone(), namespace, &name).await;
            return Err(RuntimeErrorKind::MigrationFailed {
                service: migrated_service(job),
                detail: format!(
                    "Job {namespace}/{name} failed; it is not retried; its last lines:\n  {lines}"
                ),
            }
            .into());
        }
        // A pod that will never run (its image, no node for it, refused by the node, its gate)
        // is said at once rather than after the migration's patience.
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let listed = pods
            .list(&ListParams::default().labels(&format!("job-name={name}")))
            .await
            .map_err(|e| {
                crate::error::api(format!("listing the pods of Job {namespace}/{name}"), e)
            })?;
        for pod in &listed.items {
            if let Some(problem) = super::readiness::pod_problem(pod) {
                let workload = format!("migration {name}");
                return Err(super::readiness::problem_error(
                    &pods, namespace, &workload, pod, problem,
                )
                .await);
            }
        }
        if started.elapsed() >= patience.timeout {
            return Err(RuntimeErrorKind::MigrationFailed {
                service: migrated_service(job),
                detail: format!(
                    "Job {namespace}/{name} did not finish within {} s",
                    patience.timeout.as_secs()
                ),
            }
            .into());
        }
        tokio::time::sleep(patience.interval).await;
    }
}

/// The service a migration Job is for, from its pods' label.
fn migrated_service(job: &Job) -> String {
    job.spec
        .as_ref()
        .and_then(|spec| spec.template.metadata.as_ref()?.labels.as_ref())
        .and_then(|labels| labels.get(crate::render::names::SERVICE_LABEL).cloned())
        .unwrap_or_else(|| job.metadata.name.clone().unwrap_or_default())
}

/// The last lines of the Job's pod, or why they cannot be read.
async fn pod_log(client: kube::Client, namespace: &str, job: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let listed = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await;
    let Some(pod) = listed.ok().and_then(|l| l.items.into_iter().next()) else {
        return "(its pod is gone)".to_string();
    };
    let name = pod.metadata.name.unwrap_or_default();
    match pods
        .logs(
            &name,
            &LogParams {
                tail_lines: Some(10),
                ..Default::default()
            },
        )
        .await
    {
        Ok(text) => last_lines(&text, 10),
        Err(err) => format!("(its log cannot be read: {err})"),
    }
}

/// A migration's patience: it runs the customer's command, which may take a while.
pub const PATIENCE: Patience = Patience {
    timeout: Duration::from_secs(600),
    interval: Duration::from_secs(1),
};
