//! The decision: given where a request wants to go and the environment's egress policy, allow it,
//! capture it, or deny it. Pure functions over plain data, so every row of the table is a unit
//! test.

use std::fmt;
use std::net::IpAddr;

use af_manifest::{CannedResponse, EgressPolicy, RuleMatch};

use crate::address::{AddressClass, classify};
use crate::request_host::AmbiguousHost;

/// Where a request wants to go, as the client named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A host name: lower case, without a trailing dot.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Target {
    /// Reads a host as it appears in a URI, a Host header, a CONNECT line or an SNI: a name or an
    /// IP literal (IPv6 in brackets or bare). `None` when it is neither.
    pub fn parse(host: &str) -> Option<Target> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Some(Target::Ip(ip));
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        let valid = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        valid.then_some(Target::Name(name))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Name(name) => f.write_str(name),
            Target::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Why a request was denied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DenyReason {
    /// No rule names the destination.
    NotListed,
    /// An IP literal that no rule names.
    IpLiteral,
    /// An allowed name that resolved only to addresses the sidecar never dials.
    ForbiddenAddress { ip: IpAddr, class: AddressClass },
    /// The allowed name did not resolve.
    Unresolvable,
    /// The host is not a valid name or address.
    InvalidHost,
    /// An HTTP request that names its host in two ways that disagree (or could).
    AmbiguousHost(AmbiguousHost),
    /// Inside a CONNECT tunnel, the TLS server name differs from the CONNECT host.
    SniMismatch { sni: String },
    /// A tunnel or TLS connection that did not start with a TLS ClientHello.
    NotTls,
    /// A transparent TLS connection whose ClientHello names no server: nothing to decide by.
    NoServerName,
    /// The client did not finish its ClientHello in time.
    ClientHelloTimeout,
    /// A DNS query type the responder never answers for outside names.
    DnsQueryType,
    /// A DNS name with a label that is not a host name's (letters, digits, `-`, `_`).
    DnsNameNotHostName,
    /// A DNS query whose header was read but whose question was not (`why`).
    DnsMalformed { why: &'static str },
    /// Outbound mail, with mail capture off.
    Mail,
    /// A relay's host that the policy captures: a capture is answered by the sidecar over HTTP or
    /// SMTP, and a relayed protocol is neither.
    CapturedNotRelayed,
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::NotListed => f.write_str("not-listed"),
            DenyReason::IpLiteral => f.write_str("ip-literal"),
            DenyReason::ForbiddenAddress { ip, class } => write!(f, "resolved-to-{class}:{ip}"),
            DenyReason::Unresolvable => f.write_str("unresolvable"),
            DenyReason::InvalidHost => f.write_str("invalid-host"),
            DenyReason::AmbiguousHost(why) => write!(f, "ambiguous-host:{why}"),
            DenyReason::SniMismatch { sni } => write!(f, "sni-mismatch:{sni}"),
            DenyReason::NotTls => f.write_str("not-tls"),
            DenyReason::NoServerName => f.write_str("no-server-name"),
            DenyReason::ClientHelloTimeout => f.write_str("client-hello-timeout"),
            DenyReason::DnsQueryType => f.write_str("dns-query-type"),
            DenyReason::DnsNameNotHostName => f.write_str("dns-name-not-ldh"),
            DenyReason::DnsMalformed { why } => write!(f, "dns-malformed:{why}"),
            DenyReason::Mail => f.write_str("mail-denied"),
            DenyReason::CapturedNotRelayed => f.write_str("captured-host-not-relayed"),
        }
    }
}

/// The verdict for a destination, before any address is resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision<'p> {
    /// Forward to the real destination; `rule` is the matching allow rule as written.
    Allow {
        rule: String,
    },
    /// Answer locally with `response` and record the request.
    Capture {
        rule: String,
        response: &'p CannedResponse,
    },
    Deny {
        reason: DenyReason,
    },
}

/// Decides a destination by the policy's rules ([`EgressPolicy::match_name`] and
/// [`EgressPolicy::match_address`], which `af up` uses too): names by the most specific rule of
/// either list, capture winning a tie; IP literals allowed only by a rule that names the address
/// or a network containing it, never captured, since captures are by name.
pub fn decide<'p>(target: &Target, policy: &'p EgressPolicy) -> Decision<'p> {
    let matched = match target {
        Target::Ip(ip) => policy.match_address(*ip),
        Target::Name(name) => policy.match_name(name),
    };
    match matched {
        RuleMatch::Allow { rule } => Decision::Allow { rule },
        RuleMatch::Capture { rule, response } => Decision::Capture { rule, response },
        RuleMatch::NotListed => Decision::Deny {
            reason: DenyReason::NotListed,
        },
        RuleMatch::IpLiteral => Decision::Deny {
            reason: DenyReason::IpLiteral,
        },
    }
}

