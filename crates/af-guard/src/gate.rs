//! The startup gate: before a workload starts, in its network namespace, prove the sidecar
//! answers and then see every escape route denied, several rounds in a row. A policy that is
//! programmed a moment after the pod starts is waited for; one that never arrives fails the gate,
//! naming the route.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::route::{Outcome, Route, RouteResult, try_routes};

#[derive(Clone, Debug)]
pub struct GateSettings {
    /// The sidecar's proxy port: must accept a connection.
    pub sidecar_proxy: SocketAddr,
    /// The sidecar's DNS responder: must answer a query.
    pub sidecar_dns: Option<SocketAddr>,
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

/// Whether the sidecar answers: its proxy port accepts, and its DNS responder answers a query.
fn sidecar_answers(settings: &GateSettings) -> Result<(), String> {
    TcpStream::connect_timeout(&settings.sidecar_proxy, settings.timeout).map_err(|e| {
        format!(
            "the sidecar's proxy {} does not accept a connection: {e}",
            settings.sidecar_proxy
        )
    })?;
    if let Some(dns) = settings.sidecar_dns {
        let bind: SocketAddr = if dns.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let answer = (|| -> std::io::Result<usize> {
            let socket = UdpSocket::bind(bind)?;
            socket.connect(dns)?;
            socket.set_read_timeout(Some(settings.timeout))?;
            socket.send(&af_egress::dns_wire::build_query(
                0x6a7e,
                "gate.antifailure.invalid",
                1,
            ))?;
            socket.recv(&mut [0u8; 512])
        })();
        answer.map_err(|e| format!("the sidecar's DNS responder {dns} does not answer: {e}"))?;
    }
    Ok(())
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
        match sidecar_answers(settings) {
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
