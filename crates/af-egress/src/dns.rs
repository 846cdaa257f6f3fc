//! The DNS responder. Every name outside the environment resolves to the sidecar itself, so a
//! client that ignores its proxy settings still lands on the sidecar and is decided. Names inside
//! the environment are forwarded, byte for byte, to the platform's resolver. Any other question
//! about an outside name is refused and never forwarded: DNS must not be a tunnel.

use std::net::SocketAddr;
use std::sync::Arc;

use af_runtime::Verdict;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::config::DnsConfig;
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::dns_wire::{
    Question, RCODE_REFUSED, RCODE_SERVFAIL, format_error, read_query, type_name,
};
use crate::metrics::DnsOutcome;
use crate::policy::DenyReason;

/// What the responder does with one query.
#[derive(Debug, PartialEq, Eq)]
enum Handling {
    /// Answer these bytes.
    Reply(Vec<u8>),
    /// Send the query, as received, to the platform's resolver and relay its answer.
    Forward(SocketAddr),
    /// Unreadable without even an id: say nothing.
    Drop,
}

/// Whether `name` is inside the environment: a service name, or under an internal suffix.
fn is_internal(name: &str, dns: &DnsConfig) -> bool {
    dns.internal_names
        .iter()
        .any(|n| n.eq_ignore_ascii_case(name))
        || dns.internal_suffixes.iter().any(|suffix| {
            let suffix = suffix.trim_matches('.');
            name.eq_ignore_ascii_case(suffix)
                || (name.len() > suffix.len()
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix))
        })
}

/// Decides one query. Records refusals in the decision log.
fn handle_query(bytes: &[u8], client: SocketAddr, shared: &Shared, dns: &DnsConfig) -> Handling {
    let question = match read_query(bytes) {
        Ok(question) => question,
        Err(unreadable) => {
            shared.metrics.dns(DnsOutcome::Malformed);
            return match unreadable.id {
                Some(id) => Handling::Reply(format_error(id)),
                None => Handling::Drop,
            };
        }
    };
    if is_internal(&question.name, dns) {
        return match dns.upstream {
            Some(upstream) => {
                shared.metrics.dns(DnsOutcome::Forwarded);
                Handling::Forward(upstream)
            }
            None => Handling::Reply(question.empty_response(RCODE_SERVFAIL)),
        };
    }
    if question.is_address_query() {
        shared.metrics.dns(DnsOutcome::Answered);
        return Handling::Reply(question.address_response(dns.answer_v4, dns.answer_v6, dns.ttl));
    }
    shared.metrics.dns(DnsOutcome::Refused);
    refuse(&question, client, shared);
    Handling::Reply(question.empty_response(RCODE_REFUSED))
}

fn refuse(question: &Question, client: SocketAddr, shared: &Shared) {
    Pending::new(
        &shared.environment,
        client,
        "dns",
        &type_name(question.qtype),
        &question.name,
        53,
    )
    .finish(
        &shared.log,
        Verdict::Deny,
        &DenyReason::DnsQueryType.to_string(),
        0,
        0,
    );
}

/// Serves DNS over UDP until the socket fails for good.
pub async fn serve_udp(socket: UdpSocket, shared: Arc<Shared>, dns: Arc<DnsConfig>) {
    let socket = Arc::new(socket);
    let mut buf = vec![0u8; 4096];
    loop {
        let (len, client) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(err) => {
                // ICMP errors from earlier replies surface here on some kernels; keep serving.
                tracing::debug!(error = %err, "dns receive failed");
                continue;
            }
        };
        match handle_query(&buf[..len], client, &shared, &dns) {
            Handling::Reply(reply) => {
                let _ = socket.send_to(&reply, client).await;
            }
            Handling::Forward(upstream) => {
                let query = buf[..len].to_vec();
                let socket = socket.clone();
                let timeout = shared.limits.dns_forward_timeout();
                tokio::spawn(async move {
                    if let Some(reply) = forward_udp(&query, upstream, timeout).await {
                        let _ = socket.send_to(&reply, client).await;
                    }
                });
            }
            Handling::Drop => {}
        }
    }
}

