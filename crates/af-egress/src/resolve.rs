//! Resolving allowed names, for the sidecar's own connections. Fixed answers from the
//! configuration come first; the rest are asked of the platform's resolver (the configured
//! nameservers, or those of /etc/resolv.conf — never the sidecar's own responder, which answers
//! every outside name with the sidecar), and kept for their TTL in a bounded cache
//! ([`crate::answer_cache`]). The queries are made here, over UDP (and TCP when an answer comes
//! back truncated), rather than through the C library, so the binary needs no name-service
//! modules and runs in an image built FROM scratch. An answer counts only when it answers the
//! question asked — its id, its question, and records owned by the name asked or by the names its
//! CNAME records lead to — and whatever comes back is still classified before it is dialled.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use crate::answer_cache::{AnswerCache, CachePolicy};
use crate::config::ResolverConfig;
use crate::dns_wire::{TYPE_A, TYPE_AAAA, build_query};

#[derive(Clone, Debug)]
pub struct Resolver {
    static_hosts: Arc<BTreeMap<String, Vec<IpAddr>>>,
    cache: Arc<Mutex<AnswerCache>>,
    nameservers: Arc<Vec<SocketAddr>>,
}

impl Resolver {
    pub fn new(config: &ResolverConfig) -> Resolver {
        let static_hosts = config
            .static_hosts
            .iter()
            .map(|(name, ips)| (name.trim_end_matches('.').to_ascii_lowercase(), ips.clone()))
            .collect();
        let nameservers = if config.nameservers.is_empty() {
            nameservers_of(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default())
        } else {
            config.nameservers.clone()
        };
        Resolver {
            static_hosts: Arc::new(static_hosts),
            cache: Arc::new(Mutex::new(AnswerCache::new(CachePolicy {
                min_ttl: Duration::from_secs(config.cache_min_ttl_seconds),
                max_ttl: Duration::from_secs(config.cache_max_ttl_seconds),
                max_entries: config.cache_entries,
            }))),
            nameservers: Arc::new(nameservers),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, AnswerCache> {
        // A poisoned cache lost at most an insertion; its entries are whole.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Names held in the cache now, for `/metrics`.
    pub fn cached_names(&self) -> usize {
        self.cache().len()
    }

    /// The addresses of `name` (lower case), in the resolver's order; empty when it does not
    /// resolve.
    pub async fn resolve(&self, name: &str) -> Vec<IpAddr> {
        if let Some(ips) = self.static_hosts.get(name) {
            return ips.clone();
        }
        if let Some(ips) = self.cache().get(name, Instant::now()) {
            return ips.to_vec();
        }
        let Some((ips, ttl)) = self.ask(name).await else {
            return Vec::new();
        };
        self.cache().insert(name, ips.clone(), ttl, Instant::now());
        ips
    }

    /// Asks each nameserver in turn for A and AAAA records until one answers; IPv4 first, and
    /// the shortest TTL of the records used.
    async fn ask(&self, name: &str) -> Option<(Vec<IpAddr>, Duration)> {
        let mut asked = Name::from_ascii(name).ok()?;
        asked.set_fqdn(true);
        for server in self.nameservers.iter() {
            let (v4, v6) = tokio::join!(
                query(*server, name, &asked, TYPE_A),
                query(*server, name, &asked, TYPE_AAAA)
            );
            if v4.is_none() && v6.is_none() {
                continue;
            }
            let (v4, v6) = (v4.unwrap_or_default(), v6.unwrap_or_default());
            let ttl = [&v4, &v6]
                .iter()
                .filter(|a| !a.addresses.is_empty())
                .map(|a| a.ttl)
                .min()
                .unwrap_or_default();
            let addresses = v4.addresses.into_iter().chain(v6.addresses).collect();
            return Some((addresses, ttl));
        }
        tracing::debug!(name, "no nameserver answered");
        None
    }
}

/// The nameservers a resolv.conf names, on port 53.
pub fn nameservers_of(resolv_conf: &str) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// The addresses one answer gives for the question, and the shortest TTL on the way to them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Addresses {
    pub addresses: Vec<IpAddr>,
    pub ttl: Duration,
}

/// What a datagram from the nameserver is, for the query (`id`, `name`, `qtype`) waiting on it.
#[derive(Debug, PartialEq, Eq)]
pub enum Reading {
    /// The answer: the addresses it gives (none for NXDOMAIN, or any other error).
    Answer(Addresses),
    /// The answer, cut short for UDP: ask again over TCP.
    Truncated,
    /// Not the answer to this query (another id or question, not a response, unreadable): wait on.
    NotOurs,
}

/// CNAME records followed from the name asked at most: a resolver gives the whole chain, and a
/// longer one is a loop.
const MAX_CHAIN: usize = 8;

/// Reads `datagram` as the answer to (`id`, `name`, `qtype`). Only records owned by the name asked,
/// or by a name its CNAME records lead to, count: anything else in the answer section is another
/// name's, and would let a resolver's (or a forger's) extra records decide where an allowed name
/// is dialled.
pub fn read_answer(datagram: &[u8], id: u16, name: &Name, qtype: u16) -> Reading {
    let Ok(message) = Message::from_vec(datagram) else {
        return Reading::NotOurs;
    };
    let head = &message.metadata;
    let asked = RecordType::from(qtype);
    let ours = head.id == id
        && head.message_type == MessageType::Response
        && message.queries.len() == 1
        && message.queries[0].name() == name
        && message.queries[0].query_type() == asked;
    if !ours {
        return Reading::NotOurs;
    }
    if head.truncation {
        return Reading::Truncated;
    }
    if head.response_code != ResponseCode::NoError {
        return Reading::Answer(Addresses::default());
    }
    let mut owners = vec![name.clone()];
    let mut ttl = u32::MAX;
    for _ in 0..MAX_CHAIN {
        let last = owners.last().expect("owners starts with the name asked");
        let Some((target, record_ttl)) =
            message
                .answers
                .iter()
                .find_map(|record| match &record.data {
                    RData::CNAME(cname) if &record.name == last => {
                        Some((cname.0.clone(), record.ttl))
                    }
                    _ => None,
                })
        else {
            break;
        };
        ttl = ttl.min(record_ttl);
        if owners.contains(&target) {
            break;
        }
        owners.push(target);
    }
    let mut addresses = Vec::new();
    for record in message.answers.iter().filter(|r| owners.contains(&r.name)) {
        let ip = match (&record.data, asked) {
            (RData::A(a), RecordType::A) => IpAddr::V4(a.0),
            (RData::AAAA(aaaa), RecordType::AAAA) => IpAddr::V6(aaaa.0),
            _ => continue,
        };
        ttl = ttl.min(record.ttl);
        addresses.push(ip);
    }
    let ttl = if addresses.is_empty() { 0 } else { ttl };
    Reading::Answer(Addresses {
        addresses,
        ttl: Duration::from_secs(u64::from(ttl)),
    })
}

/// One question to `server`: over UDP, and again over TCP when the answer was truncated. `None`
/// when the server did not answer.
async fn query(server: SocketAddr, text: &str, name: &Name, qtype: u16) -> Option<Addresses> {
    let id: u16 = rand::random();
    let query = build_query(id, text, qtype);
    let deadline = tokio::time::Instant::now() + QUERY_TIMEOUT;
    match tokio::time::timeout_at(deadline, over_udp(server, &query, id, name, qtype)).await {
        Ok(Some(Reading::Answer(addresses))) => Some(addresses),
        Ok(Some(Reading::Truncated)) => {
            let over_tcp = over_tcp(server, &query, id, name, qtype);
            match tokio::time::timeout(QUERY_TIMEOUT, over_tcp).await {
                Ok(Some(Reading::Answer(addresses))) => Some(addresses),
                _ => None,
            }
        }
        _ => None,
    }
}

async fn over_udp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    name: &Name,
    qtype: u16,
) -> Option<Reading> {
    let bind: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(bind).await.ok()?;
    socket.connect(server).await.ok()?;
    socket.send(query).await.ok()?;
    let mut buf = vec![0u8; 1500];
    loop {
        let n = socket.recv(&mut buf).await.ok()?;
        match read_answer(&buf[..n], id, name, qtype) {
            Reading::NotOurs => continue,
            reading => return Some(reading),
        }
    }
}

async fn over_tcp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    name: &Name,
    qtype: u16,
) -> Option<Reading> {
    let mut stream = tokio::net::TcpStream::connect(server).await.ok()?;
    crate::dns::write_message(&mut stream, query).await.ok()?;
    let answer = crate::dns::read_message(&mut stream).await?;
    match read_answer(&answer, id, name, qtype) {
        // Over TCP an answer is never cut short; one still marked so is not trusted whole.
        Reading::Answer(addresses) => Some(Reading::Answer(addresses)),
        _ => None,
    }
}

