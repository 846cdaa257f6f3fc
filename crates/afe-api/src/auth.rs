//! The bearer token every route but health needs. Compared in constant time, so the time an
//! answer takes says nothing about how much of a guess was right.

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::{ApiCode, ApiError};

/// Routes anyone may call: a load balancer's and a kubelet's probes carry no token.
pub const PUBLIC_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// The server's token, or none on a laptop started with `--insecure-no-auth`.
#[derive(Clone)]
pub struct Token(Option<Vec<u8>>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Token(set)"
        } else {
            "Token(none)"
        })
    }
}

impl Token {
    pub fn required(token: &str) -> Token {
        Token(Some(token.as_bytes().to_vec()))
    }

    /// No authentication at all: for one person on one machine.
    pub fn insecure_none() -> Token {
        Token(None)
    }

    /// Whether `header` (the Authorization header's value) carries the token.
    pub fn admits(&self, header: Option<&[u8]>) -> bool {
        let Some(expected) = &self.0 else {
            return true;
        };
        let Some(given) = header.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        // Lengths differ: unequal, and only the length is learned (a token's length is no
        // secret worth the trouble; its bytes are compared in constant time).
        given.ct_eq(expected).into()
    }
}

/// The cookie the web UI keeps a signed-in person's token in (hex-encoded, so any token fits).
pub const SESSION_COOKIE: &str = "afe_session";

/// The token in a request's session cookie, if it has one.
pub fn session_token(headers: &HeaderMap) -> Option<String> {
    let unhex = |text: &str| -> Option<Vec<u8>> {
        if !text.len().is_multiple_of(2) {
            return None;
        }
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
            .collect()
    };
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .and_then(|(_, value)| unhex(value))
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|token| !token.is_empty())
}

/// Whether a browser's request comes from a page of this server: no Origin (not a browser's
/// cross-site request), or an Origin whose host is this Host.
pub fn same_origin(headers: &HeaderMap) -> bool {
    match (headers.get(ORIGIN), headers.get(HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://").map(|(_, rest)| rest.to_string()))
            .is_some_and(|o| host.to_str().is_ok_and(|h| h == o)),
        (Some(_), None) => false,
    }
}

/// A browser signed in to the web UI reads (GET: the views' data, the live streams, whose
/// WebSocket a browser cannot give a header) with its session cookie instead of the header; the
/// cookie is SameSite=Strict, and a request from another origin is refused all the same. Every
/// request that changes something needs the header.
fn admits_session(token: &Token, request: &Request) -> bool {
    request.method() == Method::GET
        && same_origin(request.headers())
        && session_token(request.headers())
            .is_some_and(|session| token.admits(Some(format!("Bearer {session}").as_bytes())))
}

pub async fn require_token(State(token): State<Token>, request: Request, next: Next) -> Response {
    if PUBLIC_PATHS.contains(&request.uri().path())
        || token.admits(request.headers().get(AUTHORIZATION).map(|v| v.as_bytes()))
        || admits_session(&token, &request)
    {
        return next.run(request).await;
    }
    ApiError::new(
        ApiCode::Unauthorized,
        "this route needs the server's bearer token, and the request did not carry it",
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_is_admitted() {
        let token = Token::required("s3cret-token");
        assert!(token.admits(Some(b"Bearer s3cret-token")));
        for wrong in [
            &b"Bearer s3cret-tokeN"[..],
            b"Bearer s3cret-token ",
            b"Bearer s3cret",
            b"bearer s3cret-token",
            b"s3cret-token",
            b"Bearer ",
            b"",
        ] {
            assert!(!token.admits(Some(wrong)), "{wrong:?}");
        }
        assert!(!token.admits(None));
        assert!(Token::insecure_none().admits(None));
        assert_eq!(format!("{token:?}"), "Token(set)");
    }
}
