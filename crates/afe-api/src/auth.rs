//! The bearer token every route but health needs. Compared in constant time, so the time an
//! answer takes says nothing about how much of a guess was right.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
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

pub async fn require_token(State(token): State<Token>, request: Request, next: Next) -> Response {
    if PUBLIC_PATHS.contains(&request.uri().path())
        || token.admits(request.headers().get(AUTHORIZATION).map(|v| v.as_bytes()))
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
