//! Reading the containment probe's verdict, the same on every runtime: the one JSON line
//! `af-proxy probe` prints. Contained only when the probe exited 0, said so, reached the
//! environment's sidecar (its positive control), and reported at least one route, every one
//! denied; anything else refuses the environment (AF-RUN-043), naming the unreachable sidecar and
//! each route that was not denied — and a probe that printed no verdict is itself unanswered.

use crate::error::{FindingKind, RouteFinding, RuntimeError, RuntimeErrorKind};
use crate::runtime::ContainmentSummary;

/// The verdict of a probe that printed `output` and exited with `exit_code` (`stderr` is quoted
/// when no verdict came), checked at `checked_at` (RFC 3339).
pub fn judge_probe(
    output: &str,
    exit_code: i64,
    stderr: &str,
    checked_at: String,
) -> Result<ContainmentSummary, RuntimeError> {
    let line = output.lines().last().unwrap_or_default();
    let Ok(verdict) = serde_json::from_str::<serde_json::Value>(line) else {
        return Err(RuntimeErrorKind::ContainmentRefused {
            findings: vec![RouteFinding {
                route: "the probe itself".to_string(),
                outcome: format!("unanswered (exit {exit_code}, {})", stderr.trim()),
                kind: FindingKind::NoVerdict,
            }],
        }
        .into());
    };
    let routes: Vec<(String, String)> = verdict["routes"]
        .as_array()
        .map(|routes| {
            routes
                .iter()
                .map(|r| {
                    (
                        format!(
                            "{} {}",
                            r["route"].as_str().unwrap_or("?"),
                            r["target"].as_str().unwrap_or("?")
                        ),
                        r["outcome"].as_str().unwrap_or("unanswered").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let control = &verdict["control"];
    let reached = control["reached"] == true;
    let contained = verdict["contained"] == true && exit_code == 0 && reached && !routes.is_empty();
    if !contained {
        let mut findings: Vec<RouteFinding> = Vec::new();
        if !reached {
            findings.push(RouteFinding {
                route: format!(
                    "the environment's sidecar (positive control) {}",
                    control["target"].as_str().unwrap_or("not named")
                ),
                outcome: format!(
                    "unanswered: {}",
                    control["detail"]
                        .as_str()
                        .unwrap_or("the probe reported no positive control")
                ),
                kind: FindingKind::SidecarUnreachable,
            });
        }
        findings.extend(
            routes
                .iter()
                .filter(|(_, outcome)| outcome != "denied")
                .map(|(route, outcome)| RouteFinding {
                    route: route.clone(),
                    outcome: outcome.clone(),
                    kind: match outcome.as_str() {
                        "escaped" => FindingKind::Escaped,
                        _ => FindingKind::Unanswered,
                    },
                }),
        );
        if findings.is_empty() {
            findings.push(RouteFinding {
                route: "the probe itself".to_string(),
                outcome: format!("no route was judged (exit {exit_code})"),
                kind: FindingKind::NoVerdict,
            });
        }
        return Err(RuntimeErrorKind::ContainmentRefused { findings }.into());
    }
    Ok(ContainmentSummary {
        contained: true,
        checked_at,
        routes,
        window_ms: verdict["window_ms"].as_u64().unwrap_or(0),
    })
}

/// The refusal a startup gate's verdict amounts to (AF-RUN-043), on every runtime: the gate of
/// `workload` printed `output` (its verdict is the last line) and `stderr`, and did not pass.
pub fn gate_refusal(workload: &str, output: &str, stderr: &str) -> RuntimeError {
    let verdict: serde_json::Value =
        serde_json::from_str(output.lines().last().unwrap_or_default()).unwrap_or_default();
    RuntimeErrorKind::ContainmentRefused {
        findings: vec![RouteFinding {
            route: format!("the startup gate of {workload}"),
            outcome: verdict["reason"]
                .as_str()
                .unwrap_or(stderr.trim())
                .to_string(),
            kind: gate_finding_kind(&verdict),
        }],
    }
    .into()
}

/// Which cause a failed gate's verdict shows: a route that got out, a sidecar that never
/// answered, routes left unanswered — or no verdict at all.
fn gate_finding_kind(verdict: &serde_json::Value) -> FindingKind {
    let outcomes: Vec<&str> = verdict["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    let reason = verdict["reason"].as_str();
    if outcomes.contains(&"escaped") {
        FindingKind::Escaped
    } else if reason.is_some_and(|r| r.starts_with("the sidecar's")) {
        FindingKind::SidecarUnreachable
    } else if outcomes.contains(&"unanswered") {
        FindingKind::Unanswered
    } else {
        FindingKind::NoVerdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::RunCode;

    fn line(outcomes: &[(&str, &str)], contained: bool) -> String {
        let routes: Vec<_> = outcomes
            .iter()
            .map(|(route, outcome)| serde_json::json!({"route": route, "target": "tcp 203.0.113.10:443", "outcome": outcome}))
            .collect();
        serde_json::json!({"check": "probe", "contained": contained, "control": reached(),
            "routes": routes})
        .to_string()
    }

    fn reached() -> serde_json::Value {
        serde_json::json!({"target": "tcp 10.99.0.2:3128", "reached": true, "detail": "the sidecar answered"})
    }

    /// Every route denied, with the sidecar unreachable: a namespace with no network at all.
    #[test]
    fn every_route_denied_without_the_sidecar_is_af_run_043_naming_the_control() {
        let silent = serde_json::json!({"check": "probe", "contained": false,
            "control": {"target": "tcp 10.99.0.2:3128", "reached": false, "detail": "no route to host"},
            "routes": [{"route": "public-tcp", "target": "tcp 203.0.113.10:443", "outcome": "denied"}]})
        .to_string();
        let err = judge_probe(&silent, 43, "", "t".into()).unwrap_err();
        assert_eq!(err.code(), RunCode::ContainmentRefused);
        let text = err.to_string();
        assert!(
            text.contains("the environment's sidecar (positive control) tcp 10.99.0.2:3128 (unanswered: no route to host)"),
            "{text}"
        );
        assert!(err.help().contains("own sidecar"), "{}", err.help());
        // A verdict without a control (an engine image from before it) is never a pass either.
        let old = serde_json::json!({"check": "probe", "contained": true,
            "routes": [{"route": "public-tcp", "target": "tcp 203.0.113.10:443", "outcome": "denied"}]})
        .to_string();
        assert!(judge_probe(&old, 0, "", "t".into()).is_err());
    }

    #[test]
    fn every_route_denied_is_contained() {
        let summary =
            judge_probe(&line(&[("public-tcp", "denied")], true), 0, "", "t".into()).unwrap();
        assert!(summary.contained);
        assert_eq!(
            summary.routes,
            [(
                "public-tcp tcp 203.0.113.10:443".to_string(),
                "denied".to_string()
            )]
        );
    }

    #[test]
    fn an_escaped_or_unanswered_route_is_af_run_043_naming_it() {
        let err = judge_probe(
            &line(
                &[
                    ("public-tcp", "escaped"),
                    ("metadata", "unanswered"),
                    ("dns", "denied"),
                ],
                false,
            ),
            1,
            "",
            "t".into(),
        )
        .unwrap_err();
        assert_eq!(err.code(), RunCode::ContainmentRefused);
        let text = err.to_string();
        assert!(
            text.contains("public-tcp") && text.contains("escaped") && text.contains("metadata"),
            "{text}"
        );
        assert!(
            !text.contains("dns tcp"),
            "denied routes are not findings: {text}"
        );
    }

    #[test]
    fn no_verdict_or_no_routes_is_never_a_pass() {
        let err = judge_probe("", 137, "killed", "t".into()).unwrap_err();
        assert!(err.to_string().contains("the probe itself") && err.to_string().contains("killed"));
        let err = judge_probe(&line(&[], true), 0, "", "t".into()).unwrap_err();
        assert_eq!(err.code(), RunCode::ContainmentRefused);
        // Said contained, but exited non-zero: refused.
        assert!(judge_probe(&line(&[("a", "denied")], true), 1, "", "t".into()).is_err());
    }
}
