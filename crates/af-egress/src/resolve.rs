//! Resolving allowed names, for the sidecar's own connections. Fixed answers from the
//! configuration come first; the rest are asked of the platform's resolver (the configured
//! nameservers, or those of /etc/resolv.conf — never the sidecar's own responder, which answers
//! every outside name with the sidecar), cached briefly. The queries are made here, over UDP,
//! rather than through the C library, so the binary needs no name-service modules and runs in an
//! image built FROM scratch. Whatever comes back is still classified before it is dialled.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::ResolverConfig;
use crate::dns_wire::{TYPE_A, TYPE_AAAA, build_query, read_response_addresses};

/// Answers from the system resolver, with the time each was fetched.
type AnswerCache = Arc<Mutex<HashMap<String, (Instant, Vec<IpAddr>)>>>;

#[derive(Clone, Debug)]
pub struct Resolver {
    static_hosts: Arc<BTreeMap<String, Vec<IpAddr>>>,
    cache: AnswerCache,
    ttl: Duration,
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
            cache: Arc::new(Mutex::new(HashMap::new())),
            ttl: Duration::from_secs(config.cache_seconds),
            nameservers: Arc::new(nameservers),
        }
    }

    /// The addresses of `name` (lower case), in the resolver's order; empty when it does not
    /// resolve.
    pub async fn resolve(&self, name: &str) -> Vec<IpAddr> {
        if let Some(ips) = self.static_hosts.get(name) {
            return ips.clone();
        }
        if let Some((at, ips)) = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            && at.elapsed() < self.ttl
        {
            return ips.clone();
        }
        let ips = self.ask(name).await;
        if !ips.is_empty() {
            self.cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(name.to_string(), (Instant::now(), ips.clone()));
        }
        ips
    }

    /// Asks each nameserver in turn for A and AAAA records until one answers; IPv4 first.
    async fn ask(&self, name: &str) -> Vec<IpAddr> {
        for server in self.nameservers.iter() {
            let (v4, v6) = tokio::join!(
                query(*server, name, TYPE_A),
                query(*server, name, TYPE_AAAA)
            );
            if v4.is_some() || v6.is_some() {
                return v4
                    .unwrap_or_default()
                    .into_iter()
                    .chain(v6.unwrap_or_default())
                    .collect();
            }
        }
        tracing::debug!(name, "no nameserver answered");
        Vec::new()
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

/// One query over UDP; the addresses of a NOERROR answer, `None` when the server did not answer.
async fn query(server: SocketAddr, name: &str, qtype: u16) -> Option<Vec<IpAddr>> {
    let bind: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(bind).await.ok()?;
    socket.connect(server).await.ok()?;
    let id: u16 = rand_id();
    socket.send(&build_query(id, name, qtype)).await.ok()?;
    let mut buf = vec![0u8; 1500];
    let deadline = tokio::time::Instant::now() + QUERY_TIMEOUT;
    loop {
        let n = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        // Only the answer to this query: same id, and a response.
        if n < 12 || buf[..2] != id.to_be_bytes() || buf[2] & 0x80 == 0 {
            continue;
        }
        return match read_response_addresses(&buf[..n]) {
            Some((0, addresses)) => Some(addresses),
            Some(_) => Some(Vec::new()),
            None => None,
        };
    }
}

const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// A query id nobody off-path can predict from the last one.
fn rand_id() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish() as u16
}

#[cfg(test)]
mod tests {
    use super::*;

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
