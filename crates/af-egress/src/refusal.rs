//! The sidecar's own answers to a workload: every HTTP answer it makes instead of the origin's
//! (a denial, a request it cannot forward, an origin it could not reach or that did not answer,
//! a captured host it cannot answer here). Whoever reads one is a service's log or an agent in a
//! ticket, not someone at the `af` command line, so each carries its AF-RUN code — in its text and
//! in the `x-af-error` header, for a program to act on without parsing words — and says what to do
//! next. The codes are listed in docs/errors.md.
//!
//! Building an answer is pure (what to say); [`Refusal::into_response`] only dresses it as HTTP.

use std::fmt;
use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};

use crate::body::{ProxyBody, full};
use crate::policy::{DenyReason, Target};
use crate::upstream_http::UpstreamError;

/// Tells a client which verdict the sidecar reached, on every answer it makes itself.
pub const VERDICT_HEADER: HeaderName = HeaderName::from_static("x-af-verdict");

/// Tells a client the AF-RUN code of an answer the sidecar made instead of the origin.
pub const ERROR_HEADER: HeaderName = HeaderName::from_static("x-af-error");

/// The codes of the sidecar's own answers to workloads. Never renumbered or reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::EnumIter, strum::IntoStaticStr)]
pub enum AnswerCode {
    /// The egress policy denied the destination.
    #[strum(serialize = "AF-RUN-052")]
    Denied,
    /// The request is not one the sidecar can forward (not absolute-form, no Host, https:// as a
    /// request, CONNECT without a port, CONNECT on the transparent port).
    #[strum(serialize = "AF-RUN-053")]
    NotForwardable,
    /// An allowed destination could not be connected to.
    #[strum(serialize = "AF-RUN-054")]
    Unreachable,
    /// An allowed origin was reached but did not answer: it closed, broke HTTP/1, or went silent.
    #[strum(serialize = "AF-RUN-055")]
    NoAnswer,
    /// A captured host the sidecar cannot answer on this connection.
    #[strum(serialize = "AF-RUN-056")]
    CaptureCannotAnswer,
    /// An HTTP request that names its host in two ways that disagree: two Host fields, userinfo,
    /// or a Host field other than the URL's host.
    #[strum(serialize = "AF-RUN-057")]
    AmbiguousHost,
}

impl AnswerCode {
    /// Every code, in number order: docs/errors.md is checked against this list.
    pub fn all() -> impl Iterator<Item = AnswerCode> {
        <AnswerCode as strum::IntoEnumIterator>::iter()
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for AnswerCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One answer the sidecar makes instead of the origin.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: AnswerCode,
    /// `x-af-verdict`, when the answer is a decision's (deny).
    pub verdict: Option<&'static str>,
    /// What happened.
    pub what: String,
    /// What to do next.
    pub next: String,
}

impl Refusal {
    /// A destination the policy denied: 403.
    pub fn denied(target: &Target, reason: &DenyReason) -> Refusal {
        Refusal {
            status: StatusCode::FORBIDDEN,
            code: AnswerCode::Denied,
            verdict: Some("deny"),
            what: format!("{target} is not allowed from this environment ({reason})"),
            next: next_step(reason).to_string(),
        }
    }

    /// A host that is neither a name nor an address: 400, recorded as denied.
    pub fn invalid_host() -> Refusal {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            code: AnswerCode::Denied,
            verdict: Some("deny"),
            what: "the host is not a valid name or address".to_string(),
            next: next_step(&DenyReason::InvalidHost).to_string(),
        }
    }

