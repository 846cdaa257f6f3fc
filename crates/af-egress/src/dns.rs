//! The DNS responder. Every name outside the environment resolves to the sidecar itself, so a
//! client that ignores its proxy settings still lands on the sidecar and is decided. Names inside
//! the environment are forwarded to the platform's resolver, in a query rebuilt from the question
//! alone. Any other question about an outside name is refused and never forwarded, and so is any
//! name that is not a host name: DNS must not be a tunnel.

use std::net::SocketAddr;
use std::sync::Arc;

use af_runtime::Verdict;
use hickory_proto::rr::Name;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::accept::Admitted;
use crate::config::DnsConfig;
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::dns_forward::{Forward, ForwardTable};
use crate::dns_wire::{
    Question, RCODE_REFUSED, RCODE_SERVFAIL, format_error, is_host_name, read_query, type_name,
};
use crate::metrics::DnsOutcome;
use crate::policy::DenyReason;
use crate::udp_batch::{BATCH, Datagram, Inbound, send_all};

/// What the responder does with one query.
#[derive(Debug, PartialEq, Eq)]
enum Handling {
    /// Answer these bytes.
    Reply(Vec<u8>),
    /// Send this query (rebuilt from the client's question, under the client's id) to the
    /// platform's resolver at this address, and relay its answer.
    Forward(Vec<u8>, SocketAddr),
    /// Unreadable without even an id: say nothing.
    Drop,
}

/// The names inside the environment, read once as names: each is compared with a query's name
/// label by label (case aside), never as joined text, where one label holding dots would pass
/// for several.
#[derive(Debug)]
pub struct InternalZones {
    /// Service names: exactly these.
    names: Vec<Name>,
    /// Suffixes: these and every name under them.
    suffixes: Vec<Name>,
}

impl InternalZones {
    /// The zones `dns` names; a name that is not a host name (refused when the configuration is
    /// loaded) is left out rather than matched as something else.
    pub fn new(dns: &DnsConfig) -> InternalZones {
        let read = |texts: &[String]| {
            texts
                .iter()
                .filter_map(|text| internal_name(text))
                .collect::<Vec<Name>>()
        };
        InternalZones {
            names: read(&dns.internal_names),
            suffixes: read(&dns.internal_suffixes),
        }
    }

    /// Whether `name` is inside the environment: a service name, or under an internal suffix.
    fn contains(&self, name: &Name) -> bool {
        self.names.iter().any(|n| n == name) || self.suffixes.iter().any(|s| s.zone_of(name))
    }
}

/// A configured internal name or suffix as a fully qualified name, when it is a host name.
pub fn internal_name(text: &str) -> Option<Name> {
    let mut name = Name::from_ascii(text.trim_matches('.')).ok()?;
    name.set_fqdn(true);
    (is_host_name(&name) && !name.is_root()).then_some(name)
}

/// Decides one query. Records refusals in the decision log.
fn handle_query(
    bytes: &[u8],
    client: SocketAddr,
    shared: &Shared,
    dns: &DnsConfig,
    zones: &InternalZones,
) -> Handling {
    let question = match read_query(bytes) {
        Ok(question) => question,
        Err(unreadable) => {
            shared.metrics.dns(DnsOutcome::Malformed);
            // A query with a readable header is recorded: a label over 63 bytes or a name over
            // 255 is refused here, and a refusal goes in the log like any other.
            if unreadable.id.is_some() {
                Pending::new(&shared.environment, client, "dns", "QUERY", "", 53).finish(
                    &shared.log,
                    Verdict::Deny,
                    &DenyReason::DnsMalformed {
                        why: unreadable.why,
                    }
                    .to_string(),
                    0,
                    0,
                );
            }
            return match unreadable.id {
                Some(id) => Handling::Reply(format_error(id)),
                None => Handling::Drop,
            };
        }
    };
    if !is_host_name(&question.name) {
        shared.metrics.dns(DnsOutcome::Refused);
        refuse(&question, DenyReason::DnsNameNotHostName, client, shared);
        return Handling::Reply(question.empty_response(RCODE_REFUSED));
    }
    if zones.contains(&question.name) {
        return match dns.upstream {
            Some(upstream) => {
                shared.metrics.dns(DnsOutcome::Forwarded);
                Handling::Forward(question.forwarded_query(), upstream)
            }
            None => Handling::Reply(question.empty_response(RCODE_SERVFAIL)),
        };
    }
    if question.is_address_query() {
        shared.metrics.dns(DnsOutcome::Answered);
        return Handling::Reply(question.address_response(dns.answer_v4, dns.answer_v6, dns.ttl));
    }
    shared.metrics.dns(DnsOutcome::Refused);
    refuse(&question, DenyReason::DnsQueryType, client, shared);
    Handling::Reply(question.empty_response(RCODE_REFUSED))
}

