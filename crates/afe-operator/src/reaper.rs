//! The reaper (seed FR28): the sandbox namespace's objects found by `afe.ticket` and
//! `app.kubernetes.io/managed-by: afe`, each judged by the lifecycle marker the engine keeps on it
//! (`afe.dev/lifecycle`) and removed when its ticket ended, or when it is running and nobody said
//! anything of it for longer than the grace; kept when its ticket is paused, however long. It reads
//! neither the store nor the afe API, and never a Pod's status: a Pod that is merely unschedulable,
//! or gated, or restarting in a loop, is judged by its marker like any other (agent-sandbox's
//! #1215 and #1735 reaped such Pods from under live work).

use std::time::Duration;

use afe_sandbox::{Lifecycle, Marker, labels};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::core::NamespaceResourceScope;

use afe_sandbox::labels::LIFECYCLE;
/// `sandbox.orphanGrace` when the resource says none.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30 * 60);

/// What the reaper does with one object, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Remove(String),
    Keep(String),
}

/// Judges one object from its marker's text (if any) and its creation time (ms since the epoch),
/// at `now_ms`. An object never marked (its worker died before the first mark) is judged by its
/// age, as if it had been marked when it was made; an unreadable marker likewise.
pub fn judge(
    marker: Option<&str>,
    created_ms: Option<i64>,
    now_ms: i64,
    grace: Duration,
) -> Verdict {
    let grace_ms = grace.as_millis() as i64;
    let silent = |since_ms: i64| now_ms.saturating_sub(since_ms) > grace_ms;
    let age = |since_ms: i64| {
        humantime::format_duration(Duration::from_secs(
            (now_ms.saturating_sub(since_ms).max(0) / 1000) as u64,
        ))
    };
    match marker.and_then(|text| serde_json::from_str::<Marker>(text).ok()) {
        Some(marker) => match marker.state {
            Lifecycle::Ended => Verdict::Remove("its ticket ended".to_string()),
            Lifecycle::Paused => Verdict::Keep("its ticket is paused".to_string()),
            Lifecycle::Open | Lifecycle::Working if silent(marker.heartbeat_ms) => {
                Verdict::Remove(format!(
                    "its worker {} has said nothing of it for {}",
                    marker.worker,
                    age(marker.heartbeat_ms)
                ))
            }
            Lifecycle::Open | Lifecycle::Working => Verdict::Keep(format!(
                "worker {} heard from {} ago",
                marker.worker,
                age(marker.heartbeat_ms)
            )),
        },
        None => match created_ms {
            Some(created) if silent(created) => Verdict::Remove(format!(
                "never marked by a worker, and made {} ago",
                age(created)
            )),
            Some(created) => Verdict::Keep(format!("made {} ago, not marked yet", age(created))),
            None => Verdict::Keep("no marker and no creation time to judge by".to_string()),
        },
    }
}

/// The selector of every object the engine made in the sandbox namespace: both labels.
pub fn selector() -> String {
    format!(
        "{},{}={}",
        labels::TICKET,
        labels::MANAGED_BY.0,
        labels::MANAGED_BY.1
    )
}

/// One object the sweep looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    /// `Pod/name` or `PersistentVolumeClaim/name`.
    pub object: String,
    pub ticket: String,
    pub verdict: Verdict,
}

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
#[error("AFE-OPR-001 the reaper could not {operation} in namespace {namespace}: {detail}")]
pub struct ReapError {
    pub operation: String,
    pub namespace: String,
    pub detail: String,
}