    /// A request that names its host ambiguously (`reason` says how): 400, recorded as denied.
    pub fn ambiguous_host(reason: &DenyReason) -> Refusal {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            code: AnswerCode::AmbiguousHost,
            verdict: Some("deny"),
            what: format!("the request names its host in two ways ({reason})"),
            next: next_step(reason).to_string(),
        }
    }

    /// A request the sidecar cannot forward; `what` says what was wrong, `next` what to send.
    pub fn not_forwardable(status: StatusCode, what: &str, next: &str) -> Refusal {
        Refusal {
            status,
            code: AnswerCode::NotForwardable,
            verdict: None,
            what: what.to_string(),
            next: next.to_string(),
        }
    }

    /// An allowed destination the sidecar could not connect to: 502.
    pub fn unreachable(addr: SocketAddr, err: &std::io::Error) -> Refusal {
        Refusal {
            status: StatusCode::BAD_GATEWAY,
            code: AnswerCode::Unreachable,
            verdict: None,
            what: format!("the sidecar could not reach {addr}: {err}"),
            next: "the destination is allowed; check that it is up and listening on that port, \
                   from the sidecar's network"
                .to_string(),
        }
    }

    /// An allowed origin that did not answer: 504 when it went silent, else 502.
    pub fn no_answer(addr: SocketAddr, err: &UpstreamError) -> Refusal {
        let (status, next) = match err {
            UpstreamError::Silent(_) => (
                StatusCode::GATEWAY_TIMEOUT,
                "the origin was reached but sent nothing for the sidecar's \
                 limits.upstream_read_timeout_ms; check the origin, or raise that limit in the \
                 sidecar's configuration",
            ),
            UpstreamError::RequestBody(_) => (
                StatusCode::BAD_GATEWAY,
                "the request's own body broke off while it was sent; send the request again",
            ),
            _ => (
                StatusCode::BAD_GATEWAY,
                "the origin was reached but its answer was cut off or not HTTP/1; check the \
                 origin (the decision log, `af net log`, has the request)",
            ),
        };
        Refusal {
            status,
            code: AnswerCode::NoAnswer,
            verdict: None,
            what: format!("{addr} did not answer: {err}"),
            next: next.to_string(),
        }
    }

    /// A captured host reached over TLS by a sidecar without a capture CA: 502.
    pub fn capture_without_ca(target: &Target, note: &str) -> Refusal {
        Refusal {
            status: StatusCode::BAD_GATEWAY,
            code: AnswerCode::CaptureCannotAnswer,
            verdict: None,
            what: format!("{target} is captured; {note}"),
            next: "send captured hosts plain http:// requests, or give the environment a capture \
                   CA (tls_capture) its services trust"
                .to_string(),
        }
    }

    /// A request on a connection captured for `captured` that names `other`: 421.
    pub fn misdirected(captured: &str, other: &str) -> Refusal {
        Refusal {
            status: StatusCode::MISDIRECTED_REQUEST,
            code: AnswerCode::CaptureCannotAnswer,
            verdict: None,
            what: format!("this connection was captured for {captured}; the request names {other}"),
            next: format!("open a new connection for {other}"),
        }
    }

    /// The answer's body: the code and what happened, then what to do.
    pub fn text(&self) -> String {
        format!(
            "af egress {}: {}\nDo: {}\n",
            self.code, self.what, self.next
        )
    }

    pub fn into_response(self) -> Response<ProxyBody> {
        let mut response = Response::new(full(Bytes::from(self.text())));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(ERROR_HEADER, HeaderValue::from_static(self.code.as_str()));
        if let Some(verdict) = self.verdict {
            headers.insert(VERDICT_HEADER, HeaderValue::from_static(verdict));
        }
        response
    }
}

