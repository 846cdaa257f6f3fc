//! Where a sandbox is in its life, as the engine marks it for a reaper that reads the platform and
//! never the store (seed 003, FR28): a sandbox whose ticket ended, or whose heartbeat is older than
//! the grace, is an orphan. Adapters keep the marker where the ticket's own commands cannot change
//! it (a Kubernetes annotation; on Docker, whose labels are fixed at creation, a root-owned file).

use serde::{Deserialize, Serialize};

/// The engine's view of a sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    /// Made, and waiting for its ticket's next node.
    Open,
    /// A node of its ticket runs in it.
    Working,
    /// Its ticket ended (done, failed, cancelled); it is being removed.
    Ended,
    /// Its ticket was paused by a person: kept, with its workspace, however long the pause.
    Paused,
}

/// The marker an adapter stores: the state and when the engine last said it (milliseconds since
/// the Unix epoch), by which worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub state: Lifecycle,
    pub heartbeat_ms: i64,
    pub worker: String,
}

impl Marker {
    /// `state`, now, said by `worker`.
    pub fn now(state: Lifecycle, worker: &str) -> Marker {
        let heartbeat_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Marker {
            state,
            heartbeat_ms,
            worker: worker.to_string(),
        }
    }

    /// Whether a reaper may remove the sandbox: its ticket ended, or nobody said anything of it for
    /// longer than `grace` (a worker that died between the end and the removal, or mid-ticket).
    /// A paused ticket's sandbox is never an orphan: its heartbeat stops on purpose.
    pub fn is_orphan(&self, now_ms: i64, grace: std::time::Duration) -> bool {
        match self.state {
            Lifecycle::Ended => true,
            Lifecycle::Paused => false,
            Lifecycle::Open | Lifecycle::Working => {
                now_ms.saturating_sub(self.heartbeat_ms) > grace.as_millis() as i64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_orphan_ended_or_went_silent() {
        let marker = |state, heartbeat_ms| Marker {
            state,
            heartbeat_ms,
            worker: "w".into(),
        };
        let grace = Duration::from_secs(60);
        assert!(marker(Lifecycle::Ended, 1_000_000).is_orphan(1_000_000, grace));
        assert!(!marker(Lifecycle::Working, 1_000_000).is_orphan(1_059_000, grace));
        assert!(marker(Lifecycle::Working, 1_000_000).is_orphan(1_061_000, grace));
        assert!(!marker(Lifecycle::Open, 1_000_000).is_orphan(1_000_000, grace));
        assert!(
            !marker(Lifecycle::Paused, 0).is_orphan(1_000_000_000, grace),
            "a paused ticket's sandbox is kept, however old its heartbeat"
        );
        let text = serde_json::to_string(&marker(Lifecycle::Open, 5)).unwrap();
        assert_eq!(text, r#"{"state":"open","heartbeat_ms":5,"worker":"w"}"#);
    }
}
