//! HTTP: the forward proxy (absolute-form requests and CONNECT) and the transparent listener
//! (clients that resolved an outside name to the sidecar and connected to port 80 themselves).
//! Every request is decided, then forwarded, captured or refused, and recorded.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use af_manifest::CannedResponse;
use af_runtime::Verdict;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::accept::Admitted;
use crate::body::{CountedBody, ProxyBody, full};
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::dial::{dial_address, logged_rule};
use crate::policy::{Decision, DenyReason, Target, decide};
use crate::refusal::{Refusal, VERDICT_HEADER};
use crate::request_host::{self, NamedHost};
use crate::upstream_http::{
    ExchangeFailed, GiveBack, Outgoing, UpstreamBody, UpstreamConnection, UpstreamError,
};
use crate::{tunnel, upgrade};

/// Which face of the proxy a listener is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpMode {
    /// Clients configured to use the proxy: absolute-form requests and CONNECT.
    Forward,
    /// Clients that connected to the sidecar as if it were the destination: origin-form requests,
    /// decided by their Host header.
    Transparent,
}

/// The upstream connection a client connection last used, kept for its next request (HTTP/1.1
/// keep-alive on both sides). It is put here when an answer on it has been read whole, which is
/// before the client's next request is read. When the client connection ends, it goes to the
/// sidecar's pool for any client's next request to the same address ([`crate::upstream_pool`]).
type UpstreamSlot = Arc<std::sync::Mutex<Option<UpstreamConnection>>>;

fn lock(slot: &UpstreamSlot) -> std::sync::MutexGuard<'_, Option<UpstreamConnection>> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serves clients on `listener` for ever.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, mode: HttpMode) {
    crate::accept::accept_workloads(
        listener,
        "http",
        shared.clone(),
        |stream, peer, admitted| serve_connection(stream, peer, admitted, shared.clone(), mode),
    )
    .await;
}

/// A client connection's admission (`limits.max_connections`), held by the connection until it
/// becomes a tunnel or an upgraded connection, which takes it along: that outlives the
/// connection's own task, and stays counted while it lasts.
pub(crate) type AdmissionSlot = Arc<std::sync::Mutex<Option<Admitted>>>;

