//! The one host an HTTP request is decided by, and so the one it is sent to.
//!
//! A request can name its destination twice: in an absolute-form target (`GET http://a/`) and in
//! its `Host` field — and a client can send that field twice, or hide a second name in userinfo
//! (`http://b@a/`). A site behind a shared address (a CDN, a shared ingress) routes by `Host`,
//! so any disagreement between what the sidecar decides by and what it sends would carry the
//! request to a site the policy never decided on, with the log recording the allowed one
//! (smokescreen's rule: decide on the host you then send). The sidecar refuses every such
//! request (AF-RUN-057) rather than pick one of the names: RFC 9112 section 3.2.2 lets a proxy
//! replace `Host` with the target's authority, but a request built to disagree with itself is an
//! attempt to reach somewhere else, and refusing it puts that attempt in the decision log where
//! a rewrite would hide it. A request that passes is sent with `Host` set to the decided
//! authority, written canonically ([`canonical_host`]).

use std::fmt;

use http::Uri;
use http::header::{self, HeaderMap, HeaderValue};

use crate::policy::Target;

/// The port a plain HTTP authority names when it names none.
const HTTP_PORT: u16 = 80;

/// Why a request names its host ambiguously.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AmbiguousHost {
    /// More than one `Host` field (RFC 9112 section 3.2: a server must answer 400).
    TwoHostFields,
    /// Userinfo (`name@`) in the target's authority or in `Host` (RFC 9110 section 4.2.4
    /// deprecates it; here it would put a second name in the one field).
    Userinfo,
    /// `Host` names another authority than the absolute-form target.
    Disagrees { host_field: String },
}

impl fmt::Display for AmbiguousHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmbiguousHost::TwoHostFields => f.write_str("two-host-fields"),
            AmbiguousHost::Userinfo => f.write_str("userinfo"),
            AmbiguousHost::Disagrees { host_field } => write!(f, "host-field:{host_field}"),
        }
    }
}

/// A `Host` field or a target's authority, as (host, port): `None` when it is not one.
fn authority_of(text: &str) -> Option<Result<(String, u16), AmbiguousHost>> {
    if text.contains('@') {
        return Some(Err(AmbiguousHost::Userinfo));
    }
    let authority: http::uri::Authority = text.parse().ok()?;
    let port = authority.port_u16().unwrap_or(HTTP_PORT);
    Some(Ok((authority.host().to_string(), port)))
}

/// Whether two authorities name the same destination: as the policy reads hosts (case and a
/// trailing dot do not matter), and the port, 80 when none is written.
fn same_destination(a: &(String, u16), b: &(String, u16)) -> bool {
    a.1 == b.1
        && match (Target::parse(&a.0), Target::parse(&b.0)) {
            (Some(a), Some(b)) => a == b,
            _ => a.0.eq_ignore_ascii_case(&b.0),
        }
}

/// The one `Host` field of a request: `Ok(None)` without one, refused with two.
fn host_field(headers: &HeaderMap) -> Result<Option<&HeaderValue>, AmbiguousHost> {
    let mut fields = headers.get_all(header::HOST).iter();
    let first = fields.next();
    match fields.next() {
        Some(_) => Err(AmbiguousHost::TwoHostFields),
        None => Ok(first),
    }
}

/// What a request names as its destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamedHost {
    /// One destination, as (host as written, port).
    One(String, u16),
    /// No destination at all: a request on the transparent port without `Host`.
    Nothing,
    /// A `Host` field that is not an authority (nor a name nor an address).
    Unreadable,
    Ambiguous(AmbiguousHost),
}

/// The destination of a forward-proxy request whose target is absolute-form with this
/// `authority` (which the caller has found to be an `http://` one): that authority, when no
/// `Host` field disagrees with it.
pub fn forwarded(authority: &str, headers: &HeaderMap) -> NamedHost {
    // The common case, checked without parsing twice: no Host field, or one that repeats the
    // URL's authority as a client built from the URL writes it.
    let repeated = match host_field(headers) {
        Ok(None) => true,
        Ok(Some(field)) => field.as_bytes().eq_ignore_ascii_case(authority.as_bytes()),
        Err(ambiguous) => return NamedHost::Ambiguous(ambiguous),
    };
    let target = match authority_of(authority) {
        Some(Ok(target)) => target,
        Some(Err(ambiguous)) => return NamedHost::Ambiguous(ambiguous),
        None => return NamedHost::Unreadable,
    };
    if repeated {
        return NamedHost::One(target.0, target.1);
    }
    match agreeing(&target, headers) {
        Ok(()) => NamedHost::One(target.0, target.1),
        Err(ambiguous) => NamedHost::Ambiguous(ambiguous),
    }
}

