//! Which rule of an egress policy names a host. The sidecar decides every request by it, and
//! `af up` refuses, by the same function, an external database's host the sidecar would refuse.
//! Resolving names and judging addresses stay the sidecar's.

use std::net::IpAddr;

use crate::egress_rule::HostRule;
use crate::model::{CannedResponse, EgressPolicy};

/// The rule that names a host, or why none does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleMatch<'p> {
    /// An allow rule, as written.
    Allow { rule: String },
    /// A capture rule, as written, and its answer.
    Capture {
        rule: String,
        response: &'p CannedResponse,
    },
    /// A name no rule names.
    NotListed,
    /// An address no allow rule names (captures are by name only).
    IpLiteral,
}

/// How precisely a rule matches a name: an exact name beats any wildcard, and a longer wildcard
/// suffix beats a shorter one.
fn specificity(rule: &HostRule, name: &str) -> Option<(u8, usize)> {
    match rule {
        HostRule::Exact(exact) if exact == name => Some((2, exact.len())),
        HostRule::Wildcard(suffix)
            if name.len() > suffix.len() + 1
                && name.ends_with(suffix.as_str())
                && name.as_bytes()[name.len() - suffix.len() - 1] == b'.' =>
        {
            Some((1, suffix.len()))
        }
        _ => None,
    }
}

impl EgressPolicy {
    /// The rule for `name` (lower case, no trailing dot): the most specific matching rule of
    /// either list, and when an allow and a capture rule are equally specific, capture (it keeps
    /// the request inside).
    pub fn match_name(&self, name: &str) -> RuleMatch<'_> {
        let best_allow = self
            .allow
            .iter()
            .filter_map(|r| specificity(r, name).map(|s| (s, r)))
            .max_by_key(|(s, _)| *s);
        let best_capture = self
            .capture
            .iter()
            .filter_map(|c| specificity(&c.host, name).map(|s| (s, c)))
            .max_by_key(|(s, _)| *s);
        match (best_allow, best_capture) {
            (Some((a, rule)), Some((c, _))) if a > c => RuleMatch::Allow {
                rule: rule.to_string(),
            },
            (_, Some((_, capture))) => RuleMatch::Capture {
                rule: capture.host.to_string(),
                response: &capture.response,
            },
            (Some((_, rule)), None) => RuleMatch::Allow {
                rule: rule.to_string(),
            },
            (None, None) => RuleMatch::NotListed,
        }
    }

    /// The rule for an IP literal: an allow rule naming the address or a network containing it.
    pub fn match_address(&self, ip: IpAddr) -> RuleMatch<'_> {
        match self.address_rule(ip) {
            Some(rule) => RuleMatch::Allow { rule },
            None => RuleMatch::IpLiteral,
        }
    }

    /// The allow rule naming this address or a network containing it, as written.
    pub fn address_rule(&self, ip: IpAddr) -> Option<String> {
        self.allow
            .iter()
            .find(|rule| match rule {
                HostRule::Ip(allowed) => *allowed == ip,
                HostRule::Cidr(net) => net.contains(&ip),
                _ => false,
            })
            .map(ToString::to_string)
    }
}
