//! A client of the sidecar's control API, over any byte stream: a TCP connection to its address on
//! the egress network (Docker), or a port-forward to its pod (Kubernetes). Plain HTTP/1.1 with the
//! environment's bearer token; errors are sentences, for the runtime to wrap in its own.

use af_runtime::{DecisionQuery, DecisionRecord, InboxEntry, WebhookDelivery};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One request over `stream`, answered whole: the status and the body. A status of 400 or more is
/// an error carrying the body.
pub async fn request<S>(
    mut stream: S,
    token: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: sidecar\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(body.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| "no HTTP answer".to_string())?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "no status".to_string())?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    if status >= 400 {
        return Err(format!("{status}: {}", body.trim()));
    }
    Ok((status, body))
}

/// The payload of a chunked body.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
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
        parts.push(format!("host={host}"));
    }
    if let Some(since) = &query.since {
        parts.push(format!("since={since}"));
    }
    if parts.is_empty() {
        "/v1/decisions".to_string()
    } else {
        format!("/v1/decisions?{}", parts.join("&"))
    }
}

/// The decisions of a `/v1/decisions` body (JSON lines).
pub fn read_decisions(body: &str) -> Result<Vec<DecisionRecord>, String> {
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("reading the decision log: {e}")))
        .collect()
}

/// The entries of a `/v1/inbox` body.
pub fn read_inbox(body: &str) -> Result<Vec<InboxEntry>, String> {
    serde_json::from_str(body).map_err(|e| format!("reading the inbox: {e}"))
}

/// The answer of a `/v1/webhooks` delivery.
pub fn read_delivery(body: &str) -> Result<WebhookDelivery, String> {
    serde_json::from_str(body).map_err(|e| format!("reading the webhook's delivery: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
    }

    #[test]
    fn queries_become_paths() {
        assert_eq!(decisions_path(&DecisionQuery::default()), "/v1/decisions");
        let query = DecisionQuery {
            verdict: Some(af_runtime::Verdict::Deny),
            host: Some("a.example".into()),
            since: None,
        };
        assert_eq!(
            decisions_path(&query),
            "/v1/decisions?verdict=deny&host=a.example"
        );
    }

    #[tokio::test]
    async fn a_request_goes_over_any_stream() {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let server = tokio::spawn(async move {
            let mut request = vec![0u8; 1024];
            let n = theirs.read(&mut request).await.unwrap();
            let text = String::from_utf8_lossy(&request[..n]).to_string();
            theirs
                .write_all(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n",
                )
                .await
                .unwrap();
            text
        });
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
