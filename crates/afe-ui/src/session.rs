//! Who is looking: the API token a person gave the login form, kept in an HTTP-only,
//! SameSite=Strict cookie (hex-encoded, so any token fits a cookie), and the CSRF token every
//! form that changes something carries — derived from the session's token, so a page of another
//! site can neither read it nor make it.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};

pub const COOKIE_NAME: &str = afe_api::SESSION_COOKIE;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The session's token, from the request's cookies.
pub fn token_of(headers: &HeaderMap) -> Option<String> {
    afe_api::session_token(headers)
}

/// The cookie that keeps `token`.
pub fn keep(token: &str) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{COOKIE_NAME}={}; HttpOnly; SameSite=Strict; Path=/",
        hex(token.as_bytes())
    ))
    .expect("hex is a valid header value")
}

/// The cookie that ends the session.
pub fn forget() -> HeaderValue {
    HeaderValue::from_static("afe_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

/// The CSRF token of a session: a digest of its token, so it is the same on every page of the
/// session and useless without the cookie.
pub fn csrf_for(token: &str) -> String {
    let mut digest = Sha256::new();
    digest.update(b"afe-ui-csrf\0");
    digest.update(token.as_bytes());
    hex(&digest.finalize()[..16])
}

/// A request that changes something is accepted only from a page of this server: its form's
/// CSRF token matches the session's, and its Origin, when the browser sends one, is this host.
pub fn allowed(person: &Person, csrf: &str, headers: &HeaderMap) -> bool {
    use subtle::ConstantTimeEq;
    afe_api::same_origin(headers) && bool::from(csrf.as_bytes().ct_eq(person.csrf.as_bytes()))
}

/// The person behind a request: their token and their CSRF token. Without a session, the
/// request goes to the login form.
#[derive(Clone, Debug)]
pub struct Person {
    pub token: String,
    pub csrf: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Person {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match token_of(&parts.headers) {
            Some(token) => Ok(Person {
                csrf: csrf_for(&token),
                token,
            }),
            None => Err(Redirect::to("/ui/login").into_response()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header::{COOKIE, HOST, ORIGIN};

    #[test]
    fn a_kept_token_is_read_back_and_csrf_depends_on_it() {
        let mut headers = HeaderMap::new();
        let cookie = keep("s3cret; with=odd chars");
        let value = cookie
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string();
        headers.insert(COOKIE, format!("other=1; {value}").parse().unwrap());
        assert_eq!(
            token_of(&headers).as_deref(),
            Some("s3cret; with=odd chars")
        );
        assert!(
            cookie
                .to_str()
                .unwrap()
                .contains("HttpOnly; SameSite=Strict")
        );
        assert_ne!(csrf_for("a"), csrf_for("b"));
        let person = Person {
            token: "a".into(),
            csrf: csrf_for("a"),
        };
        let mut same = HeaderMap::new();
        same.insert(HOST, "afe.example:8080".parse().unwrap());
        same.insert(ORIGIN, "https://afe.example:8080".parse().unwrap());
        assert!(allowed(&person, &csrf_for("a"), &same));
        assert!(!allowed(&person, &csrf_for("b"), &same));
        let mut other = same.clone();
        other.insert(ORIGIN, "https://evil.example".parse().unwrap());
        assert!(!allowed(&person, &csrf_for("a"), &other));
    }
}
