//! The startup gate: before a workload starts, in its network namespace, prove the sidecar
//! answers and then see every escape route denied, several rounds in a row. A policy that is
//! programmed a moment after the pod starts is waited for; one that never arrives fails the gate,
//! naming the route.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::route::{Outcome, Route, RouteResult, try_routes};
use crate::sidecar_check::SidecarTarget;

#[derive(Clone, Debug)]
pub struct GateSettings {
    /// The sidecar, which must answer before any route is judged.
    pub sidecar: SidecarTarget,
    /// Consecutive all-denied rounds required.
    pub rounds: u32,
    pub interval: Duration,
    pub deadline: Duration,
    /// Per attempt.
    pub timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GateVerdict {
    pub check: &'static str,
    pub passed: bool,
    /// Why it failed, in words; empty when it passed.
    pub reason: String,
    pub rounds_tried: u32,
    pub consecutive_denied: u32,
    pub elapsed_ms: u64,
    /// The last round's routes.
    pub routes: Vec<RouteResult>,
}

/// Counts consecutive all-denied rounds: a round with any route not denied starts the count over.
pub fn next_count(count: u32, round: &[RouteResult]) -> u32 {
    if !round.is_empty() && round.iter().all(|r| r.outcome == Outcome::Denied) {
        count + 1
    } else {
        0
    }
}

pub fn run_gate(settings: &GateSettings, routes: &[Route]) -> GateVerdict {
    let started = Instant::now();
    let mut count = 0;
    let mut rounds_tried = 0;
    let mut last: Vec<RouteResult> = Vec::new();
    let mut sidecar_problem: Option<String> = None;
    loop {
        if started.elapsed() >= settings.deadline {
            let reason = match &sidecar_problem {
                Some(problem) => problem.clone(),
                None => {
                    let open: Vec<String> = last
                        .iter()
                        .filter(|r| r.outcome != Outcome::Denied)
                        .map(|r| {
                            format!("{} ({}, {:?})", r.route, r.target, r.outcome).to_lowercase()
                        })
                        .collect();
                    format!(
                        "routes still not denied at the deadline: {}",
                        open.join(", ")
                    )
                }
            };
            return GateVerdict {
                check: "gate",
                passed: false,
                reason,
                rounds_tried,
                consecutive_denied: count,
                elapsed_ms: ms(started),
                routes: last,
            };
        }
        match settings.sidecar.answers(settings.timeout) {
            Err(problem) => {
                // The positive check comes first: escape routes seen denied while nothing at all
                // answers prove nothing.
                sidecar_problem = Some(problem);
                count = 0;
            }
            Ok(()) => {
                sidecar_problem = None;
                last = try_routes(routes, settings.timeout);
                rounds_tried += 1;
                count = next_count(count, &last);
                if count >= settings.rounds {
                    return GateVerdict {
                        check: "gate",
                        passed: true,
                        reason: String::new(),
                        rounds_tried,
                        consecutive_denied: count,
                        elapsed_ms: ms(started),
                        routes: last,
                    };
                }
            }
        }
        std::thread::sleep(settings.interval);
    }
}

fn ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(outcomes: &[Outcome]) -> Vec<RouteResult> {
        outcomes
            .iter()
            .map(|o| RouteResult {
                route: "r".into(),
                target: "t".into(),
                outcome: *o,
                detail: String::new(),
            })
            .collect()
    }

    #[test]
    fn consecutive_denied_rounds_are_counted_and_reset() {
        use Outcome::*;
        assert_eq!(next_count(0, &round(&[Denied, Denied])), 1);
        assert_eq!(next_count(2, &round(&[Denied, Denied])), 3);
        assert_eq!(next_count(2, &round(&[Denied, Escaped])), 0);
        assert_eq!(next_count(2, &round(&[Unanswered])), 0);
        assert_eq!(next_count(2, &[]), 0);
    }
}