const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{OpCode, Query};
    use hickory_proto::rr::Record;
    use hickory_proto::rr::rdata::{A, CNAME};

    fn fqdn(text: &str) -> Name {
        let mut name = Name::from_ascii(text).unwrap();
        name.set_fqdn(true);
        name
    }

    /// A nameserver's answer to (`id`, `asked`, A) carrying `records` (owner, data, ttl).
    fn answer(id: u16, asked: &str, records: &[(&str, RData, u32)]) -> Message {
        let mut message = Message::new(id, MessageType::Response, OpCode::Query);
        message.add_query(Query::query(fqdn(asked), RecordType::A));
        for (owner, data, ttl) in records {
            message.add_answer(Record::from_rdata(fqdn(owner), *ttl, data.clone()));
        }
        message
    }

    fn a(ip: [u8; 4]) -> RData {
        RData::A(A(ip.into()))
    }

    fn read(message: &Message) -> Reading {
        read_answer(&message.to_vec().unwrap(), 7, &fqdn("api.example"), TYPE_A)
    }

    fn addresses(ips: &[[u8; 4]], ttl: u64) -> Reading {
        Reading::Answer(Addresses {
            addresses: ips.iter().map(|ip| IpAddr::from(*ip)).collect(),
            ttl: Duration::from_secs(ttl),
        })
    }

    #[test]
    fn only_records_of_the_name_asked_or_its_cname_chain_count() {
        let plain = answer(
            7,
            "api.example",
            &[("API.example", a([203, 0, 113, 1]), 60)],
        );
        assert_eq!(read(&plain), addresses(&[[203, 0, 113, 1]], 60));
        let other_owner = answer(
            7,
            "api.example",
            &[
                ("evil.example", a([10, 0, 0, 1]), 60),
                ("api.example", a([203, 0, 113, 2]), 30),
            ],
        );
        assert_eq!(read(&other_owner), addresses(&[[203, 0, 113, 2]], 30));
        let chain = answer(
            7,
            "api.example",
            &[
                (
                    "api.example",
                    RData::CNAME(CNAME(fqdn("edge.cdn.example"))),
                    20,
                ),
                ("edge.cdn.example", a([203, 0, 113, 3]), 300),
                ("unrelated.example", a([10, 0, 0, 2]), 300),
            ],
        );
        assert_eq!(read(&chain), addresses(&[[203, 0, 113, 3]], 20));
        let looped = answer(
            7,
            "api.example",
            &[
                ("api.example", RData::CNAME(CNAME(fqdn("b.example"))), 20),
                ("b.example", RData::CNAME(CNAME(fqdn("api.example"))), 20),
            ],
        );
        assert_eq!(read(&looped), addresses(&[], 0));
    }

    #[test]
    fn another_id_or_question_is_not_the_answer_and_a_truncated_one_is_asked_again() {
        let wrong_id = answer(
            8,
            "api.example",
            &[("api.example", a([203, 0, 113, 1]), 60)],
        );
        assert_eq!(read(&wrong_id), Reading::NotOurs);
        let wrong_question = answer(7, "evil.example", &[("evil.example", a([10, 0, 0, 1]), 60)]);
        assert_eq!(read(&wrong_question), Reading::NotOurs);
        let mut truncated = answer(7, "api.example", &[]);
        truncated.metadata.truncation = true;
        assert_eq!(read(&truncated), Reading::Truncated);
        let mut nxdomain = answer(7, "api.example", &[]);
        nxdomain.metadata.response_code = ResponseCode::NXDomain;
        assert_eq!(read(&nxdomain), addresses(&[], 0));
        assert_eq!(
            read_answer(b"garbage", 7, &fqdn("api.example"), TYPE_A),
            Reading::NotOurs
        );
    }

    #[test]
    fn reads_nameservers_from_resolv_conf() {
        let conf = "# comment\nsearch svc.cluster.local\nnameserver 127.0.0.11\nnameserver fe80::1%eth0\noptions ndots:0\n";
        assert_eq!(
            nameservers_of(conf),
            vec![
                "127.0.0.11:53".parse().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
    }
}
