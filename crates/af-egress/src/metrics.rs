//! Counters for the control API's `/metrics`, in the Prometheus text format. Decisions are counted
//! by the decision log; these are the rest.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use af_runtime::Verdict;

use crate::context::InFlight;
use crate::decision_log::DecisionLog;
use crate::inbox::Inbox;

#[derive(Debug, Default)]
struct Counters {
    connections_open: AtomicU64,
    connections_total: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    dns_answered: AtomicU64,
    dns_forwarded: AtomicU64,
    dns_refused: AtomicU64,
    dns_malformed: AtomicU64,
    dns_joined: AtomicU64,
    upstream_retried: AtomicU64,
}

#[derive(Debug, Clone, Default)]
pub struct Metrics(Arc<Counters>);

/// An open connection, counted until dropped.
#[derive(Debug)]
pub struct OpenConnection(Metrics);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the DNS responder did with a query.
#[derive(Debug, Clone, Copy)]
pub enum DnsOutcome {
    Answered,
    Forwarded,
    Refused,
    Malformed,
}

impl Metrics {
    pub fn connection_opened(&self) -> OpenConnection {
        self.0.connections_open.fetch_add(1, Ordering::Relaxed);
        self.0.connections_total.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self.clone())
    }

    pub fn bytes(&self, up: u64, down: u64) {
        self.0.bytes_up.fetch_add(up, Ordering::Relaxed);
        self.0.bytes_down.fetch_add(down, Ordering::Relaxed);
    }

    pub fn dns(&self, outcome: DnsOutcome) {
        let counter = match outcome {
            DnsOutcome::Answered => &self.0.dns_answered,
            DnsOutcome::Forwarded => &self.0.dns_forwarded,
            DnsOutcome::Refused => &self.0.dns_refused,
            DnsOutcome::Malformed => &self.0.dns_malformed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A forwarded query answered by an identical one already in flight, not sent again.
    pub fn dns_joined(&self) {
        self.0.dns_joined.fetch_add(1, Ordering::Relaxed);
    }

    /// A request sent again on a new connection after a kept one ended under it unanswered.
    pub fn upstream_retried(&self) {
        self.0.upstream_retried.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self, log: &DecisionLog, inbox: &Inbox, in_flight: &InFlight) -> String {
        let c = &self.0;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = String::new();
        out.push_str("# HELP af_egress_decisions_total Egress decisions, by protocol and verdict.\n# TYPE af_egress_decisions_total counter\n");
        for ((protocol, verdict), count) in log.counts() {
            let verdict = match verdict {
                Verdict::Allow => "allow",
                Verdict::Capture => "capture",
                Verdict::Deny => "deny",
            };
            let _ = writeln!(
                out,
                "af_egress_decisions_total{{protocol=\"{protocol}\",verdict=\"{verdict}\"}} {count}"
            );
        }
        let _ = write!(
            out,
            "# HELP af_egress_connections_open Workload connections open now, tunnels and upgraded connections included (bounded by limits.max_connections).\n# TYPE af_egress_connections_open gauge\naf_egress_connections_open {}\n\
             # HELP af_egress_connections_total Client connections accepted.\n# TYPE af_egress_connections_total counter\naf_egress_connections_total {}\n\
             # HELP af_egress_bytes_total Bytes relayed to and from allowed destinations.\n# TYPE af_egress_bytes_total counter\n\
             af_egress_bytes_total{{direction=\"up\"}} {}\naf_egress_bytes_total{{direction=\"down\"}} {}\n\
             # HELP af_egress_dns_queries_total DNS queries, by what the responder did.\n# TYPE af_egress_dns_queries_total counter\n\
             af_egress_dns_queries_total{{outcome=\"answered\"}} {}\naf_egress_dns_queries_total{{outcome=\"forwarded\"}} {}\n\
             af_egress_dns_queries_total{{outcome=\"refused\"}} {}\naf_egress_dns_queries_total{{outcome=\"malformed\"}} {}\n\
             # HELP af_egress_dns_forwards_joined_total Forwarded queries that joined an identical query already in flight instead of being sent again.\n# TYPE af_egress_dns_forwards_joined_total counter\naf_egress_dns_forwards_joined_total {}\n\
             # HELP af_egress_upstream_retries_total Requests sent again on a new upstream connection after a kept one ended before answering.\n# TYPE af_egress_upstream_retries_total counter\naf_egress_upstream_retries_total {}\n\
             # HELP af_egress_inbox_entries Captured items held.\n# TYPE af_egress_inbox_entries gauge\naf_egress_inbox_entries {}\n\
             # HELP af_egress_inbox_bytes Bytes the captured items held are counted as (bounded by inbox.max_bytes).\n# TYPE af_egress_inbox_bytes gauge\naf_egress_inbox_bytes {}\n\
             # HELP af_egress_inbox_dropped_total Captured items dropped, oldest first, to stay within inbox.max_entries and inbox.max_bytes.\n# TYPE af_egress_inbox_dropped_total counter\naf_egress_inbox_dropped_total {}\n\
             # HELP af_egress_mail_bytes_in_flight Bytes of mail being received now, across SMTP sessions (bounded by limits.max_mail_bytes_in_flight).\n# TYPE af_egress_mail_bytes_in_flight gauge\naf_egress_mail_bytes_in_flight {}\n\
             # HELP af_egress_capture_bytes_in_flight Bytes of captured requests' bodies being read now (bounded by limits.max_capture_bytes_in_flight).\n# TYPE af_egress_capture_bytes_in_flight gauge\naf_egress_capture_bytes_in_flight {}\n\
             # HELP af_egress_resolver_cache_entries Names the sidecar keeps its own lookups of (bounded by resolver.cache_entries).\n# TYPE af_egress_resolver_cache_entries gauge\naf_egress_resolver_cache_entries {}\n",
            get(&c.connections_open),
            get(&c.connections_total),
            get(&c.bytes_up),
            get(&c.bytes_down),
            get(&c.dns_answered),
            get(&c.dns_forwarded),
            get(&c.dns_refused),
            get(&c.dns_malformed),
            get(&c.dns_joined),
            get(&c.upstream_retried),
            inbox.len(),
            inbox.bytes(),
            inbox.dropped(),
            in_flight.mail,
            in_flight.capture,
            in_flight.resolver_cache_entries,
        );
        out
    }
}