/// What a workload denied for `reason` can do about it.
fn next_step(reason: &DenyReason) -> &'static str {
    match reason {
        DenyReason::NotListed => {
            "to reach it, add it to the environment's egress allow list (af: `egress.allow` in \
             af.yaml; afe: the flow's `spec.sandbox.egress`), or to `egress.capture` to have it \
             answered and recorded instead; `af net log` lists every decision"
        }
        DenyReason::IpLiteral => {
            "use the host's name, or allow the address itself or its network (CIDR) in \
             `egress.allow`"
        }
        DenyReason::ForbiddenAddress { .. } => {
            "the name resolved only to addresses the sidecar never dials unless a rule names them \
             (DNS rebinding is refused); if the upstream really sits there, allow its address or \
             network (CIDR) in `egress.allow`"
        }
        DenyReason::Unresolvable => {
            "the name is allowed but did not resolve: check its spelling and that the platform's \
             DNS knows it"
        }
        DenyReason::InvalidHost => "name the destination by a host name or an IP address",
        DenyReason::AmbiguousHost(_) => {
            "name the destination once: one Host field, the same host as the URL's (or none, \
             and the sidecar sends the URL's), and no user@ in either; the sidecar decides by \
             that one host and sends exactly it"
        }
        DenyReason::SniMismatch { .. } => {
            "the TLS server name must be the host the CONNECT names (domain fronting is refused)"
        }
        DenyReason::NotTls => {
            "a tunnel must start with TLS; send plain HTTP as absolute-form requests instead"
        }
        DenyReason::NoServerName => "send the server name (SNI) in the TLS ClientHello",
        DenyReason::ClientHelloTimeout => "send the TLS ClientHello as soon as the tunnel opens",
        DenyReason::DnsQueryType => {
            "outside names are answered for A and AAAA only; DNS is not a way out"
        }
        DenyReason::DnsNameNotHostName => {
            "ask for host names only: labels of letters, digits, `-` and `_`"
        }
        DenyReason::DnsMalformed { .. } => {
            "send one question whose name is written whole: labels of at most 63 bytes, 255 in all"
        }
        DenyReason::Mail => "to capture outbound mail, set `egress.mail: capture`",
        DenyReason::CapturedNotRelayed => {
            "a captured host is answered over HTTP or SMTP, never relayed: take it out of \
             `egress.capture`, or name it in `database.host`"
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::address::AddressClass;

    fn name(host: &str) -> Target {
        Target::Name(host.to_string())
    }

    #[test]
    fn every_answer_carries_its_code_in_its_text_and_its_header() {
        let addr: SocketAddr = "203.0.113.10:80".parse().unwrap();
        let refusals = [
            Refusal::denied(&name("api.example"), &DenyReason::NotListed),
            Refusal::invalid_host(),
            Refusal::not_forwardable(StatusCode::BAD_REQUEST, "no Host header", "send one"),
            Refusal::unreachable(addr, &std::io::Error::other("refused")),
            Refusal::no_answer(addr, &UpstreamError::Closed),
            Refusal::capture_without_ca(&name("hooks.example"), "no CA"),
            Refusal::misdirected("hooks.example", "other.example"),
            Refusal::ambiguous_host(&DenyReason::AmbiguousHost(
                crate::request_host::AmbiguousHost::TwoHostFields,
            )),
        ];
        for refusal in refusals {
            let code = refusal.code.as_str();
            let text = refusal.text();
            assert!(text.starts_with(&format!("af egress {code}: ")), "{text}");
            assert!(text.contains("\nDo: "), "{text}");
            let response = refusal.into_response();
            assert_eq!(response.headers()[ERROR_HEADER], code);
        }
    }

    #[test]
    fn a_denial_is_a_403_with_its_verdict_its_reason_and_what_to_do() {
        let refusal = Refusal::denied(&name("api.example"), &DenyReason::NotListed);
        assert_eq!(refusal.status, StatusCode::FORBIDDEN);
        assert_eq!(refusal.code, AnswerCode::Denied);
        let text = refusal.text();
        assert!(
            text.contains("api.example is not allowed from this environment (not-listed)"),
            "{text}"
        );
        assert!(text.contains("egress.allow"), "{text}");
        let response = refusal.into_response();
        assert_eq!(response.headers()[VERDICT_HEADER], "deny");
    }

    #[test]
    fn each_denial_reason_says_its_own_next_step() {
        let rebound = DenyReason::ForbiddenAddress {
            ip: "10.0.0.1".parse().unwrap(),
            class: AddressClass::Private,
        };
        for (reason, hint) in [
            (DenyReason::NotListed, "egress.allow"),
            (DenyReason::IpLiteral, "host's name"),
            (rebound, "CIDR"),
            (DenyReason::Unresolvable, "did not resolve"),
            (DenyReason::InvalidHost, "host name or an IP address"),
            (DenyReason::Mail, "egress.mail: capture"),
        ] {
            assert!(next_step(&reason).contains(hint), "{reason}: {hint}");
        }
    }

    #[test]
    fn an_invalid_host_is_a_400_recorded_as_a_denial() {
        let refusal = Refusal::invalid_host();
        assert_eq!(refusal.status, StatusCode::BAD_REQUEST);
        assert_eq!(refusal.code, AnswerCode::Denied);
        assert_eq!(refusal.verdict, Some("deny"));
        assert!(refusal.text().contains("not a valid name or address"));
    }

    #[test]
    fn a_silent_origin_is_a_504_and_a_broken_one_a_502() {
        let addr: SocketAddr = "203.0.113.10:80".parse().unwrap();
        let silent = Refusal::no_answer(addr, &UpstreamError::Silent(Duration::from_secs(2)));
        assert_eq!(silent.status, StatusCode::GATEWAY_TIMEOUT);
        assert!(silent.next.contains("upstream_read_timeout_ms"));
        let broken = Refusal::no_answer(addr, &UpstreamError::Protocol("bad head"));
        assert_eq!(broken.status, StatusCode::BAD_GATEWAY);
        assert_eq!(broken.code, AnswerCode::NoAnswer);
    }

    #[test]
    fn the_codes_are_distinct_and_follow_the_runtime_codes() {
        let codes: std::collections::BTreeSet<_> = AnswerCode::all().map(|c| c.as_str()).collect();
        assert_eq!(codes.len(), AnswerCode::all().count());
        for code in AnswerCode::all() {
            assert!(
                !af_runtime::RunCode::all().any(|run| run.as_str() == code.as_str()),
                "{code} is a runtime error's code too"
            );
        }
    }
}
