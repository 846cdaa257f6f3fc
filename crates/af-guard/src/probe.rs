//! The containment probe: first the positive control — the environment's own sidecar answers —
//! then every route once. Contained only when the sidecar answered and every route was seen
//! denied: in a namespace with no working network every route is "denied", and that proves
//! nothing.

use std::time::Duration;

use serde::Serialize;

use crate::route::{Outcome, Route, RouteResult, try_routes};
use crate::sidecar_check::{ControlResult, SidecarTarget, wait_for};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeVerdict {
    pub check: &'static str,
    pub contained: bool,
    /// The positive control: whether the environment's sidecar answered.
    pub control: ControlResult,
    pub routes: Vec<RouteResult>,
}

/// How the probe asks for the sidecar before it judges the routes.
#[derive(Clone, Debug)]
pub struct ControlSettings {
    pub sidecar: Option<SidecarTarget>,
    /// How long to keep asking: the runtime may start the sidecar as the probe starts.
    pub patience: Duration,
    pub interval: Duration,
}

impl ProbeVerdict {
    /// The routes that got out or could not be judged.
    pub fn findings(&self) -> Vec<&RouteResult> {
        self.routes
            .iter()
            .filter(|r| r.outcome != Outcome::Denied)
            .collect()
    }
}

/// The positive control, then every route (tried even when the control failed, so that the
/// verdict shows what each route did).
pub fn probe(control: &ControlSettings, routes: &[Route], timeout: Duration) -> ProbeVerdict {
    let control = wait_for(
        control.sidecar.as_ref(),
        control.patience,
        control.interval,
        timeout,
    );
    verdict(control, try_routes(routes, timeout))
}

/// Contained only when the sidecar answered, there is at least one route, and every one was
/// denied.
pub fn verdict(control: ControlResult, routes: Vec<RouteResult>) -> ProbeVerdict {
    let contained = control.reached
        && !routes.is_empty()
        && routes.iter().all(|r| r.outcome == Outcome::Denied);
    ProbeVerdict {
        check: "probe",
        contained,
        control,
        routes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(outcome: Outcome) -> RouteResult {
        RouteResult {
            route: "r".into(),
            target: "t".into(),
            outcome,
            detail: String::new(),
        }
    }

    fn control(reached: bool) -> ControlResult {
        ControlResult {
            target: "tcp 10.99.0.2:3128".into(),
            reached,
            detail: String::new(),
        }
    }

    #[test]
    fn only_all_denied_beside_a_reached_sidecar_is_contained() {
        let judged = |reached, outcomes: &[Outcome]| {
            verdict(
                control(reached),
                outcomes.iter().map(|o| result(*o)).collect(),
            )
        };
        use Outcome::*;
        assert!(judged(true, &[Denied, Denied]).contained);
        assert!(!judged(true, &[Denied, Escaped]).contained);
        assert!(!judged(true, &[Denied, Unanswered]).contained);
        assert!(
            !judged(true, &[]).contained,
            "no route tried proves nothing"
        );
        assert!(
            !judged(false, &[Denied, Denied]).contained,
            "every route denied with the sidecar unreachable proves nothing"
        );
        assert_eq!(judged(true, &[Denied, Unanswered]).findings().len(), 1);
    }

    #[test]
    fn without_a_sidecar_to_ask_the_control_is_never_a_pass() {
        let unset = wait_for(None, Duration::ZERO, Duration::ZERO, Duration::ZERO);
        assert!(!unset.reached);
        assert!(unset.detail.contains("--sidecar-proxy"), "{}", unset.detail);
    }
}