/// Chooses the address to dial for an allowed name among those it resolved to: the first public
/// address, or the first one an address rule explicitly permits. The rule that permitted it is
/// returned so the log names it. When none qualifies, the first refused address says why.
pub fn choose_address(
    resolved: &[IpAddr],
    policy: &EgressPolicy,
) -> Result<(IpAddr, Option<String>), DenyReason> {
    for ip in resolved {
        if classify(*ip).is_public() {
            return Ok((*ip, None));
        }
        if let Some(rule) = policy.address_rule(*ip) {
            return Ok((*ip, Some(rule)));
        }
    }
    match resolved.first() {
        Some(ip) => Err(DenyReason::ForbiddenAddress {
            ip: *ip,
            class: classify(*ip),
        }),
        None => Err(DenyReason::Unresolvable),
    }
}

/// Who let a relay's host through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayPermit {
    /// The manifest named the host for this relay; the text says where (`database.host`).
    Named(String),
    /// The policy's allow rule, as written.
    Policy(String),
}

/// Decides a relay's fixed destination: named by the manifest, it is allowed without a rule; else
/// the policy decides it as any other host, except that a capture refuses it.
pub fn decide_relay(
    host: &Target,
    named_by: Option<&str>,
    policy: &EgressPolicy,
) -> Result<RelayPermit, DenyReason> {
    if let Some(named_by) = named_by {
        return Ok(RelayPermit::Named(named_by.to_string()));
    }
    match decide(host, policy) {
        Decision::Allow { rule } => Ok(RelayPermit::Policy(rule)),
        Decision::Capture { .. } => Err(DenyReason::CapturedNotRelayed),
        Decision::Deny { reason } => Err(reason),
    }
}

