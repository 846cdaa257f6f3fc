//! The containment probe: first the positive control — the environment's own sidecar answers —
//! then every route, in rounds, until every one is seen denied several rounds in a row or a
//! deadline passes. Contained only when the sidecar answered and the routes settled denied: in a
//! namespace with no working network every route is "denied", and that proves nothing.
//!
//! Rounds, because the probe judges the platform's steady state, as the gate does: a real
//! cluster's policy controller put a new pod's rules in place 1–2 s after the pod started, so a
//! probe judging its first attempt refused every environment there. How long the routes stayed
//! open is reported (`window_ms`): it is the startup window the gate closes for every workload.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::gate::next_count;
use crate::route::{Outcome, Route, RouteResult, try_routes};
use crate::sidecar_check::{ControlResult, SidecarTarget, wait_for};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeVerdict {
    pub check: &'static str,
    pub contained: bool,
    /// The positive control: whether the environment's sidecar answered.
    pub control: ControlResult,
    /// The last round's routes.
    pub routes: Vec<RouteResult>,
    pub rounds_tried: u32,
    /// From the first round until the first of the all-denied rounds that settled it: how long
    /// the platform let a new pod out. 0 when the first round was already all denied; the whole
    /// time tried when the routes never settled.
    pub window_ms: u64,
}

/// How the probe judges the steady state.
#[derive(Clone, Copy, Debug)]
pub struct Steadiness {
    /// All-denied rounds in a row that settle the verdict.
    pub rounds: u32,
    pub interval: Duration,
    /// After this, a route still not denied is a finding.
    pub deadline: Duration,
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

/// The positive control, then every route in rounds until they settle denied or `steadiness`'s
/// deadline passes (tried even when the control failed, so that the verdict shows what each
/// route did; but then once only: without the control nothing can be settled).
pub fn probe(
    control: &ControlSettings,
    routes: &[Route],
    timeout: Duration,
    steadiness: Steadiness,
) -> ProbeVerdict {
    let control = wait_for(
        control.sidecar.as_ref(),
        control.patience,
        control.interval,
        timeout,
    );
    let started = Instant::now();
    let mut rounds_tried = 0;
    let mut count = 0;
    let mut settling_since = started;
    loop {
        let round_started = Instant::now();
        let last = try_routes(routes, timeout);
        rounds_tried += 1;
        let previous = count;
        count = next_count(count, &last);
        if count == 1 && previous == 0 {
            settling_since = round_started;
        }
        let settled = count >= steadiness.rounds.max(1);
        // At the deadline a round with a route open ends it; rounds all denied go on until they
        // settle (at most `rounds` more): a route still open at the deadline is the finding.
        let open_at_deadline = count == 0 && started.elapsed() >= steadiness.deadline;
        if settled || !control.reached || open_at_deadline {
            let window = if settled {
                settling_since - started
            } else {
                started.elapsed()
            };
            let mut verdict = verdict(control, last);
            verdict.contained &= settled;
            verdict.rounds_tried = rounds_tried;
            verdict.window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
            return verdict;
        }
        std::thread::sleep(steadiness.interval);
    }
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
        rounds_tried: 1,
        window_ms: 0,
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