/// The destination of a request on the transparent port: its one `Host` field, when an
/// absolute-form target (unusual from a client that believes it talks to the origin) does not
/// disagree with it.
pub fn transparent(uri: &Uri, headers: &HeaderMap) -> NamedHost {
    let field = match host_field(headers) {
        Ok(Some(field)) => field,
        Ok(None) => return NamedHost::Nothing,
        Err(ambiguous) => return NamedHost::Ambiguous(ambiguous),
    };
    let named = match field.to_str().ok().and_then(authority_of) {
        Some(Ok(named)) => named,
        Some(Err(ambiguous)) => return NamedHost::Ambiguous(ambiguous),
        None => return NamedHost::Unreadable,
    };
    if let Some(authority) = uri.authority() {
        match authority_of(authority.as_str()) {
            Some(Ok(target)) if same_destination(&target, &named) => {}
            Some(Err(ambiguous)) => return NamedHost::Ambiguous(ambiguous),
            _ => {
                return NamedHost::Ambiguous(AmbiguousHost::Disagrees {
                    host_field: String::from_utf8_lossy(field.as_bytes()).into_owned(),
                });
            }
        }
    }
    NamedHost::One(named.0, named.1)
}

/// Whether the request's `Host` field, if it has one, names `target`.
fn agreeing(target: &(String, u16), headers: &HeaderMap) -> Result<(), AmbiguousHost> {
    let Some(field) = host_field(headers)? else {
        return Ok(());
    };
    let disagrees = || AmbiguousHost::Disagrees {
        host_field: String::from_utf8_lossy(field.as_bytes()).into_owned(),
    };
    match field.to_str().ok().and_then(authority_of) {
        Some(Ok(named)) if same_destination(&named, target) => Ok(()),
        Some(Err(ambiguous)) => Err(ambiguous),
        _ => Err(disagrees()),
    }
}

