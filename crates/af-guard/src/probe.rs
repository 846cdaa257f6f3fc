//! The containment probe: every route once. Contained only when every route was seen denied.

use std::time::Duration;

use serde::Serialize;

use crate::route::{Outcome, Route, RouteResult, try_routes};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeVerdict {
    pub check: &'static str,
    pub contained: bool,
    pub routes: Vec<RouteResult>,
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

pub fn probe(routes: &[Route], timeout: Duration) -> ProbeVerdict {
    verdict(try_routes(routes, timeout))
}

/// Contained only when there is at least one route and every one was denied.
pub fn verdict(routes: Vec<RouteResult>) -> ProbeVerdict {
    let contained = !routes.is_empty() && routes.iter().all(|r| r.outcome == Outcome::Denied);
    ProbeVerdict {
        check: "probe",
        contained,
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

    #[test]
    fn only_all_denied_is_contained() {
        assert!(verdict(vec![result(Outcome::Denied), result(Outcome::Denied)]).contained);
        assert!(!verdict(vec![result(Outcome::Denied), result(Outcome::Escaped)]).contained);
        assert!(!verdict(vec![result(Outcome::Denied), result(Outcome::Unanswered)]).contained);
        assert!(!verdict(vec![]).contained, "no route tried proves nothing");
        assert_eq!(
            verdict(vec![result(Outcome::Denied), result(Outcome::Unanswered)])
                .findings()
                .len(),
            1
        );
    }
}