fn millis(time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<i64> {
    time.map(|t| t.0.as_millisecond())
}

async fn sweep_kind<K>(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    now_ms: i64,
    grace: Duration,
) -> Result<Vec<Judged>, ReapError>
where
    K: kube::Resource<Scope = NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let failed = |operation: String, err: kube::Error| ReapError {
        operation,
        namespace: namespace.to_string(),
        detail: err.to_string(),
    };
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let listed = api
        .list(&ListParams::default().labels(&selector()))
        .await
        .map_err(|e| failed(format!("list the {kind}s"), e))?;
    let mut judged = Vec::new();
    for object in listed.items {
        let meta = object.meta();
        let (Some(name), None) = (meta.name.clone(), meta.deletion_timestamp.as_ref()) else {
            continue;
        };
        let verdict = judge(
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(LIFECYCLE))
                .map(String::as_str),
            millis(meta.creation_timestamp.as_ref()),
            now_ms,
            grace,
        );
        let ticket = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::TICKET).cloned())
            .unwrap_or_default();
        if let Verdict::Remove(why) = &verdict {
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => tracing::info!(%kind, %name, %ticket, %why, "reaped"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(failed(format!("delete {kind} {name}"), err)),
            }
        }
        judged.push(Judged {
            object: format!("{kind}/{name}"),
            ticket,
            verdict,
        });
    }
    Ok(judged)
}

/// Sweeps `namespace` at `now_ms`: every Pod, then every PVC, of afe's, judged, and the orphans
/// removed. What it looked at, with each verdict.
pub async fn sweep(
    client: &kube::Client,
    namespace: &str,
    now_ms: i64,
    grace: Duration,
) -> Result<Vec<Judged>, ReapError> {
    let mut judged = sweep_kind::<Pod>(client, namespace, "Pod", now_ms, grace).await?;
    judged.extend(
        sweep_kind::<PersistentVolumeClaim>(
            client,
            namespace,
            "PersistentVolumeClaim",
            now_ms,
            grace,
        )
        .await?,
    );
    Ok(judged)
}

/// How many objects a sweep removed (`status.orphansRemoved` adds them up).
pub fn removed(judged: &[Judged]) -> u64 {
    judged
        .iter()
        .filter(|j| matches!(j.verdict, Verdict::Remove(_)))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 10_000_000_000;
    const GRACE: Duration = Duration::from_secs(30 * 60);

    fn marker(state: &str, heartbeat_ms: i64) -> String {
        format!(r#"{{"state":"{state}","heartbeat_ms":{heartbeat_ms},"worker":"w1"}}"#)
    }

    fn removes(verdict: &Verdict) -> bool {
        matches!(verdict, Verdict::Remove(_))
    }

    #[test]
    fn the_four_cases_terminal_stale_fresh_paused() {
        let long_ago = NOW - 31 * 60 * 1000;
        let lately = NOW - 60 * 1000;
        assert!(
            removes(&judge(Some(&marker("ended", lately)), None, NOW, GRACE)),
            "terminal"
        );
        assert!(
            removes(&judge(Some(&marker("working", long_ago)), None, NOW, GRACE)),
            "stale"
        );
        assert!(
            removes(&judge(Some(&marker("open", long_ago)), None, NOW, GRACE)),
            "stale, between nodes"
        );
        assert!(
            !removes(&judge(Some(&marker("working", lately)), None, NOW, GRACE)),
            "fresh"
        );
        assert!(
            !removes(&judge(Some(&marker("paused", 0)), Some(0), NOW, GRACE)),
            "paused, however long"
        );
    }

    #[test]
    fn an_object_never_marked_is_judged_by_its_age() {
        assert!(
            !removes(&judge(None, Some(NOW - 1000), NOW, GRACE)),
            "just made"
        );
        assert!(removes(&judge(
            None,
            Some(NOW - 2 * 3600 * 1000),
            NOW,
            GRACE
        )));
        assert!(removes(&judge(
            Some("not json"),
            Some(NOW - 2 * 3600 * 1000),
            NOW,
            GRACE
        )));
        assert!(!removes(&judge(None, None, NOW, GRACE)));
    }

    #[test]
    fn a_verdict_says_why() {
        let Verdict::Remove(why) = judge(
            Some(&marker("working", NOW - 45 * 60 * 1000)),
            None,
            NOW,
            GRACE,
        ) else {
            panic!("stale");
        };
        assert_eq!(why, "its worker w1 has said nothing of it for 45m");
    }
}
