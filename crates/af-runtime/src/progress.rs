//! Progress: a runtime reports what it is doing as a stream of events; the CLI alone decides how
//! to show them (a live display on a terminal, JSON lines with `--json`). Nothing else prints.

use std::time::Duration;

use serde::Serialize;

/// A step of bringing an environment up or down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Images,
    FitCheck,
    Namespace,
    Networks,
    Policies,
    Probe,
    /// What runs no workload code and needs no way out, made while the probe runs.
    Preparation,
    Sidecar,
    /// The environment's database: its template (built once per image and seed), its server, its
    /// branch.
    Database,
    Migrations,
    Services,
    Readiness,
    Teardown,
}

/// One thing that happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ProgressEvent {
    StepStarted {
        step: Step,
        detail: String,
    },
    StepFinished {
        step: Step,
        /// The same detail as the step's start: steps of one kind can run at the same time.
        detail: String,
        #[serde(with = "millis")]
        elapsed: Duration,
    },
    /// Still waiting, and on what; repeated while the wait lasts so a person sees it is alive.
    Waiting {
        step: Step,
        /// The detail of the started step this wait is part of (a service's readiness is part of
        /// starting that service), so a display can show the wait on that step's line.
        within: String,
        on: String,
        #[serde(with = "millis")]
        elapsed: Duration,
    },
    /// A service's published address.
    Url {
        service: String,
        url: String,
    },
    /// Something a person should know that is not a failure (a check that could not run, say).
    Notice {
        message: String,
    },
}

/// Where a runtime sends its progress.
pub trait ProgressSink: Send + Sync {
    fn emit(&self, event: ProgressEvent);
}

/// Runs `work` as `step` (`detail` telling which), saying so on `progress` when it starts and when
/// it finishes: the one way a runtime reports a step.
pub async fn run_step<T, E>(
    progress: &dyn ProgressSink,
    step: Step,
    detail: &str,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, crate::RuntimeError>
where
    E: Into<crate::RuntimeError>,
{
    progress.emit(ProgressEvent::StepStarted {
        step,
        detail: detail.to_string(),
    });
    let started = std::time::Instant::now();
    let result = work.await.map_err(Into::into)?;
    progress.emit(ProgressEvent::StepFinished {
        step,
        detail: detail.to_string(),
        elapsed: started.elapsed(),
    });
    Ok(result)
}

/// Durations as whole milliseconds, the unit a JSON consumer expects.
mod millis {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_as_tagged_json_lines() {
        let event = ProgressEvent::Waiting {
            step: Step::Readiness,
            within: "web (2 instances)".into(),
            on: "web (1/2 ready)".into(),
            elapsed: Duration::from_millis(1500),
        };
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"event":"waiting","step":"readiness","within":"web (2 instances)","on":"web (1/2 ready)","elapsed":1500}"#
        );
    }
}
