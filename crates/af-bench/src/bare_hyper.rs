//! The least HTTP proxy hyper makes, as a reference for `af-bench proxy --bare-hyper`: hyper's
//! server for the client and hyper's client for the origin, one origin connection per client
//! connection, the request's target rewritten to origin form and nothing else — no decision, no
//! decision log, no header-read timeout, no body counting, no shared connection pool. It serves
//! plain HTTP only (a CONNECT is refused), on the same tokio runtime the sidecar runs.
//!
//! The sidecar is built on the same two hyper halves, so the distance between the two is what the
//! sidecar's own work on each request costs: what a change to its code could win back without
//! leaving hyper (docs/performance.md).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use http_body_util::{BodyExt, Empty, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::world::ORIGIN;

type Body = BoxBody<Bytes, hyper::Error>;

/// The origin connection of one client connection, opened by its first request.
type Upstream = Arc<Mutex<Option<SendRequest<Incoming>>>>;

/// Serves on `listen` until killed.
pub async fn serve(listen: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        tokio::spawn(async move {
            let upstream = Upstream::default();
            let service = hyper::service::service_fn(move |req| {
                let upstream = upstream.clone();
                async move { Ok::<_, Infallible>(forward(req, upstream).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(client), service)
                .await;
        });
    }
}

async fn forward(mut req: Request<Incoming>, upstream: Upstream) -> Response<Body> {
    let Some(target) = origin_form(req.method(), req.uri()) else {
        return refused();
    };
    *req.uri_mut() = target;
    let mut upstream = upstream.lock().await;
    if upstream.is_none() {
        *upstream = connect().await;
    }
    let Some(sender) = upstream.as_mut() else {
        return refused();
    };
    if sender.ready().await.is_err() {
        *upstream = None;
        return refused();
    }
    match sender.send_request(req).await {
        Ok(response) => response.map(BodyExt::boxed),
        Err(_) => refused(),
    }
}

/// An absolute-form request's target in origin form; `None` for a CONNECT.
fn origin_form(method: &Method, uri: &Uri) -> Option<Uri> {
    if method == Method::CONNECT {
        return None;
    }
    uri.path_and_query()
        .map_or("/", |pq| pq.as_str())
        .parse()
        .ok()
}

async fn connect() -> Option<SendRequest<Incoming>> {
    let stream = TcpStream::connect((ORIGIN, 80)).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    Some(sender)
}

fn refused() -> Response<Body> {
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_go_on_in_origin_form_and_a_connect_does_not() {
        let uri: Uri = "http://origin.bench.test/small?x=1".parse().unwrap();
        assert_eq!(origin_form(&Method::GET, &uri).unwrap(), "/small?x=1");
        let bare: Uri = "http://origin.bench.test".parse().unwrap();
        assert_eq!(origin_form(&Method::GET, &bare).unwrap(), "/");
        let authority: Uri = "origin.bench.test:443".parse().unwrap();
        assert!(origin_form(&Method::CONNECT, &authority).is_none());
    }
}