/// Inside a connection captured for `captured` (TLS, so no absolute form is expected), the host a
/// request names when that is another one: its `Host` field, else its target's authority. Two
/// fields, or userinfo, are ambiguous.
pub fn inside_captured(
    uri: &Uri,
    headers: &HeaderMap,
    captured: &str,
) -> Result<Option<String>, AmbiguousHost> {
    let named = match host_field(headers)? {
        Some(field) => Some(String::from_utf8_lossy(field.as_bytes()).into_owned()),
        None => uri.authority().map(|a| a.as_str().to_string()),
    };
    let Some(named) = named else {
        return Ok(None);
    };
    let host = match authority_of(&named) {
        Some(Ok((host, _))) => host,
        Some(Err(ambiguous)) => return Err(ambiguous),
        None => return Ok(Some(named)),
    };
    let matches = match (Target::parse(&host), Target::parse(captured)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    Ok((!matches).then(|| {
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string()
    }))
}

/// The `Host` field the sidecar sends for a decided destination: the policy's form of the host
/// (lower case, no trailing dot, IPv6 in brackets) and the port when it is not 80.
pub fn canonical_host(target: &Target, port: u16) -> HeaderValue {
    let host = match target {
        Target::Name(name) => name.clone(),
        Target::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        Target::Ip(ip) => ip.to_string(),
    };
    let text = if port == HTTP_PORT {
        host
    } else {
        format!("{host}:{port}")
    };
    // A parsed Target holds only LDH bytes, digits, dots and colons: always a valid value.
    HeaderValue::from_str(&text).expect("a canonical host is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(hosts: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for host in hosts {
            map.append(header::HOST, HeaderValue::from_str(host).unwrap());
        }
        map
    }

    fn one(host: &str, port: u16) -> NamedHost {
        NamedHost::One(host.to_string(), port)
    }

    #[test]
    fn a_forwarded_request_is_sent_to_its_target_when_host_agrees_or_is_absent() {
        let rows = [
            ("a.example", &[][..], one("a.example", 80)),
            ("a.example", &["a.example"][..], one("a.example", 80)),
            ("a.example", &["A.Example.:80"][..], one("a.example", 80)),
            (
                "a.example:8080",
                &["a.example:8080"][..],
                one("a.example", 8080),
            ),
            (
                "[2001:db8::1]",
                &["[2001:db8::1]:80"][..],
                one("[2001:db8::1]", 80),
            ),
            ("203.0.113.7", &["203.0.113.7"][..], one("203.0.113.7", 80)),
        ];
        for (authority, hosts, expected) in rows {
            assert_eq!(
                forwarded(authority, &headers(hosts)),
                expected,
                "{authority} {hosts:?}"
            );
        }
    }

    #[test]
    fn a_forwarded_request_that_names_two_hosts_is_ambiguous() {
        let disagrees = |h: &str| {
            NamedHost::Ambiguous(AmbiguousHost::Disagrees {
                host_field: h.to_string(),
            })
        };
        let rows = [
            ("a.example", &["b.example"][..], disagrees("b.example")),
            (
                "a.example",
                &["a.example:8080"][..],
                disagrees("a.example:8080"),
            ),
            ("a.example:8080", &["a.example"][..], disagrees("a.example")),
            (
                "a.example",
                &["a.example", "b.example"][..],
                NamedHost::Ambiguous(AmbiguousHost::TwoHostFields),
            ),
            (
                "a.example",
                &["a.example", "a.example"][..],
                NamedHost::Ambiguous(AmbiguousHost::TwoHostFields),
            ),
            (
                "b.example@a.example",
                &[][..],
                NamedHost::Ambiguous(AmbiguousHost::Userinfo),
            ),
            (
                "a.example",
                &["b.example@a.example"][..],
                NamedHost::Ambiguous(AmbiguousHost::Userinfo),
            ),
            ("a.example", &["a.example/x"][..], disagrees("a.example/x")),
        ];
        for (authority, hosts, expected) in rows {
            assert_eq!(
                forwarded(authority, &headers(hosts)),
                expected,
                "{authority} {hosts:?}"
            );
        }
    }

    #[test]
    fn a_transparent_request_is_decided_by_its_one_host_field() {
        let origin_form: Uri = "/path".parse().unwrap();
        let absolute: Uri = "http://b.example/path".parse().unwrap();
        let same: Uri = "http://A.example/path".parse().unwrap();
        let rows = [
            (
                &origin_form,
                &["a.example:8080"][..],
                one("a.example", 8080),
            ),
            (&same, &["a.example"][..], one("a.example", 80)),
            (&origin_form, &[][..], NamedHost::Nothing),
            (&origin_form, &["a b"][..], NamedHost::Unreadable),
            (
                &origin_form,
                &["a.example", "b.example"][..],
                NamedHost::Ambiguous(AmbiguousHost::TwoHostFields),
            ),
            (
                &origin_form,
                &["b.example@a.example"][..],
                NamedHost::Ambiguous(AmbiguousHost::Userinfo),
            ),
            (
                &absolute,
                &["a.example"][..],
                NamedHost::Ambiguous(AmbiguousHost::Disagrees {
                    host_field: "a.example".into(),
                }),
            ),
        ];
        for (uri, hosts, expected) in rows {
            assert_eq!(
                transparent(uri, &headers(hosts)),
                expected,
                "{uri} {hosts:?}"
            );
        }
    }

    #[test]
    fn inside_a_captured_connection_only_the_captured_host_is_answered() {
        let path: Uri = "/".parse().unwrap();
        let at = |hosts: &[&str]| inside_captured(&path, &headers(hosts), "api.pay.test");
        assert_eq!(at(&[]), Ok(None));
        assert_eq!(at(&["api.pay.test"]), Ok(None));
        assert_eq!(at(&["API.pay.test:443"]), Ok(None));
        assert_eq!(at(&["other.test"]), Ok(Some("other.test".into())));
        assert_eq!(
            at(&["api.pay.test", "other.test"]),
            Err(AmbiguousHost::TwoHostFields)
        );
        assert_eq!(
            at(&["other.test@api.pay.test"]),
            Err(AmbiguousHost::Userinfo)
        );
    }

    #[test]
    fn the_host_sent_is_the_decided_one_written_canonically() {
        let name = Target::parse("API.Example.").unwrap();
        assert_eq!(canonical_host(&name, 80), "api.example");
        assert_eq!(canonical_host(&name, 8080), "api.example:8080");
        let v6 = Target::parse("[2001:db8::1]").unwrap();
        assert_eq!(canonical_host(&v6, 80), "[2001:db8::1]");
        let v4 = Target::parse("203.0.113.7").unwrap();
        assert_eq!(canonical_host(&v4, 81), "203.0.113.7:81");
    }
}
