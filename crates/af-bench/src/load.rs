//! The HTTP load generator: the same client, byte for byte, for every route, so the only thing that
//! differs between a direct run and a proxied one is the proxy.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::world::ORIGIN;

/// The name both proxies allow, resolving to the origin.
pub const ORIGIN_NAME: &str = "origin.bench.test";

#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// Through a CONNECT tunnel (with a ClientHello first) instead of plain HTTP.
    pub tunnel: bool,
    /// 1 MiB responses instead of 100 bytes.
    pub large: bool,
    pub concurrency: usize,
    pub keep_alive: bool,
}

impl Scenario {
    pub fn label(&self) -> String {
        format!(
            "{} {} c={} {}",
            if self.tunnel { "CONNECT" } else { "HTTP" },
            if self.large { "1MiB" } else { "100B" },
            self.concurrency,
            if self.keep_alive {
                "keep-alive"
            } else {
                "new-conn"
            }
        )
    }
}

#[derive(Debug, Default)]
pub struct Measured {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Sorted.
    pub latencies: Vec<Duration>,
}

impl Measured {
    pub fn per_second(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    /// Adds `other`'s measurement to this one, as if both had been one longer run.
    pub fn merge(&mut self, other: Measured) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.seconds += other.seconds;
        self.latencies.extend(other.latencies);
        self.latencies.sort_unstable();
    }

    pub fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies[index]
    }
}

/// Runs `scenario` for `duration`, straight to the origin (`proxy` = None) or through a proxy.
pub async fn run(proxy: Option<SocketAddr>, scenario: Scenario, duration: Duration) -> Measured {
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..scenario.concurrency {
        workers.spawn(worker(proxy, scenario, deadline));
    }
    let mut total = Measured::default();
    while let Some(Ok(part)) = workers.join_next().await {
        total.requests += part.requests;
        total.errors += part.errors;
        total.latencies.extend(part.latencies);
    }
    total.seconds = started.elapsed().as_secs_f64();
    total.latencies.sort_unstable();
    total
}

async fn worker(proxy: Option<SocketAddr>, scenario: Scenario, deadline: Instant) -> Measured {
    let mut measured = Measured::default();
    let mut connection: Option<TcpStream> = None;
    let path = if scenario.large { "/large" } else { "/small" };
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < deadline {
        let start = Instant::now();
        if connection.is_none() {
            match open(proxy, scenario).await {
                Ok(stream) => connection = Some(stream),
                Err(_) => {
                    measured.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let Some(stream) = connection.as_mut() else {
            continue;
        };
        // Through the forward proxy, plain HTTP is absolute-form; everything else origin-form.
        let target = match (proxy, scenario.tunnel) {
            (Some(_), false) => format!("http://{ORIGIN_NAME}{path}"),
            _ => path.to_string(),
        };
        let close = if scenario.keep_alive {
            ""
        } else {
            "connection: close\r\n"
        };
        let request = format!("GET {target} HTTP/1.1\r\nhost: {ORIGIN_NAME}\r\n{close}\r\n");
        let ok = stream.write_all(request.as_bytes()).await.is_ok()
            && read_response(stream, &mut buf).await.is_some();
        if ok {
            measured.requests += 1;
            measured.latencies.push(start.elapsed());
        } else {
            measured.errors += 1;
            connection = None;
            continue;
        }
        if !scenario.keep_alive
            && let Some(mut stream) = connection.take()
        {
            // The server closes first, as it said it would, so the TIME_WAIT is its own and the
            // next connection does not wait for a port.
            let _ = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await;
        }
    }
    measured
}

/// A connection ready for requests: to the origin, to the proxy, or through a CONNECT tunnel whose
/// first bytes are a ClientHello naming the origin.
async fn open(proxy: Option<SocketAddr>, scenario: Scenario) -> std::io::Result<TcpStream> {
    let origin_port = if scenario.tunnel { 443 } else { 80 };
    let origin: SocketAddr = format!("{ORIGIN}:{origin_port}")
        .parse()
        .map_err(std::io::Error::other)?;
    let mut stream = TcpStream::connect(proxy.unwrap_or(origin)).await?;
    stream.set_nodelay(true)?;
    if scenario.tunnel {
        if proxy.is_some() {
            let connect =
                format!("CONNECT {ORIGIN_NAME}:443 HTTP/1.1\r\nhost: {ORIGIN_NAME}:443\r\n\r\n");
            stream.write_all(connect.as_bytes()).await?;
            let mut buf = vec![0u8; 1024];
            let head = read_head(&mut stream, &mut buf)
                .await
                .ok_or_else(|| std::io::Error::other("no CONNECT answer"))?;
            if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
                return Err(std::io::Error::other(format!("CONNECT refused: {head}")));
            }
        }
        stream
            .write_all(&af_wire::client_hello::build_client_hello(Some(
                ORIGIN_NAME,
            )))
            .await?;
    }
    Ok(stream)
}

/// Reads one response head (without a body); the head as text.
async fn read_head(stream: &mut TcpStream, buf: &mut [u8]) -> Option<String> {
    let mut head = Vec::new();
    loop {
        let n = stream.read(&mut buf[..1]).await.ok()?;
        if n == 0 {
            return None;
        }
        head.push(buf[0]);
        if head.ends_with(b"\r\n\r\n") {
            return Some(String::from_utf8_lossy(&head).into_owned());
        }
    }
}

/// Reads one whole response, by content-length; `None` on a broken connection or a non-200.
async fn read_response(stream: &mut TcpStream, buf: &mut [u8]) -> Option<()> {
    let mut have: Vec<u8> = Vec::with_capacity(256);
    let (head_end, length) = loop {
        let n = stream.read(buf).await.ok()?;
        if n == 0 {
            return None;
        }
        have.extend_from_slice(&buf[..n]);
        if let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&have[..end]).to_ascii_lowercase();
            if !head.starts_with("http/1.1 200") {
                return None;
            }
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())?;
            break (end + 4, length);
        }
    };
    let mut remaining = length.saturating_sub(have.len() - head_end);
    while remaining > 0 {
        let n = stream.read(buf).await.ok()?;
        if n == 0 {
            return None;
        }
        remaining = remaining.saturating_sub(n);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(requests: u64, seconds: f64, latencies_ms: &[u64]) -> Measured {
        Measured {
            requests,
            errors: 0,
            seconds,
            latencies: latencies_ms
                .iter()
                .map(|ms| Duration::from_millis(*ms))
                .collect(),
        }
    }

    #[test]
    fn merged_rounds_are_one_longer_run() {
        let mut pooled = measured(100, 2.0, &[1, 5, 9]);
        pooled.merge(measured(300, 2.0, &[2, 3, 4]));
        assert_eq!(pooled.per_second(), 100.0);
        assert_eq!(pooled.requests, 400);
        // Percentiles read the pooled latencies in order, not one round's after the other's.
        assert_eq!(pooled.percentile(0.0), Duration::from_millis(1));
        assert_eq!(pooled.percentile(0.5), Duration::from_millis(4));
        assert_eq!(pooled.percentile(1.0), Duration::from_millis(9));
    }
}
