//! Startup, liveness and readiness probes, as the kubelet runs them: an HTTP GET to the Pod's
//! address (a status from 200 to 399 passes), a TCP connection, or a command in the container
//! (exit 0 passes), each within its timeout; a result counts after `successThreshold` passes or
//! `failureThreshold` failures in a row, every `periodSeconds` after `initialDelaySeconds`.

use std::net::IpAddr;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// One probe's schedule and tally.
#[derive(Clone, Debug)]
pub struct Tally {
    pub probe: Probe,
    pub next_at: Instant,
    successes: i32,
    failures: i32,
    /// The last decided result: `Some(true)` after enough passes, `Some(false)` after enough
    /// failures.
    pub result: Option<bool>,
}

impl Tally {
    pub fn new(probe: &Probe, started: Instant) -> Tally {
        let delay = u64::try_from(probe.initial_delay_seconds.unwrap_or(0)).unwrap_or(0);
        Tally {
            probe: probe.clone(),
            next_at: started + Duration::from_secs(delay),
            successes: 0,
            failures: 0,
            result: None,
        }
    }

    pub fn due(&self, now: Instant) -> bool {
        now >= self.next_at
    }

    /// Counts one outcome; the decided result.
    pub fn record(&mut self, passed: bool, now: Instant) -> Option<bool> {
        let period = u64::try_from(self.probe.period_seconds.unwrap_or(10).max(1)).unwrap_or(10);
        self.next_at = now + Duration::from_secs(period);
        if passed {
            self.successes += 1;
            self.failures = 0;
            if self.successes >= self.probe.success_threshold.unwrap_or(1).max(1) {
                self.result = Some(true);
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if self.failures >= self.probe.failure_threshold.unwrap_or(3).max(1) {
                self.result = Some(false);
            }
        }
        self.result
    }
}

/// A named or numbered port of `container`.
fn port(container: &Container, port: &IntOrString) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// Runs `probe` once against `container` (Docker id `container_id`) of the Pod at `pod_ip`.
pub async fn run(
    docker: &Docker,
    probe: &Probe,
    container: &Container,
    container_id: &str,
    pod_ip: IpAddr,
) -> bool {
    let timeout =
        Duration::from_secs(u64::try_from(probe.timeout_seconds.unwrap_or(1).max(1)).unwrap_or(1));
    let attempt = async {
        if let Some(get) = &probe.http_get {
            let Some(port) = port(container, &get.port) else {
                return false;
            };
            if get.scheme.as_deref() == Some("HTTPS") {
                // The node speaks plain HTTP to Pods; a probe it cannot run does not pass.
                return false;
            }
            let host = get
                .host
                .as_deref()
                .and_then(|h| h.parse().ok())
                .unwrap_or(pod_ip);
            let path = get.path.clone().unwrap_or_else(|| "/".to_string());
            let headers: String = get
                .http_headers
                .iter()
                .flatten()
                .map(|h| format!("{}: {}\r\n", h.name, h.value))
                .collect();
            return http_get(host, port, &path, &headers).await;
        }
        if let Some(tcp) = &probe.tcp_socket {
            let Some(port) = port(container, &tcp.port) else {
                return false;
            };
            let host = tcp
                .host
                .as_deref()
                .and_then(|h| h.parse().ok())
                .unwrap_or(pod_ip);
            return tokio::net::TcpStream::connect((host, port)).await.is_ok();
        }
        if let Some(exec) = &probe.exec {
            return command(
                docker,
                container_id,
                exec.command.clone().unwrap_or_default(),
            )
            .await;
        }
        false
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or(false)
}

/// A status from 200 to 399 for `GET path`.
async fn http_get(host: IpAddr, port: u16, path: &str, headers: &str) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect((host, port)).await else {
        return false;
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: kube-probe/1.20\r\nAccept: */*\r\n{headers}Connection: close\r\n\r\n",
        std::net::SocketAddr::new(host, port)
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = Vec::new();
    let mut buffer = [0u8; 256];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .is_some_and(|code| (200..400).contains(&code))
}

/// Exit status 0 of `argv` run in the container.
async fn command(docker: &Docker, container_id: &str, argv: Vec<String>) -> bool {
    let Ok(created) = docker
        .create_exec(
            container_id,
            CreateExecOptions {
                cmd: Some(argv),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
    else {
        return false;
    };
    match docker.start_exec(&created.id, None).await {
        Ok(StartExecResults::Attached { mut output, .. }) => {
            while let Some(Ok(_)) = output.next().await {}
        }
        _ => return false,
    }
    docker
        .inspect_exec(&created.id)
        .await
        .ok()
        .and_then(|e| e.exit_code)
        == Some(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_count_after_their_thresholds_and_the_schedule_follows_the_period() {
        let probe: Probe = serde_json::from_value(serde_json::json!({
            "initialDelaySeconds": 2, "periodSeconds": 5, "failureThreshold": 2, "successThreshold": 1
        }))
        .unwrap();
        let start = Instant::now();
        let mut tally = Tally::new(&probe, start);
        assert!(!tally.due(start));
        assert!(tally.due(start + Duration::from_secs(2)));
        assert_eq!(tally.record(false, start), None, "one failure is not two");
        assert_eq!(tally.next_at, start + Duration::from_secs(5));
        assert_eq!(tally.record(false, start), Some(false));
        assert_eq!(tally.record(true, start), Some(true));
    }
}
