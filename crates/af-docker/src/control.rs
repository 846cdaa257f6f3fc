//! Talking to the sidecar's control API from the host side: the decision log, the inbox, webhook
//! delivery. Plain HTTP/1.1 over the egress network, with the environment's bearer token.

use af_runtime::{DecisionQuery, DecisionRecord, InboxEntry, WebhookDelivery, WebhookRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{DockerError, platform};
use crate::sidecar::Sidecar;

/// One request, answered whole; (status, body).
async fn request(
    sidecar: &Sidecar,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), DockerError> {
    let operation = || {
        format!(
            "{method} {path} on the sidecar's control API ({})",
            sidecar.control
        )
    };
    let mut stream = tokio::net::TcpStream::connect(&sidecar.control)
        .await
        .map_err(|e| platform(operation(), e))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: sidecar\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        sidecar.token,
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| platform(operation(), e))?;
    stream
        .write_all(body.as_bytes())
        .await
        .map_err(|e| platform(operation(), e))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| platform(operation(), e))?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| platform(operation(), "no HTTP answer"))?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| platform(operation(), "no status"))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    if status >= 400 {
        return Err(platform(operation(), format!("{status}: {}", body.trim())));
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

fn query_string(query: &DecisionQuery) -> String {
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
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

pub async fn decisions(
    sidecar: &Sidecar,
    query: &DecisionQuery,
) -> Result<Vec<DecisionRecord>, DockerError> {
    let (_, body) = request(
        sidecar,
        "GET",
        &format!("/v1/decisions{}", query_string(query)),
        "",
    )
    .await?;
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| platform("reading the decision log", e)))
        .collect()
}

pub async fn inbox(sidecar: &Sidecar) -> Result<Vec<InboxEntry>, DockerError> {
    let (_, body) = request(sidecar, "GET", "/v1/inbox", "").await?;
    serde_json::from_str(&body).map_err(|e| platform("reading the inbox", e))
}

pub async fn trigger_webhook(
    sidecar: &Sidecar,
    webhook: &WebhookRequest,
) -> Result<WebhookDelivery, DockerError> {
    let body = serde_json::to_string(webhook).map_err(|e| platform("writing the webhook", e))?;
    let (_, answer) = request(sidecar, "POST", "/v1/webhooks", &body).await?;
    serde_json::from_str(&answer).map_err(|e| platform("reading the webhook's delivery", e))
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
    fn queries_become_query_strings() {
        assert_eq!(query_string(&DecisionQuery::default()), "");
        let query = DecisionQuery {
            verdict: Some(af_runtime::Verdict::Deny),
            host: Some("a.example".into()),
            since: None,
        };
        assert_eq!(query_string(&query), "?verdict=deny&host=a.example");
    }
}