/// Once hyper hands over the client connection a CONNECT or an upgrade turned into, runs `relay`
/// on it — `None` when the client went away first — on a task of its own that takes the
/// connection's admission along: the tunnel outlives the connection's task, and stays counted
/// for as long as it lasts.
pub(crate) fn relay_once_switched<R, Fut>(
    switching: hyper::upgrade::OnUpgrade,
    admission: &AdmissionSlot,
    what: &'static str,
    relay: R,
) where
    R: FnOnce(Option<TokioIo<hyper::upgrade::Upgraded>>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let admitted = admission
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    tokio::spawn(async move {
        let _admitted = admitted;
        let client = switching
            .await
            .inspect_err(
                |err| tracing::debug!(error = %err, what, "the client left before the switch"),
            )
            .ok()
            .map(TokioIo::new);
        relay(client).await;
    });
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    admitted: Admitted,
    shared: Arc<Shared>,
    mode: HttpMode,
) {
    let _ = stream.set_nodelay(true);
    let upstream: UpstreamSlot = Arc::default();
    let admission: AdmissionSlot = Arc::new(std::sync::Mutex::new(Some(admitted)));
    let limits = shared.limits.clone();
    let service = service_fn({
        let (shared, upstream) = (shared.clone(), upstream.clone());
        move |req| {
            let shared = shared.clone();
            let upstream = upstream.clone();
            let admission = admission.clone();
            async move {
                Ok::<_, Infallible>(handle(req, peer, shared, mode, upstream, admission).await)
            }
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout())
        .max_buf_size(limits.max_header_bytes.max(8192))
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    if let Err(err) = connection.await {
        tracing::debug!(%peer, error = %err, "client connection ended with an error");
    }
    if let Some(last) = lock(&upstream).take() {
        shared.upstreams.give_back(last);
    }
}

async fn handle(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mode: HttpMode,
    upstream: UpstreamSlot,
    admission: AdmissionSlot,
) -> Response<ProxyBody> {
    if req.method() == Method::CONNECT {
        return match mode {
            // Boxed, as the rarer branches are: each request's future is as large as its largest
            // branch, and hyper keeps one per client connection.
            HttpMode::Forward => Box::pin(tunnel::connect(req, peer, shared, admission)).await,
            HttpMode::Transparent => Refusal::not_forwardable(
                StatusCode::METHOD_NOT_ALLOWED,
                "a CONNECT reached the sidecar's transparent HTTP port",
                "send CONNECT to the proxy port (HTTPS_PROXY)",
            )
            .into_response(),
        };
    }
    let protocol = match mode {
        HttpMode::Forward => "http",
        HttpMode::Transparent => "http-transparent",
    };
    let named = match mode {
        HttpMode::Forward => match (req.uri().scheme_str(), req.uri().authority()) {
            (Some("http"), Some(authority)) => {
                request_host::forwarded(authority.as_str(), req.headers())
            }
            (Some(_), Some(_)) => {
                return Refusal::not_forwardable(
                    StatusCode::BAD_REQUEST,
                    "only http:// URLs are forwarded as requests",
                    "use CONNECT for https (HTTPS_PROXY)",
                )
                .into_response();
            }
            _ => {
                return Refusal::not_forwardable(
                    StatusCode::BAD_REQUEST,
                    "this is an HTTP proxy and the request names no http:// URL",
                    "send absolute-form requests (GET http://host/path) or CONNECT host:port",
                )
                .into_response();
            }
        },
        HttpMode::Transparent => request_host::transparent(req.uri(), req.headers()),
    };
    let (host, port) = match named {
        NamedHost::One(host, port) => (host, port),
        NamedHost::Nothing => {
            return Refusal::not_forwardable(
                StatusCode::BAD_REQUEST,
                "no Host header: nothing to decide the request by",
                "send the Host header",
            )
            .into_response();
        }
        NamedHost::Unreadable => {
            let pending = Pending::new(
                &shared.environment,
                peer,
                protocol,
                req.method().as_str(),
                "",
                80,
            );
            return refuse_invalid_host(pending, &shared);
        }
        NamedHost::Ambiguous(ambiguous) => {
            // Recorded under the host the request names first: the target's, else its Host's.
            let claimed = req.uri().host().map(str::to_string).or_else(|| {
                let field = req.headers().get(header::HOST)?;
                Some(String::from_utf8_lossy(field.as_bytes()).into_owned())
            });
            let port = req.uri().port_u16().unwrap_or(80);
            let pending = Pending::new(
                &shared.environment,
                peer,
                protocol,
                req.method().as_str(),
                claimed.as_deref().unwrap_or_default(),
                port,
            );
            let reason = DenyReason::AmbiguousHost(ambiguous);
            pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
            return Refusal::ambiguous_host(&reason).into_response();
        }
    };
    let mut pending = Pending::new(
        &shared.environment,
        peer,
        protocol,
        req.method().as_str(),
        &host,
        port,
    );
    let Some(target) = Target::parse(&host) else {
        return refuse_invalid_host(pending, &shared);
    };
    // The one host decided is the one sent, whatever form the client wrote it in.
    let canonical = request_host::canonical_host(&target, port);
    if req.headers().get(header::HOST) != Some(&canonical) {
        req.headers_mut().insert(header::HOST, canonical);
    }
    match decide(&target, &shared.policy) {
        Decision::Deny { reason } => {
            pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
            Refusal::denied(&target, &reason).into_response()
        }
        Decision::Capture { rule, response } => {
            Box::pin(capture(req, pending, &shared, &rule, response)).await
        }
        Decision::Allow { rule } => match dial_address(&target, &shared).await {
            Err(reason) => {
                pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
                Refusal::denied(&target, &reason).into_response()
            }
            Ok((ip, via)) => {
                let addr = SocketAddr::new(ip, port);
                pending.set_resolved(addr);
                let rule = logged_rule(rule, via);
                // An upgrade with a body is forwarded as a plain request, its Upgrade dropped.
                let bodiless = hyper::body::Body::is_end_stream(req.body());
                match upgrade::requested(req.headers()).filter(|_| bodiless) {
                    Some(protocols) => {
                        let relayed =
                            upgrade::relay(req, protocols, addr, pending, rule, admission, shared);
                        Box::pin(relayed).await
                    }
                    None => relay(req, addr, pending, rule, shared, upstream).await,
                }
            }
        },
    }
}

/// Forwards an allowed request to `addr` and streams the answer back, counting both bodies; the
/// decision is recorded when the response body ends.
async fn relay(
    req: Request<Incoming>,
    addr: SocketAddr,
    pending: Pending,
    rule: String,
    shared: Arc<Shared>,
    upstream: UpstreamSlot,
) -> Response<ProxyBody> {
    let up = Arc::new(AtomicU64::new(0));
    let (mut parts, body) = req.into_parts();
    if let Err(refused) = for_origin(&mut parts) {
        return refused.into_response();
    }
    let request = Request::from_parts(parts, CountedBody::new(body, up.clone(), None).boxed());
    let own = lock(&upstream).take();
    let response = match send(request, addr, own, upstream, &shared).await {
        Ok(response) => response,
        Err(Unanswered::Unreachable(err)) => {
            pending.finish(&shared.log, Verdict::Allow, &rule, 0, 0);
            return Refusal::unreachable(addr, &err).into_response();
        }
        Err(Unanswered::Failed(err)) => {
            pending.finish(
                &shared.log,
                Verdict::Allow,
                &rule,
                up.load(Ordering::Relaxed),
                0,
            );
            return Refusal::no_answer(addr, &err).into_response();
        }
    };
    to_client(response, up, pending, rule, &shared)
}

/// Makes a client's request one to send to the origin: origin form, no hop-by-hop fields (its
/// Host field is already the decided host's); a target that cannot be put in origin form is
/// refused.
pub(crate) fn for_origin(parts: &mut http::request::Parts) -> Result<(), Refusal> {
    let origin_form = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    parts.uri = origin_form.parse().map_err(|_| {
        Refusal::not_forwardable(
            StatusCode::BAD_REQUEST,
            "the request target cannot be forwarded",
            "send a path that is a valid origin-form request target",
        )
    })?;
    remove_hop_by_hop(&mut parts.headers);
    Ok(())
}

/// The origin's answer as the client gets it: without hop-by-hop fields, its body counted, the
/// decision recorded with both bodies' bytes (`up`, counted as the request went) when it ends.
pub(crate) fn to_client(
    response: Response<UpstreamBody>,
    up: Arc<AtomicU64>,
    pending: Pending,
    rule: String,
    shared: &Shared,
) -> Response<ProxyBody> {
    let down = Arc::new(AtomicU64::new(0));
    let (mut parts, body) = response.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    let log = shared.log.clone();
    let metrics = shared.metrics.clone();
    let counted_down = down.clone();
    let on_end = Box::new(move || {
        let (up, down) = (
            up.load(Ordering::Relaxed),
            counted_down.load(Ordering::Relaxed),
        );
        metrics.bytes(up, down);
        pending.finish(&log, Verdict::Allow, &rule, up, down);
    });
    Response::from_parts(parts, CountedBody::new(body, down, Some(on_end)).boxed())
}

/// Why a request got no answer from upstream.
enum Unanswered {
    /// No connection could be made.
    Unreachable(std::io::Error),
    /// The request went out and the exchange failed.
    Failed(UpstreamError),
}

/// Sends `request` to `addr`: on this client's own upstream connection when it goes there, else
/// on an idle one from the pool, else on a new one; a connection the origin has closed or sent
/// something unasked on is dropped, before anything is written to it. This client's connection
/// to another address goes to the pool. Once the answer has been read whole, the connection goes
/// back to `slot` for this client's next request.
///
/// An origin may close an idle connection just as a request goes out on it (its keep-alive
/// timeout, say), which no check beforehand can see. A request that then got no answer on a
/// kept connection is sent once more, on a new one, when it may be (idempotent and without a
/// body: [`crate::upstream_http::replayable`]), as Go's HTTP transport does; a new connection
/// that fails is the origin's answer.
async fn send(
    request: Request<ProxyBody>,
    addr: SocketAddr,
    own: Option<UpstreamConnection>,
    slot: UpstreamSlot,
    shared: &Arc<Shared>,
) -> Result<Response<UpstreamBody>, Unanswered> {
    let own = match own {
        Some(own) if own.addr() == addr => Some(own),
        Some(other) => {
            shared.upstreams.give_back(other);
            None
        }
        None => None,
    };
    // The pool checks what it hands out; this client's own connection is checked here.
    let kept = own
        .filter(UpstreamConnection::is_usable)
        .or_else(|| shared.upstreams.take(addr));
    let request = Outgoing::new(request);
    let Some(connection) = kept else {
        return Box::pin(send_on_new(request, addr, slot, shared)).await;
    };
    let read_timeout = shared.limits.upstream_read_timeout();
    match connection
        .exchange(request, read_timeout, give_back_to(&slot))
        .await
    {
        Ok(response) => Ok(response),
        Err(ExchangeFailed {
            unanswered: Some(request),
            ..
        }) => {
            shared.metrics.upstream_retried();
            Box::pin(send_on_new(request, addr, slot, shared)).await
        }
        Err(failed) => Err(Unanswered::Failed(failed.error)),
    }
}

/// Sends `request` on a new connection to `addr`.
async fn send_on_new(
    request: Outgoing,
    addr: SocketAddr,
    slot: UpstreamSlot,
    shared: &Arc<Shared>,
) -> Result<Response<UpstreamBody>, Unanswered> {
    let connection = UpstreamConnection::open(addr, shared.limits.connect_timeout())
        .await
        .map_err(Unanswered::Unreachable)?;
    let read_timeout = shared.limits.upstream_read_timeout();
    connection
        .exchange(request, read_timeout, give_back_to(&slot))
        .await
        .map_err(|failed| Unanswered::Failed(failed.error))
}

/// Where a connection whose answer was read whole goes: back to the client's slot.
fn give_back_to(slot: &UpstreamSlot) -> GiveBack {
    let slot = slot.clone();
    Box::new(move |connection| *lock(&slot) = Some(connection))
}

/// Answers a captured request itself and stores it in the inbox, body and all (up to the limit).
pub(crate) async fn capture(
    req: Request<Incoming>,
    pending: Pending,
    shared: &Shared,
    rule: &str,
    response: &CannedResponse,
) -> Response<ProxyBody> {
    let (parts, mut body) = req.into_parts();
    let limit = shared.inbox.max_body_bytes();
    let mut kept = Vec::new();
    let mut total: u64 = 0;
    // What is kept is claimed from the bytes all captures may hold at once, until it is in the
    // inbox; once a piece does not fit whole, nothing after it is kept either (a body with a hole
    // in it would not be the body that was sent).
    let mut claim = shared.capture_budget.claim();
    let mut keeping = true;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(data) = frame.data_ref() {
            total += data.len() as u64;
            if keeping {
                let room = data.len().min(limit.saturating_sub(kept.len()));
                let taken = claim.grow_up_to(room);
                kept.extend_from_slice(&data[..taken]);
                keeping = taken == room;
            }
        }
    }
    let headers: BTreeMap<String, String> = parts
        .headers
        .iter()
        .filter(|(name, _)| *name != header::PROXY_AUTHORIZATION)
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    shared.inbox.add_http(
        parts.method.as_str(),
        pending.host(),
        path,
        headers,
        &kept,
        total,
    );
    pending.finish(
        &shared.log,
        Verdict::Capture,
        rule,
        total,
        response.body.len() as u64,
    );
    let mut answer = Response::new(full(response.body.clone()));
    *answer.status_mut() = StatusCode::from_u16(response.status).unwrap_or(StatusCode::ACCEPTED);
    if let Ok(value) = HeaderValue::from_str(&response.content_type) {
        answer.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    answer
        .headers_mut()
        .insert(VERDICT_HEADER, HeaderValue::from_static("capture"));
    answer
}

/// A request whose host is neither a name nor an address: recorded as denied, answered 400.
pub fn refuse_invalid_host(pending: Pending, shared: &Shared) -> Response<ProxyBody> {
    let reason = DenyReason::InvalidHost.to_string();
    pending.finish(&shared.log, Verdict::Deny, &reason, 0, 0);
    Refusal::invalid_host().into_response()
}

/// Headers that describe one hop, not the message: never forwarded (RFC 9110 section 7.6.1),
/// together with every header the Connection header names. (`Trailer` is end to end: it names
/// the trailer fields, which hyper passes on to the client only when they are declared.)
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::TE,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped_with_those_connection_names() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        headers.insert("x-secret-hop", HeaderValue::from_static("1"));
        headers.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        headers.insert(
            header::PROXY_AUTHORIZATION,
            HeaderValue::from_static("Basic eA=="),
        );
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        remove_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key(header::ACCEPT));
    }
}