/// Asks the platform's resolver over UDP, from a fresh socket so answers cannot be confused
/// between clients; `None` when it does not answer in time.
async fn forward_udp(
    query: &[u8],
    upstream: SocketAddr,
    timeout: std::time::Duration,
) -> Option<Vec<u8>> {
    let bind: SocketAddr = if upstream.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = UdpSocket::bind(bind).await.ok()?;
    socket.connect(upstream).await.ok()?;
    socket.send(query).await.ok()?;
    let mut buf = vec![0u8; 4096];
    let len = tokio::time::timeout(timeout, socket.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    // Only the answer to this query, by id.
    (len >= 2 && buf[..2] == query[..2]).then(|| buf[..len].to_vec())
}

/// Serves DNS over TCP until the listener fails for good.
pub async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>, dns: Arc<DnsConfig>) {
    loop {
        match listener.accept().await {
            Ok((stream, client)) => {
                tokio::spawn(tcp_connection(stream, client, shared.clone(), dns.clone()));
            }
            Err(err) => {
                tracing::warn!(error = %err, "dns accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// One TCP client: length-prefixed messages, one after another, until it goes quiet.
async fn tcp_connection(
    mut stream: TcpStream,
    client: SocketAddr,
    shared: Arc<Shared>,
    dns: Arc<DnsConfig>,
) {
    let _open = shared.metrics.connection_opened();
    let idle = shared.limits.idle_timeout();
    loop {
        let Ok(Some(query)) = tokio::time::timeout(idle, read_message(&mut stream)).await else {
            return;
        };
        let reply = match handle_query(&query, client, &shared, &dns) {
            Handling::Reply(reply) => Some(reply),
            Handling::Forward(upstream) => {
                forward_tcp(&query, upstream, shared.limits.dns_forward_timeout()).await
            }
            Handling::Drop => return,
        };
        let Some(reply) = reply else { return };
        if write_message(&mut stream, &reply).await.is_err() {
            return;
        }
    }
}

async fn read_message(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let len = usize::from(stream.read_u16().await.ok()?);
    let mut message = vec![0u8; len];
    stream.read_exact(&mut message).await.ok()?;
    Some(message)
}

async fn write_message(stream: &mut TcpStream, message: &[u8]) -> std::io::Result<()> {
    let len =
        u16::try_from(message.len()).map_err(|_| std::io::Error::other("DNS message too long"))?;
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message);
    stream.write_all(&framed).await
}

async fn forward_tcp(
    query: &[u8],
    upstream: SocketAddr,
    timeout: std::time::Duration,
) -> Option<Vec<u8>> {
    let exchange = async {
        let mut stream = TcpStream::connect(upstream).await.ok()?;
        write_message(&mut stream, query).await.ok()?;
        read_message(&mut stream).await
    };
    tokio::time::timeout(timeout, exchange).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns(names: &[&str], suffixes: &[&str]) -> DnsConfig {
        DnsConfig {
            answer_v4: None,
            answer_v6: None,
            internal_names: names.iter().map(|s| s.to_string()).collect(),
            internal_suffixes: suffixes.iter().map(|s| s.to_string()).collect(),
            upstream: None,
            ttl: 5,
        }
    }

    #[test]
    fn internal_names_and_suffixes() {
        let config = dns(
            &["web", "worker"],
            &["svc.cluster.local", ".af-env.internal."],
        );
        for name in [
            "web",
            "WORKER",
            "svc.cluster.local",
            "web.ns.svc.cluster.local",
            "x.af-env.internal",
        ] {
            assert!(is_internal(name, &config), "{name}");
        }
        for name in [
            "webx",
            "web.example.com",
            "evilsvc.cluster.local",
            "cluster.local",
            "api.github.com",
        ] {
            assert!(!is_internal(name, &config), "{name}");
        }
    }
}
