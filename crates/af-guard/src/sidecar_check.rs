//! The positive check the gate and the probe make first: the environment's own sidecar answers —
//! its proxy port accepts a connection, and its DNS responder answers a query. Escape routes seen
//! denied prove nothing when nothing at all answers: a namespace with no working network denies
//! every route.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Where the environment's sidecar answers, as the workload reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidecarTarget {
    /// The proxy port: must accept a connection.
    pub proxy: SocketAddr,
    /// The DNS responder: must answer a query, when given.
    pub dns: Option<SocketAddr>,
}

impl SidecarTarget {
    /// The target as a verdict names it.
    pub fn describe(&self) -> String {
        match self.dns {
            Some(dns) => format!("tcp {} and dns/udp {dns}", self.proxy),
            None => format!("tcp {}", self.proxy),
        }
    }

    /// Whether the sidecar answers now, each attempt waiting at most `timeout`; the error says
    /// which part did not.
    pub fn answers(&self, timeout: Duration) -> Result<(), String> {
        TcpStream::connect_timeout(&self.proxy, timeout).map_err(|e| {
            format!(
                "the sidecar's proxy {} does not accept a connection: {e}",
                self.proxy
            )
        })?;
        if let Some(dns) = self.dns {
            let bind: SocketAddr = if dns.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                ([0u16; 8], 0).into()
            };
            let answer = (|| -> std::io::Result<usize> {
                let socket = UdpSocket::bind(bind)?;
                socket.connect(dns)?;
                socket.set_read_timeout(Some(timeout))?;
                socket.send(&af_wire::dns_wire::build_query(
                    0x6a7e,
                    "gate.antifailure.invalid",
                    1,
                ))?;
                socket.recv(&mut [0u8; 512])
            })();
            answer
                .map_err(|e| format!("the sidecar's DNS responder {dns} does not answer: {e}"))?;
        }
        Ok(())
    }
}

/// The positive check's result, as the probe's verdict reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ControlResult {
    pub target: String,
    /// Whether the sidecar answered.
    pub reached: bool,
    pub detail: String,
}

/// Asks `target` until it answers or `patience` is over (the sidecar may be starting as the probe
/// does), every `interval`. Without a target nothing is reached: the check cannot be made, which
/// is never a pass.
pub fn wait_for(
    target: Option<&SidecarTarget>,
    patience: Duration,
    interval: Duration,
    timeout: Duration,
) -> ControlResult {
    let Some(target) = target else {
        return ControlResult {
            target: "not configured".to_string(),
            reached: false,
            detail: "no sidecar address was given (--sidecar-proxy): without it a namespace with \
                     no working network cannot be told from a contained one"
                .to_string(),
        };
    };
    let started = Instant::now();
    loop {
        match target.answers(timeout) {
            Ok(()) => {
                return ControlResult {
                    target: target.describe(),
                    reached: true,
                    detail: "the sidecar answered".to_string(),
                };
            }
            Err(problem) if started.elapsed() >= patience => {
                return ControlResult {
                    target: target.describe(),
                    reached: false,
                    detail: format!(
                        "{problem} (asked for {} s): with the sidecar unreachable, routes seen denied prove nothing",
                        patience.as_secs()
                    ),
                };
            }
            Err(_) => std::thread::sleep(interval),
        }
    }
}
