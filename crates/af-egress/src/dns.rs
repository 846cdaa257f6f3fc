//! The DNS responder. Every name outside the environment resolves to the sidecar itself, so a
//! client that ignores its proxy settings still lands on the sidecar and is decided. Names inside
//! the environment are forwarded, as received but for the query id, to the platform's resolver.
//! Any other question about an outside name is refused and never forwarded: DNS must not be a
//! tunnel.

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
use crate::udp_batch::{BATCH, Inbound, send_all};

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

/// Serves DNS over UDP until the socket fails for good. Queries are taken in batches (every one
/// waiting, see `udp_batch`), decided one by one, and the answers and forwarded queries of a batch
/// sent in a batch each.
pub async fn serve_udp(socket: UdpSocket, shared: Arc<Shared>, dns: Arc<DnsConfig>) {
    let forwarder = match dns.upstream {
        Some(upstream) => {
            match UdpForwarder::start(upstream, shared.limits.dns_forward_timeout()).await {
                Ok(forwarder) => Some(forwarder),
                Err(err) => {
                    tracing::error!(%upstream, error = %err, "cannot open a socket towards the platform's resolver");
                    None
                }
            }
        }
        None => None,
    };
    let mut inbound = Inbound::default();
    let mut replies: Vec<(Vec<u8>, Option<SocketAddr>)> = Vec::with_capacity(BATCH);
    let mut forwards: Vec<Vec<(Vec<u8>, Option<SocketAddr>)>> = (0..UPSTREAM_SOCKETS)
        .map(|_| Vec::with_capacity(BATCH))
        .collect();
    let mut answers: Vec<(Vec<u8>, Option<SocketAddr>)> = Vec::with_capacity(BATCH);
    let mut upstream_inbound: Vec<Inbound> =
        (0..UPSTREAM_SOCKETS).map(|_| Inbound::default()).collect();
    // One task serves the clients and relays the platform resolver's answers, like a resolver's
    // single event loop: an answer is relayed by the task that is already awake, not handed to
    // another (waking a second task per query halved the forwarding rate).
    loop {
        let (first, second) = upstream_inbound.split_at_mut(1);
        let event = tokio::select! {
            received = inbound.receive(&socket) => Event::Queries(received),
            received = upstream(&forwarder, 0, &mut first[0]) => Event::Answers(0, received),
            received = upstream(&forwarder, 1, &mut second[0]) => Event::Answers(1, received),
        };
        match event {
            Event::Queries(Err(err)) | Event::Answers(_, Err(err)) => {
                // ICMP errors from earlier replies surface here on some kernels; keep serving.
                tracing::debug!(error = %err, "dns receive failed");
            }
            Event::Queries(Ok(())) => {
                for (query, client) in inbound.datagrams() {
                    let Some(client) = client else { continue };
                    match handle_query(query, client, &shared, &dns) {
                        Handling::Reply(reply) => replies.push((reply, Some(client))),
                        Handling::Forward(_) => match &forwarder {
                            Some(forwarder) => {
                                if let Some((socket, rewritten)) = forwarder.prepare(query, client)
                                {
                                    forwards[socket].push((rewritten, None));
                                }
                            }
                            None => {
                                if let Ok(question) = read_query(query) {
                                    replies.push((
                                        question.empty_response(RCODE_SERVFAIL),
                                        Some(client),
                                    ));
                                }
                            }
                        },
                        Handling::Drop => {}
                    }
                }
                if let Some(forwarder) = &forwarder {
                    for (socket, queries) in forwards.iter_mut().enumerate() {
                        if !queries.is_empty() {
                            for at in send_all(&forwarder.sockets[socket], queries).await {
                                if let Some(failed) = forwarder.give_up(&queries[at].0) {
                                    replies.push(failed);
                                }
                            }
                            queries.clear();
                        }
                    }
                }
            }
            Event::Answers(from, Ok(())) => {
                if let Some(forwarder) = &forwarder {
                    forwarder.match_answers(&mut upstream_inbound[from], &mut answers);
                    // An answer the kernel refuses is lost, as it would be on the wire.
                    send_all(&socket, &answers).await;
                    answers.clear();
                }
            }
        }
        if !replies.is_empty() {
            send_all(&socket, &replies).await;
            replies.clear();
        }
    }
}

/// What woke the responder.
enum Event {
    Queries(std::io::Result<()>),
    Answers(usize, std::io::Result<()>),
}

/// Answers from upstream socket `index`; never, without a forwarder.
async fn upstream(
    forwarder: &Option<UdpForwarder>,
    index: usize,
    inbound: &mut Inbound,
) -> std::io::Result<()> {
    match forwarder.as_ref().and_then(|f| f.sockets.get(index)) {
        Some(socket) => inbound.receive(socket).await,
        None => std::future::pending().await,
    }
}

/// Sockets towards the platform's resolver: more than one source port, so an off-path forger has
/// to guess the port as well as the id.
const UPSTREAM_SOCKETS: usize = 2;
// `serve_udp` waits on each upstream socket by name in its `select!`.
const _: () = assert!(
    UPSTREAM_SOCKETS == 2,
    "serve_udp selects on exactly two upstream sockets"
);

