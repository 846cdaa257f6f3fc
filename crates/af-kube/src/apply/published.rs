//! A published URL is ready when the ingress routes it: pod readiness alone does not mean the
//! ingress controller has updated its backends. Each web service's health URL is asked until it
//! stops answering with a missing route (404) or a gateway error (502, 503, 504). Redirects are
//! not followed, so the check never signs in or visits an authentication service.

use std::net::SocketAddr;

use af_runtime::RuntimeError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Patience;

/// Whether an answer says the route is in place.
pub fn settled(status: u16) -> bool {
    !matches!(status, 404 | 502 | 503 | 504)
}

/// One GET of `path` on `host`, sent to `address` (the ingress); the status, or why none came.
async fn status_of(address: &str, host: &str, path: &str) -> Result<u16, String> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).await.map_err(|e| e.to_string())?;
    String::from_utf8_lossy(&head[..n])
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "not an HTTP answer".to_string())
}

/// Asks `http://host{path}` (through `ingress` when given, else the host's own address on port 80)
/// until the route is in place, or `patience` runs out.
pub async fn wait(
    host: &str,
    path: &str,
    ingress: Option<SocketAddr>,
    patience: Patience,
) -> Result<(), RuntimeError> {
    let address = ingress.map_or_else(|| format!("{host}:80"), |a| a.to_string());
    let started = tokio::time::Instant::now();
    loop {
        let last = status_of(&address, host, path).await;
        if let Ok(status) = last
            && settled(status)
        {
            return Ok(());
        }
        if started.elapsed() >= patience.timeout {
            let seen = match last {
                Ok(status) => format!("it still answers {status}"),
                Err(why) => format!("it does not answer ({why})"),
            };
            return Err(crate::error::unexpected(
                format!("waiting for http://{host}{path} to be routed"),
                format!(
                    "{seen} after {} s; the ingress controller has no route to the service (is the domain's wildcard record pointing at it?)",
                    patience.timeout.as_secs()
                ),
            ));
        }
        tokio::time::sleep(patience.interval).await;
    }
}

/// How long a published URL is waited for.
pub const PATIENCE: Patience = Patience {
    timeout: std::time::Duration::from_secs(120),
    interval: std::time::Duration::from_secs(1),
};
