//! What every listener of one sidecar shares.

use af_manifest::EgressPolicy;

use crate::config::Limits;
use crate::decision_log::DecisionLog;
use crate::inbox::Inbox;
use crate::metrics::Metrics;
use crate::resolve::Resolver;

#[derive(Debug)]
pub struct Shared {
    pub environment: String,
    pub policy: EgressPolicy,
    pub resolver: Resolver,
    pub log: DecisionLog,
    pub inbox: Inbox,
    pub metrics: Metrics,
    pub limits: Limits,
}
