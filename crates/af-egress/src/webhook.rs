//! Delivering a webhook to a service inside the environment, as a third party would, and
//! recording it.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use af_runtime::{Verdict, WebhookDelivery, WebhookRequest};
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;

use crate::body::full;
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::dial::connect;

/// The most of a service's answer that is returned.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Sends `request` to its service; `Err` says, in words, why it could not be delivered.
pub async fn deliver(
    request: &WebhookRequest,
    targets: &BTreeMap<String, String>,
    shared: &Shared,
    caller: SocketAddr,
) -> Result<WebhookDelivery, String> {
    let Some(target) = targets.get(&request.service) else {
        let known: Vec<&str> = targets.keys().map(String::as_str).collect();
        return Err(format!(
            "no service {:?} takes webhooks here; known: {}",
            request.service,
            known.join(", ")
        ));
    };
    if !request.path.starts_with('/') {
        return Err(format!("the path {:?} must start with '/'", request.path));
    }
    let method = Method::from_bytes(request.method.as_bytes())
        .map_err(|_| format!("{:?} is not an HTTP method", request.method))?;
    let addr = resolve_target(target, shared)
        .await
        .ok_or_else(|| format!("{target} does not resolve"))?;
    let mut pending = Pending::new(
        &shared.environment,
        caller,
        "webhook",
        method.as_str(),
        &request.service,
        addr.port(),
    );
    pending.set_resolved(addr);
    let result = send(request, method, addr, target, shared).await;
    let (up, down) = match &result {
        Ok(delivery) => (request.body.len() as u64, delivery.body.len() as u64),
        Err(_) => (0, 0),
    };
    pending.finish(&shared.log, Verdict::Allow, "webhook", up, down);
    result
}

/// `host:port` as an address: a literal as it is, a name through the sidecar's resolver.
async fn resolve_target(target: &str, shared: &Shared) -> Option<SocketAddr> {
    if let Ok(addr) = target.parse::<SocketAddr>() {
        return Some(addr);
    }
    let (host, port) = target.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let ip = *shared
        .resolver
        .resolve(&host.to_ascii_lowercase())
        .await
        .first()?;
    Some(SocketAddr::new(ip, port))
}

async fn send(
    request: &WebhookRequest,
    method: Method,
    addr: SocketAddr,
    host: &str,
    shared: &Shared,
) -> Result<WebhookDelivery, String> {
    let stream = connect(addr, shared.limits.connect_timeout())
        .await
        .map_err(|e| format!("cannot reach {host}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("cannot talk HTTP to {host}: {e}"))?;
    tokio::spawn(connection);
    let mut builder = Request::builder()
        .method(method)
        .uri(&request.path)
        .header(http::header::HOST, host);
    for (name, value) in &request.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a header name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("the value of {name} is not a header value"))?;
        builder = builder.header(name, value);
    }
    let outgoing = builder
        .body(full(request.body.clone()))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(outgoing)
        .await
        .map_err(|e| format!("{host} did not answer: {e}"))?;
    let status = response.status().as_u16();
    let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| format!("reading {host}'s answer: {e}"))?
        .to_bytes();
    Ok(WebhookDelivery {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