/// Forwards internal queries to the platform's resolver over long-lived sockets, the way a caching
/// resolver does: each query gets an unpredictable id of its own, and the answer is matched back
/// to its client by that id and sent with the client's id restored. (A fresh socket per query, as
/// before, halved the forwarding rate: docs/performance.md.)
struct UdpForwarder {
    sockets: Vec<UdpSocket>,
    in_flight: std::sync::Mutex<std::collections::HashMap<u16, InFlight>>,
    ids: std::sync::Mutex<u64>,
    timeout: std::time::Duration,
}

struct InFlight {
    client: SocketAddr,
    client_id: u16,
    sent: std::time::Instant,
}

impl UdpForwarder {
    async fn start(
        upstream: SocketAddr,
        timeout: std::time::Duration,
    ) -> std::io::Result<UdpForwarder> {
        let bind: SocketAddr = if upstream.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let mut sockets = Vec::with_capacity(UPSTREAM_SOCKETS);
        for _ in 0..UPSTREAM_SOCKETS {
            let socket = UdpSocket::bind(bind).await?;
            socket.connect(upstream).await?;
            sockets.push(socket);
        }
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
            | 1;
        Ok(UdpForwarder {
            sockets,
            in_flight: std::sync::Mutex::new(std::collections::HashMap::new()),
            ids: std::sync::Mutex::new(seed),
            timeout,
        })
    }

    /// The next id: xorshift, so an observer of one id cannot predict the next.
    fn next_id(&self) -> u16 {
        let mut state = self
            .ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state >> 16) as u16
    }

    /// Gives the query an id of its own and remembers whom to answer; returns the upstream socket
    /// to send it on and the rewritten query. `None` drops it (malformed, or every id busy: the
    /// client retries).
    fn prepare(&self, query: &[u8], client: SocketAddr) -> Option<(usize, Vec<u8>)> {
        if query.len() < 12 {
            return None;
        }
        let id = {
            let mut in_flight = self
                .in_flight
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // An id is free when unused, or when its query timed out (that client gave up).
            let id = (0..16).map(|_| self.next_id()).find(|id| {
                in_flight
                    .get(id)
                    .is_none_or(|old| old.sent.elapsed() > self.timeout)
            })?;
            let client_id = u16::from_be_bytes([query[0], query[1]]);
            in_flight.insert(
                id,
                InFlight {
                    client,
                    client_id,
                    sent: std::time::Instant::now(),
                },
            );
            id
        };
        let mut rewritten = query.to_vec();
        rewritten[..2].copy_from_slice(&id.to_be_bytes());
        Some((usize::from(id) % self.sockets.len(), rewritten))
    }

    /// A forwarded query that could not be sent (`rewritten`, as [`Self::prepare`] made it): its id
    /// is freed at once, and its client gets SERVFAIL now instead of waiting out its own timeout.
    fn give_up(&self, rewritten: &[u8]) -> Option<(Vec<u8>, Option<SocketAddr>)> {
        let id = u16::from_be_bytes([*rewritten.first()?, *rewritten.get(1)?]);
        let waiting = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id)?;
        let mut query = rewritten.to_vec();
        query[..2].copy_from_slice(&waiting.client_id.to_be_bytes());
        let question = read_query(&query).ok()?;
        Some((
            question.empty_response(RCODE_SERVFAIL),
            Some(waiting.client),
        ))
    }

    /// The answers of a batch, each with its client's id restored, addressed to its client.
    /// An answer nobody waits for (late, or forged) is dropped.
    fn match_answers(
        &self,
        inbound: &mut Inbound,
        answers: &mut Vec<(Vec<u8>, Option<SocketAddr>)>,
    ) {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (answer, _) in inbound.datagrams() {
            if answer.len() < 12 {
                continue;
            }
            let id = u16::from_be_bytes([answer[0], answer[1]]);
            if let Some(waiting) = in_flight.remove(&id) {
                answer[..2].copy_from_slice(&waiting.client_id.to_be_bytes());
                answers.push((answer.to_vec(), Some(waiting.client)));
            }
        }
    }
}

/// Serves DNS over TCP on `listener` for ever.
pub async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>, dns: Arc<DnsConfig>) {
    crate::accept::accept_forever(listener, "dns", |stream, client| {
        tcp_connection(stream, client, shared.clone(), dns.clone())
    })
    .await;
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

    /// A forwarded query the kernel would not send is answered SERVFAIL, to its client, with its
    /// client's id, and its id is free again: a late answer for it matches nobody.
    #[tokio::test]
    async fn a_query_that_cannot_be_forwarded_is_answered_servfail_at_once() {
        let forwarder = UdpForwarder::start(
            "127.0.0.1:9".parse().unwrap(),
            std::time::Duration::from_secs(5),
        )
        .await
        .unwrap();
        let client: SocketAddr = "10.99.0.7:40000".parse().unwrap();
        let query = crate::dns_wire::build_query(0x4242, "web", crate::dns_wire::TYPE_A);
        let (_, rewritten) = forwarder.prepare(&query, client).unwrap();
        let (reply, to) = forwarder
            .give_up(&rewritten)
            .expect("an answer for the client");
        assert_eq!(to, Some(client));
        assert_eq!(reply[..2], [0x42, 0x42], "the client's own id");
        assert_eq!(reply[3] & 0x0f, RCODE_SERVFAIL);
        assert!(forwarder.give_up(&rewritten).is_none(), "the id is freed");
        assert!(forwarder.in_flight.lock().unwrap().is_empty());
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
