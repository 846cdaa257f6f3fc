//! Egress rules: which destinations a rule names. Deciding a request against them is the sidecar's
//! job; this module only reads and normalizes what the manifest says.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::names::dns_name_problem;

/// One destination an egress list names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostRule {
    /// Exactly this name (lower case, no trailing dot).
    Exact(String),
    /// Any name strictly below this suffix: `*.example.com` holds `api.example.com`, not
    /// `example.com`.
    Wildcard(String),
    /// This address, written as a literal.
    Ip(IpAddr),
    /// Any address in this network. Used for upstreams on private networks, which the sidecar
    /// otherwise never dials.
    Cidr(IpNet),
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostRule::Exact(name) => f.write_str(name),
            HostRule::Wildcard(suffix) => write!(f, "*.{suffix}"),
            HostRule::Ip(ip) => write!(f, "{ip}"),
            HostRule::Cidr(net) => write!(f, "{net}"),
        }
    }
}

impl Serialize for HostRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HostRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_host_rule(&text).map_err(serde::de::Error::custom)
    }
}

/// Reads a rule: a host name, `*.` and a suffix, an IP address, or a CIDR network. Names are
/// folded to lower case and lose a trailing dot, as DNS compares them.
pub fn parse_host_rule(text: &str) -> Result<HostRule, String> {
    let trimmed = text.trim();
    if let Ok(ip) = trimmed.parse::<IpAddr>() {
        return Ok(HostRule::Ip(ip));
    }
    if trimmed.contains('/') {
        let net: IpNet = trimmed
            .parse()
            .map_err(|_| format!("{trimmed:?} is not a CIDR network such as 198.51.100.0/24"))?;
        if net.trunc() != net {
            return Err(format!(
                "{trimmed} has host bits set; the network it names is {}",
                net.trunc()
            ));
        }
        return Ok(HostRule::Cidr(net));
    }
    let name = trimmed.trim_end_matches('.').to_ascii_lowercase();
    if name == "*" {
        return Err("'*' would allow everything, which is no containment at all".to_string());
    }
    if let Some(suffix) = name.strip_prefix("*.") {
        if let Some(problem) = dns_name_problem(suffix) {
            return Err(format!(
                "the wildcard's suffix is not a DNS name: {problem}"
            ));
        }
        if !suffix.contains('.') {
            return Err(format!(
                "*.{suffix} would match every name under a top-level domain; name the domain, such as *.example.{suffix}"
            ));
        }
        return Ok(HostRule::Wildcard(suffix.to_string()));
    }
    if name.contains('*') {
        return Err(
            "a wildcard is only allowed as the whole first label, as in *.example.com".to_string(),
        );
    }
    if let Some(problem) = dns_name_problem(&name) {
        return Err(format!("it is not a host name: {problem}"));
    }
    Ok(HostRule::Exact(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form() {
        assert_eq!(
            parse_host_rule("API.GitHub.com."),
            Ok(HostRule::Exact("api.github.com".into()))
        );
        assert_eq!(
            parse_host_rule("*.pythonhosted.org"),
            Ok(HostRule::Wildcard("pythonhosted.org".into()))
        );
        assert_eq!(
            parse_host_rule("203.0.113.7"),
            Ok(HostRule::Ip("203.0.113.7".parse().unwrap()))
        );
        assert_eq!(
            parse_host_rule("2001:db8::1"),
            Ok(HostRule::Ip("2001:db8::1".parse().unwrap()))
        );
        assert_eq!(
            parse_host_rule("198.51.100.0/24"),
            Ok(HostRule::Cidr("198.51.100.0/24".parse().unwrap()))
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for (text, reason) in [
            ("*", "everything"),
            ("*.com", "top-level"),
            ("api.*.com", "first label"),
            ("a..b", "empty label"),
            ("198.51.100.7/24", "host bits"),
            ("10.0.0.0/33", "CIDR"),
            ("exa mple.com", "not a host name"),
        ] {
            let err = parse_host_rule(text).unwrap_err();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn displays_as_written_normalized() {
        for text in [
            "api.github.com",
            "*.example.com",
            "10.1.2.3",
            "10.0.0.0/8",
            "fd00::/8",
        ] {
            assert_eq!(parse_host_rule(text).unwrap().to_string(), text);
        }
    }
}
