//! What every listener of one sidecar shares.

use std::sync::Arc;

use af_manifest::EgressPolicy;

use crate::budget::ByteBudget;
use crate::config::Limits;
use crate::decision_log::DecisionLog;
use crate::inbox::Inbox;
use crate::metrics::Metrics;
use crate::resolve::Resolver;
use crate::tls_capture::CaptureCa;
use crate::upstream_pool::UpstreamPool;

#[derive(Debug)]
pub struct Shared {
    pub environment: String,
    pub policy: EgressPolicy,
    pub resolver: Resolver,
    pub log: DecisionLog,
    pub inbox: Inbox,
    pub metrics: Metrics,
    pub limits: Limits,
    /// Signs certificates for captured names reached over TLS; without it they are refused.
    pub capture_ca: Option<Arc<CaptureCa>>,
    /// Idle connections to allowed upstream addresses, for the next request to the same address.
    pub upstreams: UpstreamPool,
    /// The bytes of mail being received at once, across SMTP sessions.
    pub mail_budget: ByteBudget,
    /// The bytes of captured requests' bodies being read at once, across connections.
    pub capture_budget: ByteBudget,
    /// Workloads' connections open at once: `limits.max_connections` permits.
    pub admissions: Arc<tokio::sync::Semaphore>,
}

/// What workloads make the sidecar hold now, for `/metrics`: bytes, and names it resolved.
#[derive(Debug)]
pub struct InFlight {
    pub mail: usize,
    pub capture: usize,
    pub resolver_cache_entries: usize,
}

impl Shared {
    pub fn in_flight(&self) -> InFlight {
        InFlight {
            mail: self.mail_budget.in_use(),
            capture: self.capture_budget.in_use(),
            resolver_cache_entries: self.resolver.cached_names(),
        }
    }
}
