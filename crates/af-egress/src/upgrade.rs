//! Protocol upgrades through the proxy (RFC 9110 section 7.8): a plain `ws://` WebSocket, or any
//! other protocol a request asks to switch to with `Upgrade` and `Connection: upgrade`, through
//! the forward proxy or the transparent HTTP listener. The request is decided like any other;
//! an allowed one goes to the origin on a connection of its own with its `Upgrade` kept (it is a
//! hop-by-hop field, dropped from every other request), and when the origin answers `101
//! Switching Protocols` the two connections are relayed as a tunnel is, until either side
//! closes, and recorded then with the bytes both ways. Any other answer is passed on as usual.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use af_runtime::Verdict;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::body::{ProxyBody, full};
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::http_proxy::{
    AdmissionSlot, for_origin, relay_once_switched, remove_hop_by_hop, to_client,
};
use crate::refusal::Refusal;
use crate::tunnel::relay_to;
use crate::upstream_http::{Outgoing, UpgradeAnswer, UpstreamConnection};

/// The protocols a request asks to switch to: its `Upgrade` field, when its `Connection` field
/// names `upgrade` (RFC 9110 section 7.8 requires both).
pub fn requested(headers: &HeaderMap) -> Option<HeaderValue> {
    // Upgrade first: asked of every forwarded request, and almost none carries it.
    let protocols = headers.get(header::UPGRADE).filter(|p| !p.is_empty())?;
    let named = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    named.then(|| protocols.clone())
}

/// Forwards an allowed upgrade request (without a body) to `addr` and, when the origin switches
/// protocols, relays the two connections as a tunnel.
pub async fn relay(
    mut req: Request<Incoming>,
    protocols: HeaderValue,
    addr: std::net::SocketAddr,
    pending: Pending,
    rule: String,
    admission: AdmissionSlot,
    shared: Arc<Shared>,
) -> Response<ProxyBody> {
    let client_switches = hyper::upgrade::on(&mut req);
    let (mut parts, _) = req.into_parts();
    if let Err(refused) = for_origin(&mut parts) {
        return refused.into_response();
    }
    asking_to_switch(&mut parts.headers, protocols);
    let request = Outgoing::new(Request::from_parts(parts, full("")));
    let connection = match UpstreamConnection::open(addr, shared.limits.connect_timeout()).await {
        Ok(connection) => connection,
        Err(err) => {
            pending.finish(&shared.log, Verdict::Allow, &rule, 0, 0);
            return Refusal::unreachable(addr, &err).into_response();
        }
    };
    let answer = connection
        .upgrade(request, shared.limits.upstream_read_timeout())
        .await;
    let (headers, upstream, already_read) = match answer {
        Ok(UpgradeAnswer::Switched {
            headers,
            stream,
            already_read,
        }) => (headers, stream, already_read),
        Ok(UpgradeAnswer::Declined(response)) => {
            return to_client(
                response,
                Arc::new(AtomicU64::new(0)),
                pending,
                rule,
                &shared,
            );
        }
        Err(err) => {
            pending.finish(&shared.log, Verdict::Allow, &rule, 0, 0);
            return Refusal::no_answer(addr, &err).into_response();
        }
    };
    let mut switched = Response::new(full(""));
    *switched.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *switched.headers_mut() = switching_answer(headers);
    relay_once_switched(
        client_switches,
        &admission,
        "upgrade",
        move |client| async move {
            match client {
                Some(client) => {
                    let first = &already_read;
                    relay_to(client, Vec::new(), first, upstream, pending, &rule, &shared).await
                }
                None => pending.finish(&shared.log, Verdict::Allow, &rule, 0, 0),
            }
        },
    );
    switched
}

/// A request's fields as they go to the origin, hop-by-hop ones removed: asking again to switch
/// to `protocols`.
fn asking_to_switch(headers: &mut HeaderMap, protocols: HeaderValue) {
    headers.insert(header::UPGRADE, protocols);
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
}

/// The origin's `101` fields as the client gets them: the hop-by-hop ones of the origin's hop
/// removed, the switch itself (`Upgrade`, `Connection: upgrade`) kept.
fn switching_answer(mut headers: HeaderMap) -> HeaderMap {
    let protocols = headers.get(header::UPGRADE).cloned();
    remove_hop_by_hop(&mut headers);
    if let Some(protocols) = protocols {
        asking_to_switch(&mut headers, protocols);
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        fields
            .iter()
            .map(|(name, value)| {
                (
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn an_upgrade_is_asked_for_with_both_fields() {
        let websocket = |connection: &str| {
            requested(&headers(&[
                ("connection", connection),
                ("upgrade", "websocket"),
            ]))
        };
        assert_eq!(websocket("Upgrade").unwrap(), "websocket");
        assert_eq!(websocket("keep-alive, upgrade").unwrap(), "websocket");
        assert!(websocket("keep-alive").is_none(), "Connection must name it");
        assert!(requested(&headers(&[("connection", "upgrade")])).is_none());
        assert!(
            requested(&headers(&[("connection", "upgrade"), ("upgrade", "")])).is_none(),
            "an empty Upgrade asks for nothing"
        );
    }

    #[test]
    fn the_switch_is_passed_on_and_the_origins_hop_fields_are_not() {
        let answer = switching_answer(headers(&[
            ("upgrade", "websocket"),
            ("connection", "Upgrade, x-private"),
            ("x-private", "origin hop"),
            ("keep-alive", "timeout=5"),
            ("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        ]));
        assert_eq!(answer["upgrade"], "websocket");
        assert_eq!(answer["connection"], "upgrade");
        assert_eq!(
            answer["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert!(answer.get("x-private").is_none());
        assert!(answer.get("keep-alive").is_none());
    }
}
