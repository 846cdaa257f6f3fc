//! A client of the sidecar's control API, over any byte stream: a TCP connection to its address on
//! the egress network (Docker), or a port-forward to its pod (Kubernetes). Plain HTTP/1.1 with the
//! environment's bearer token. Errors are typed ([`ControlError`]) and say themselves as sentences
//! the runtime wraps in its own.

use std::time::Duration;

use crate::records::{DecisionQuery, DecisionRecord, InboxEntry, WebhookDelivery};
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// How long one request may take, from the handshake to the body's last byte: the control API
/// answers from memory and from the decision log's file, well inside it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a control request got no usable answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ControlError {
    /// The request could not be written (a method or path HTTP cannot carry): af's own fault.
    #[error("building the request: {0}")]
    Request(String),
    /// The connection failed or closed before the answer was whole.
    #[error("{0}")]
    Connection(String),
    /// Nothing whole came back in time.
    #[error("no answer within {} s", .0.as_secs())]
    Timeout(Duration),
    /// The sidecar answered with an error status.
    #[error("{status}: {body}")]
    Status { status: u16, body: String },
    /// The answer's body is not what the endpoint returns.
    #[error("{0}")]
    Unreadable(String),
}

/// One request over `stream`, answered whole: the status and the body. A status of 400 or more is
/// an error carrying the body. HTTP/1.1 through hyper's client, bounded by [`REQUEST_TIMEOUT`].
pub async fn request<S>(
    stream: S,
    token: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), ControlError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    request_within(stream, token, method, path, body, REQUEST_TIMEOUT).await
}

/// [`request`], bounded by `timeout`.
pub async fn request_within<S>(
    stream: S,
    token: &str,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Result<(u16, String), ControlError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let method =
        Method::from_bytes(method.as_bytes()).map_err(|e| ControlError::Request(e.to_string()))?;
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "sidecar")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .map_err(|e| ControlError::Request(e.to_string()))?;
    let exchange = async {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ControlError::Connection(e.to_string()))?;
        let driving = tokio::spawn(connection);
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| ControlError::Connection(e.to_string()))?;
        let status = response.status().as_u16();
        // The whole body first, then text: a chunk boundary may fall inside a character.
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| ControlError::Connection(format!("reading the answer: {e}")))?
            .to_bytes();
        driving.abort();
        Ok::<_, ControlError>((status, String::from_utf8_lossy(&bytes).into_owned()))
    };
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ControlError::Timeout(timeout))??;
    if status >= 400 {
        return Err(ControlError::Status {
            status,
            body: body.trim().to_string(),
        });
    }
    Ok((status, body))
}

/// `value` as a query value: every byte but the unreserved ones (RFC 3986 section 2.3)
/// percent-encoded, so a host or a time cannot add parameters or end the path.
fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The path of the decisions matching `query`.
pub fn decisions_path(query: &DecisionQuery) -> String {
    let mut parts = Vec::new();
    if let Some(verdict) = query.verdict {
        parts.push(format!(
            "verdict={}",
            serde_json::to_value(verdict)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        ));
    }
    if let Some(host) = &query.host {
        parts.push(format!("host={}", query_value(host)));
    }
    if let Some(since) = &query.since {
        parts.push(format!("since={}", query_value(since)));
    }
    if parts.is_empty() {
        "/v1/decisions".to_string()
    } else {
        format!("/v1/decisions?{}", parts.join("&"))
    }
}

/// The decisions of a `/v1/decisions` body (JSON lines).
pub fn read_decisions(body: &str) -> Result<Vec<DecisionRecord>, ControlError> {
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .map_err(|e| ControlError::Unreadable(format!("reading the decision log: {e}")))
        })
        .collect()
}

/// The entries of a `/v1/inbox` body.
pub fn read_inbox(body: &str) -> Result<Vec<InboxEntry>, ControlError> {
    serde_json::from_str(body)
        .map_err(|e| ControlError::Unreadable(format!("reading the inbox: {e}")))
}

/// The answer of a `/v1/webhooks` delivery.
pub fn read_delivery(body: &str) -> Result<WebhookDelivery, ControlError> {
    serde_json::from_str(body)
        .map_err(|e| ControlError::Unreadable(format!("reading the webhook's delivery: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on the other end of a duplex stream that reads one request and writes `answer`.
    fn answering(
        answer: &'static [u8],
    ) -> (tokio::io::DuplexStream, tokio::task::JoinHandle<String>) {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let server = tokio::spawn(async move {
            let mut request = vec![0u8; 1024];
            let n = theirs.read(&mut request).await.unwrap();
            theirs.write_all(answer).await.unwrap();
            let _ = theirs.read(&mut request).await;
            String::from_utf8_lossy(&request[..n]).to_string()
        });
        (ours, server)
    }

    /// A mail body whose chunks split a character: read whole, then decoded, never panicking.
    #[tokio::test]
    async fn a_chunk_boundary_inside_a_character_is_read_whole() {
        // "é" is c3 a9: the first chunk ends after c3.
        let (ours, _server) =
            answering(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n[\xc3\r\n2\r\n\xa9]\r\n0\r\n\r\n");
        let (status, body) = request(ours, "t0k3n", "GET", "/v1/inbox", "")
            .await
            .unwrap();
        assert_eq!((status, body.as_str()), (200, "[é]"));
    }

    #[tokio::test]
    async fn a_silent_sidecar_is_given_up_on() {
        let (ours, _theirs) = tokio::io::duplex(4096);
        let err = request_within(ours, "t", "GET", "/v1/inbox", "", Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(err, ControlError::Timeout(Duration::from_millis(50)));
        assert!(err.to_string().starts_with("no answer within"), "{err}");
    }

    #[tokio::test]
    async fn an_error_status_is_an_error_with_its_body() {
        let (ours, _server) =
            answering(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 9\r\n\r\nbad token");
        let err = request(ours, "t", "GET", "/v1/inbox", "")
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "401: bad token");
    }

    #[test]
    fn queries_become_paths() {
        assert_eq!(decisions_path(&DecisionQuery::default()), "/v1/decisions");
        let query = DecisionQuery {
            verdict: Some(crate::records::Verdict::Deny),
            host: Some("a.example".into()),
            since: None,
        };
        assert_eq!(
            decisions_path(&query),
            "/v1/decisions?verdict=deny&host=a.example"
        );
        let hostile = DecisionQuery {
            verdict: None,
            host: Some("a.example&verdict=allow #x".into()),
            since: Some("2026-12-02T05:00:00+01:00".into()),
        };
        assert_eq!(
            decisions_path(&hostile),
            "/v1/decisions?host=a.example%26verdict%3Dallow%20%23x&since=2026-12-02T05%3A00%3A00%2B01%3A00"
        );
    }

    #[tokio::test]
    async fn a_request_goes_over_any_stream() {
        let (ours, server) =
            answering(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n");
        let (status, body) = request(ours, "t0k3n", "GET", "/v1/inbox", "")
            .await
            .unwrap();
        assert_eq!((status, body.as_str()), (200, "[]"));
        let sent = server.await.unwrap();
        assert!(
            sent.starts_with("GET /v1/inbox HTTP/1.1\r\n")
                && sent.contains("authorization: Bearer t0k3n"),
            "{sent}"
        );
    }
}