/// The address a relay dials among those its host resolved to. A host the policy allowed is held
/// to the policy's address rules ([`choose_address`]). A host the manifest named may be at a
/// private address — the runtime, not the workload, fixed it, so there is no rebinding to guard
/// against from inside — but never at this machine's own (loopback, unspecified: the sidecar's
/// control API is there), link-local (the cloud metadata endpoint) or multicast and broadcast
/// addresses, whatever its DNS says.
pub fn relay_address(
    resolved: &[IpAddr],
    permit: &RelayPermit,
    policy: &EgressPolicy,
) -> Result<(IpAddr, Option<String>), DenyReason> {
    if let RelayPermit::Policy(_) = permit {
        return choose_address(resolved, policy);
    }
    let never = |class: AddressClass| {
        matches!(
            class,
            AddressClass::Unspecified
                | AddressClass::Loopback
                | AddressClass::LinkLocal
                | AddressClass::Multicast
                | AddressClass::Broadcast
        )
    };
    if let Some(ip) = resolved.iter().find(|ip| !never(classify(**ip))) {
        return Ok((*ip, None));
    }
    match resolved.first() {
        Some(ip) => Err(DenyReason::ForbiddenAddress {
            ip: *ip,
            class: classify(*ip),
        }),
        None => Err(DenyReason::Unresolvable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use af_manifest::{CaptureRule, parse_host_rule};

    #[test]
    fn a_relay_host_is_named_by_the_manifest_or_decided_by_the_policy() {
        let p = policy(&["db.example.com", "10.9.0.0/16"], &["hooks.example.com"]);
        let host = |h: &str| Target::parse(h).unwrap();
        assert_eq!(
            decide_relay(&host("other.example.net"), Some("database.host"), &p),
            Ok(RelayPermit::Named("database.host".into()))
        );
        assert_eq!(
            decide_relay(&host("db.example.com"), None, &p),
            Ok(RelayPermit::Policy("db.example.com".into()))
        );
        assert_eq!(
            decide_relay(&host("other.example.net"), None, &p),
            Err(DenyReason::NotListed)
        );
        assert_eq!(
            decide_relay(&host("hooks.example.com"), None, &p),
            Err(DenyReason::CapturedNotRelayed)
        );
        assert_eq!(
            decide_relay(&host("10.9.1.2"), None, &p),
            Ok(RelayPermit::Policy("10.9.0.0/16".into()))
        );
    }

    #[test]
    fn a_named_relay_host_may_be_private_but_never_this_machine_or_link_local() {
        let p = policy(&[], &[]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let named = RelayPermit::Named("database.host".into());
        for private in [
            "10.1.2.3",
            "192.168.5.5",
            "100.64.0.9",
            "fd00::5",
            "93.184.216.34",
        ] {
            assert_eq!(
                relay_address(&[ip(private)], &named, &p),
                Ok((ip(private), None)),
                "{private}"
            );
        }
        for never in [
            "127.0.0.1",
            "0.0.0.0",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "224.0.0.1",
        ] {
            assert!(
                matches!(
                    relay_address(&[ip(never)], &named, &p),
                    Err(DenyReason::ForbiddenAddress { .. })
                ),
                "{never}"
            );
        }
        assert_eq!(
            relay_address(&[ip("169.254.169.254"), ip("10.1.2.3")], &named, &p),
            Ok((ip("10.1.2.3"), None)),
            "a forbidden address is skipped, not dialled"
        );
        // The policy's permit keeps the policy's address rules.
        let allowed = RelayPermit::Policy("db.example.com".into());
        assert!(matches!(
            relay_address(&[ip("10.1.2.3")], &allowed, &p),
            Err(DenyReason::ForbiddenAddress { .. })
        ));
        assert_eq!(
            relay_address(&[], &named, &p),
            Err(DenyReason::Unresolvable)
        );
    }

    fn policy(allow: &[&str], capture: &[&str]) -> EgressPolicy {
        EgressPolicy {
            allow: allow.iter().map(|r| parse_host_rule(r).unwrap()).collect(),
            capture: capture
                .iter()
                .map(|r| CaptureRule {
                    host: parse_host_rule(r).unwrap(),
                    response: CannedResponse::default(),
                })
                .collect(),
            ..EgressPolicy::default()
        }
    }

    fn verdict(target: &str, p: &EgressPolicy) -> String {
        match decide(&Target::parse(target).unwrap(), p) {
            Decision::Allow { rule } => format!("allow {rule}"),
            Decision::Capture { rule, .. } => format!("capture {rule}"),
            Decision::Deny { reason } => format!("deny {reason}"),
        }
    }

    #[test]
    fn the_decision_table() {
        let p = policy(
            &[
                "api.github.com",
                "*.pythonhosted.org",
                "203.0.113.7",
                "198.51.100.0/24",
                "*.example.com",
            ],
            &[
                "hooks.slack.example",
                "*.pay.example.com",
                "exact.example.com",
            ],
        );
        let rows = [
            ("api.github.com", "allow api.github.com"),
            ("API.GitHub.com.", "allow api.github.com"),
            ("github.com", "deny not-listed"),
            ("evil-api.github.com", "deny not-listed"),
            ("files.pythonhosted.org", "allow *.pythonhosted.org"),
            ("a.b.pythonhosted.org", "allow *.pythonhosted.org"),
            ("pythonhosted.org", "deny not-listed"),
            ("xpythonhosted.org", "deny not-listed"),
            ("hooks.slack.example", "capture hooks.slack.example"),
            ("charges.pay.example.com", "capture *.pay.example.com"),
            ("www.example.com", "allow *.example.com"),
            ("exact.example.com", "capture exact.example.com"),
            ("203.0.113.7", "allow 203.0.113.7"),
            ("203.0.113.8", "deny ip-literal"),
            ("198.51.100.99", "allow 198.51.100.0/24"),
            ("169.254.169.254", "deny ip-literal"),
            ("[fd00:ec2::254]", "deny ip-literal"),
            ("127.0.0.1", "deny ip-literal"),
            ("8.8.8.8", "deny ip-literal"),
            ("unlisted.test", "deny not-listed"),
        ];
        for (target, expected) in rows {
            assert_eq!(verdict(target, &p), expected, "{target}");
        }
    }

    #[test]
    fn equally_specific_allow_and_capture_resolve_to_capture() {
        let p = policy(&["*.example.com"], &["*.example.com"]);
        assert_eq!(verdict("a.example.com", &p), "capture *.example.com");
    }

    #[test]
    fn invalid_hosts_are_not_targets() {
        for host in ["", "a..b", "exa mple.com", "a/b", &"a".repeat(64)] {
            assert_eq!(Target::parse(host), None, "{host:?}");
        }
    }

    /// An allowed name is dialled only at a public address or one a rule names; every special
    /// range is refused even for an allowed name (DNS rebinding).
    #[test]
    fn addresses_an_allowed_name_may_be_dialled_at() {
        let p = policy(&["198.51.100.0/24"], &[]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            choose_address(&[ip("93.184.216.34")], &p),
            Ok((ip("93.184.216.34"), None))
        );
        assert_eq!(
            choose_address(&[ip("198.51.100.5")], &p),
            Ok((ip("198.51.100.5"), Some("198.51.100.0/24".into())))
        );
        assert_eq!(
            choose_address(&[ip("10.0.0.5"), ip("93.184.216.34")], &p),
            Ok((ip("93.184.216.34"), None)),
            "a forbidden address is skipped, not dialled"
        );
        for forbidden in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "192.0.2.1",
            "::1",
            "fd00:ec2::254",
            "fe80::1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
            "2001::1",
            "ff02::1",
            "::",
            "2001:db8::1",
        ] {
            let err = choose_address(&[ip(forbidden)], &p).unwrap_err();
            assert!(
                matches!(err, DenyReason::ForbiddenAddress { .. }),
                "{forbidden}: {err}"
            );
        }
        assert_eq!(choose_address(&[], &p), Err(DenyReason::Unresolvable));
    }
}
