//! Resolving allowed names, for the sidecar's own connections. Fixed answers from the
//! configuration come first; the rest go to the system resolver (the platform's, never the
//! sidecar's own responder, which answers every outside name with the sidecar), cached briefly.
//! Whatever comes back is still classified before it is dialled.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::ResolverConfig;

/// Answers from the system resolver, with the time each was fetched.
type AnswerCache = Arc<Mutex<HashMap<String, (Instant, Vec<IpAddr>)>>>;

#[derive(Clone, Debug)]
pub struct Resolver {
    static_hosts: Arc<BTreeMap<String, Vec<IpAddr>>>,
    cache: AnswerCache,
    ttl: Duration,
}

impl Resolver {
    pub fn new(config: &ResolverConfig) -> Resolver {
        let static_hosts = config
            .static_hosts
            .iter()
            .map(|(name, ips)| (name.trim_end_matches('.').to_ascii_lowercase(), ips.clone()))
            .collect();
        Resolver {
            static_hosts: Arc::new(static_hosts),
            cache: Arc::new(Mutex::new(HashMap::new())),
            ttl: Duration::from_secs(config.cache_seconds),
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
        let ips: Vec<IpAddr> = match tokio::net::lookup_host((name, 0)).await {
            Ok(addrs) => addrs.map(|a| a.ip()).collect(),
            Err(err) => {
                tracing::debug!(name, error = %err, "name did not resolve");
                Vec::new()
            }
        };
        if !ips.is_empty() {
            self.cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(name.to_string(), (Instant::now(), ips.clone()));
        }
        ips
    }
}