fn refuse(question: &Question, reason: DenyReason, client: SocketAddr, shared: &Shared) {
    Pending::new(
        &shared.environment,
        client,
        "dns",
        &type_name(question.qtype),
        &question.name_text(),
        53,
    )
    .finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
}

/// Serves DNS over UDP until the socket fails for good. Queries are taken in batches (every one
/// waiting, see `udp_batch`), decided one by one, and the answers and forwarded queries of a batch
/// sent in a batch each.
pub async fn serve_udp(socket: UdpSocket, shared: Arc<Shared>, dns: Arc<DnsConfig>) {
    let resolver = match dns.upstream {
        Some(upstream) => match open_resolver_sockets(upstream).await {
            Ok(sockets) => sockets,
            Err(err) => {
                tracing::error!(%upstream, error = %err, "cannot open a socket towards the platform's resolver");
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    let zones = InternalZones::new(&dns);
    let ids = rand::make_rng::<rand::rngs::StdRng>();
    let mut table = ForwardTable::new(shared.limits.dns_forward_timeout(), ids);
    let mut inbound = Inbound::default();
    let mut replies: Vec<Datagram> = Vec::with_capacity(BATCH);
    let mut forwards: Vec<Vec<Datagram>> = (0..RESOLVER_SOCKETS)
        .map(|_| Vec::with_capacity(BATCH))
        .collect();
    let mut resolver_inbound: Vec<Inbound> =
        (0..RESOLVER_SOCKETS).map(|_| Inbound::default()).collect();
    // One task serves the clients and relays the platform resolver's answers, like a resolver's
    // single event loop: an answer is relayed by the task that is already awake, not handed to
    // another (waking a second task per query halved the forwarding rate).
    loop {
        let (first, second) = resolver_inbound.split_at_mut(1);
        let event = tokio::select! {
            received = inbound.receive(&socket) => Event::Queries(received),
            received = from_resolver(&resolver, 0, &mut first[0]) => Event::Answers(0, received),
            received = from_resolver(&resolver, 1, &mut second[0]) => Event::Answers(1, received),
        };
        match event {
            Event::Queries(Err(err)) | Event::Answers(_, Err(err)) => {
                // ICMP errors from earlier replies surface here on some kernels; keep serving.
                tracing::debug!(error = %err, "dns receive failed");
            }
            Event::Queries(Ok(())) => {
                let now = std::time::Instant::now();
                for (query, client) in inbound.datagrams() {
                    let Some(client) = client else { continue };
                    match handle_query(query, client, &shared, &dns, &zones) {
                        Handling::Reply(reply) => replies.push((reply, Some(client))),
                        Handling::Forward(..) if resolver.is_empty() => {
                            if let Ok(question) = read_query(query) {
                                replies
                                    .push((question.empty_response(RCODE_SERVFAIL), Some(client)));
                            }
                        }
                        Handling::Forward(rebuilt, _) => {
                            match table.forward(rebuilt, client, now) {
                                Forward::Send(sent) => {
                                    let id = u16::from_be_bytes([sent[0], sent[1]]);
                                    forwards[usize::from(id) % resolver.len()].push((sent, None));
                                }
                                Forward::Joined => shared.metrics.dns_joined(),
                                Forward::Dropped => {}
                            }
                        }
                        Handling::Drop => {}
                    }
                }
                for (resolver_socket, queries) in resolver.iter().zip(forwards.iter_mut()) {
                    if !queries.is_empty() {
                        for at in send_all(resolver_socket, queries).await {
                            table.give_up(&queries[at].0, &mut replies);
                        }
                        queries.clear();
                    }
                }
            }
            Event::Answers(from, Ok(())) => {
                for (answer, _) in resolver_inbound[from].datagrams() {
                    table.answer(answer, &mut replies);
                }
            }
        }
        if !replies.is_empty() {
            // A datagram the kernel refuses is lost, as it would be on the wire.
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

/// Answers from resolver socket `index`; never, without one.
async fn from_resolver(
    sockets: &[UdpSocket],
    index: usize,
    inbound: &mut Inbound,
) -> std::io::Result<()> {
    match sockets.get(index) {
        Some(socket) => inbound.receive(socket).await,
        None => std::future::pending().await,
    }
}

/// Sockets towards the platform's resolver: more than one source port, so an off-path forger has
/// to guess the port as well as the id. Long-lived, as a caching resolver's are (a fresh socket
/// per query, as before, halved the forwarding rate: docs/performance.md).
const RESOLVER_SOCKETS: usize = 2;
// `serve_udp` waits on each resolver socket by name in its `select!`.
const _: () = assert!(
    RESOLVER_SOCKETS == 2,
    "serve_udp selects on exactly two resolver sockets"
);

async fn open_resolver_sockets(upstream: SocketAddr) -> std::io::Result<Vec<UdpSocket>> {
    let bind: SocketAddr = if upstream.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let mut sockets = Vec::with_capacity(RESOLVER_SOCKETS);
    for _ in 0..RESOLVER_SOCKETS {
        let socket = UdpSocket::bind(bind).await?;
        socket.connect(upstream).await?;
        sockets.push(socket);
    }
    Ok(sockets)
}

/// Serves DNS over TCP on `listener` for ever.
pub async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>, dns: Arc<DnsConfig>) {
    let zones = Arc::new(InternalZones::new(&dns));
    crate::accept::accept_workloads(
        listener,
        "dns",
        shared.clone(),
        |stream, client, admitted| {
            tcp_connection(
                stream,
                client,
                admitted,
                shared.clone(),
                dns.clone(),
                zones.clone(),
            )
        },
    )
    .await;
}

/// One TCP client: length-prefixed messages, one after another, until it goes quiet.
async fn tcp_connection(
    mut stream: TcpStream,
    client: SocketAddr,
    _admitted: Admitted,
    shared: Arc<Shared>,
    dns: Arc<DnsConfig>,
    zones: Arc<InternalZones>,
) {
    let idle = shared.limits.idle_timeout();
    loop {
        let Ok(Some(query)) = tokio::time::timeout(idle, read_message(&mut stream)).await else {
            return;
        };
        let reply = match handle_query(&query, client, &shared, &dns, &zones) {
            Handling::Reply(reply) => Some(reply),
            Handling::Forward(rebuilt, upstream) => {
                forward_tcp(&rebuilt, upstream, shared.limits.dns_forward_timeout()).await
            }
            Handling::Drop => return,
        };
        let Some(reply) = reply else { return };
        if write_message(&mut stream, &reply).await.is_err() {
            return;
        }
    }
}

/// One length-prefixed DNS message over TCP (RFC 1035 section 4.2.2).
pub(crate) async fn read_message(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let len = usize::from(stream.read_u16().await.ok()?);
    let mut message = vec![0u8; len];
    stream.read_exact(&mut message).await.ok()?;
    Some(message)
}

/// Writes `message` with its two-byte length, in one write.
pub(crate) async fn write_message(stream: &mut TcpStream, message: &[u8]) -> std::io::Result<()> {
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

    fn name(text: &str) -> Name {
        Name::from_ascii(text)
            .unwrap()
            .append_domain(&Name::root())
            .unwrap()
    }

    #[test]
    fn internal_names_and_suffixes() {
        let zones = InternalZones::new(&dns(
            &["web", "worker"],
            &["svc.cluster.local", ".af-env.internal."],
        ));
        for text in [
            "web",
            "WORKER",
            "svc.cluster.local",
            "web.ns.svc.cluster.local",
            "x.af-env.internal",
        ] {
            assert!(zones.contains(&name(text)), "{text}");
        }
        for text in [
            "webx",
            "web.example.com",
            "evilsvc.cluster.local",
            "cluster.local",
            "api.github.com",
        ] {
            assert!(!zones.contains(&name(text)), "{text}");
        }
    }

    /// One label that holds dots is one label: it is not the service name or the suffix its text
    /// spells.
    #[test]
    fn a_label_holding_dots_is_compared_as_one_label() {
        let zones = InternalZones::new(&dns(&["web"], &["svc.cluster.local"]));
        let dotted = Name::from_labels([&b"x.svc.cluster.local"[..]]).unwrap();
        assert!(!zones.contains(&dotted));
        let dotted_under = Name::from_labels([&b"x.svc"[..], b"cluster", b"local"]).unwrap();
        assert!(!zones.contains(&dotted_under));
        assert!(!is_host_name(&dotted));
    }

    #[test]
    fn configured_internal_names_must_be_host_names() {
        assert!(internal_name("svc.cluster.local").is_some());
        assert!(internal_name(".af-env.internal.").is_some());
        for bad in ["", ".", "a b", "a..b", "web/x"] {
            assert!(internal_name(bad).is_none(), "{bad:?}");
        }
    }
}
