//! The proxy's own HTTP/1.1 client against an origin that answers in every framing RFC 9112
//! allows: each answer reaches the client whole, and the upstream connection is kept exactly
//! when the answer leaves it usable (`upstream_http.rs`).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The origin's answers, by path.
fn answer(path: &str, body: &[u8]) -> Vec<Vec<u8>> {
    let whole = |s: &str| vec![s.as_bytes().to_vec()];
    match path {
        "/length" => whole("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"),
        // In pieces, so the proxy reads the framing across reads.
        "/chunked" => vec![
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n5\r\nhel"
                .to_vec(),
            b"lo\r\n6;ext=1\r\n world\r".to_vec(),
            b"\n0\r\nx-sum: 11\r\n\r\n".to_vec(),
        ],
        "/head" => whole("HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n"),
        "/empty" => whole("HTTP/1.1 204 No Content\r\n\r\n"),
        "/continue" => whole(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        ),
        "/echo" => {
            let text = format!(
                "got {} bytes: {}",
                body.len(),
                String::from_utf8_lossy(body)
            );
            whole(&format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            ))
        }
        "/until-close" => whole("HTTP/1.0 200 OK\r\n\r\nuntil the origin closes"),
        "/garbage" => whole("SSH-2.0-not-http\r\n\r\n"),
        "/stall" => whole("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"),
        "/stale" => whole("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfresh"),
        "/cut" => whole("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this"),
        _ => whole("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"),
    }
}

/// After these the origin closes the connection.
fn closes_after(path: &str) -> bool {
    matches!(path, "/until-close" | "/garbage" | "/cut" | "/refuse")
}

/// A request's body from what follows its head: by content-length, or chunked (decoded), or
/// none; `None` while incomplete. Returns the body and how many bytes it took.
fn request_body(head: &str, rest: &[u8]) -> Option<(Vec<u8>, usize)> {
    let lower = head.to_ascii_lowercase();
    if lower.contains("transfer-encoding: chunked") {
        let end = find(rest, b"0\r\n\r\n")?;
        let (mut body, mut at) = (Vec::new(), 0);
        while at < end {
            let line_end = at + find(&rest[at..], b"\r\n")?;
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[at..line_end]).ok()?, 16).ok()?;
            body.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
            at = line_end + 2 + size + 2;
        }
        return Some((body, end + 5));
    }
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |v| v.trim().parse().unwrap());
    (rest.len() >= length).then(|| (rest[..length].to_vec(), length))
}

/// An origin answering by path (see [`answer`]); counts the connections it accepts and records
/// each request head.
async fn scripted_origin() -> (Arc<AtomicUsize>, Seen) {
    let listener = tokio::net::TcpListener::bind(addr(ORIGIN, 80))
        .await
        .unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen: Seen = Arc::default();
    let (count, record) = (accepted.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, SeqCst);
            let record = record.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 65536];
                let mut answered = 0;
                loop {
                    while let Some(end) = find(&buf, b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        let path = head.split(' ').nth(1).unwrap_or("").to_string();
                        record.lock().unwrap().push(head.clone());
                        if path == "/refuse" {
                            // Answers at once, without reading the body, and drains it after.
                            let refusal = "HTTP/1.1 413 Content Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
                            let _ = stream.write_all(refusal.as_bytes()).await;
                            let _ = stream.read_to_end(&mut Vec::new()).await;
                            return;
                        }
                        // Hangs up without an answer: at any request ("/drop"), or at one that
                        // comes on a kept connection ("/stale", an origin whose keep-alive
                        // timeout ran out as the request arrived).
                        if path == "/drop" || (path == "/stale" && answered > 0) {
                            return;
                        }
                        let Some((body, used)) = request_body(&head, &buf[end + 4..]) else {
                            break;
                        };
                        answered += 1;
                        if path == "/silent" {
                            // Keeps the connection open and never answers.
                            std::future::pending::<()>().await;
                        }
                        buf.drain(..end + 4 + used);
                        for piece in answer(&path, &body) {
                            if stream.write_all(&piece).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        if closes_after(&path) {
                            return;
                        }
                        if path == "/stall" {
                            // Half the body, then silence, the connection open.
                            std::future::pending::<()>().await;
                        }
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (accepted, seen)
}

type Sender = hyper::client::conn::http1::SendRequest<
    http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>,
>;

/// A keep-alive client connection to the proxy.
async fn proxy_client() -> Sender {
    let stream = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// Sends `method http://api.allowed.test{path}` with `body`; the status, body (or the error that
/// ended it) and trailers.
async fn fetch(
    sender: &mut Sender,
    method: &str,
    path: &str,
    body: http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>,
) -> (u16, Result<String, String>, Option<http::HeaderMap>) {
    sender.ready().await.unwrap();
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://api.allowed.test{path}"))
        .header("host", "api.allowed.test")
        .header("te", "trailers")
        .body(body)
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let status = response.status().as_u16();
    match response.into_body().collect().await {
        Ok(collected) => {
            let trailers = collected.trailers().cloned();
            let text = String::from_utf8_lossy(&collected.to_bytes()).into_owned();
            (status, Ok(text), trailers)
        }
        Err(err) => (status, Err(err.to_string()), None),
    }
}

fn empty() -> http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible> {
    Full::new(Bytes::new()).boxed()
}

#[test]
fn every_framing_reaches_the_client_and_the_connection_is_kept_when_it_can_be() {
    in_private_network(|| async {
        let (connections, seen) = scripted_origin().await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let mut client = proxy_client().await;

        let (status, body, _) = fetch(&mut client, "GET", "/length", empty()).await;
        assert_eq!((status, body.as_deref()), (200, Ok("hello")));
        let (status, body, trailers) = fetch(&mut client, "GET", "/chunked", empty()).await;
        assert_eq!((status, body.as_deref()), (200, Ok("hello world")));
        assert_eq!(
            trailers
                .as_ref()
                .and_then(|t| t.get("x-sum"))
                .map(|v| v.as_bytes()),
            Some(&b"11"[..]),
            "the origin's trailers are passed on"
        );
        let (status, body, _) = fetch(&mut client, "HEAD", "/head", empty()).await;
        assert_eq!((status, body.as_deref()), (200, Ok("")));
        let (status, body, _) = fetch(&mut client, "GET", "/empty", empty()).await;
        assert_eq!((status, body.as_deref()), (204, Ok("")));
        let (status, body, _) = fetch(&mut client, "GET", "/continue", empty()).await;
        assert_eq!(
            (status, body.as_deref()),
            (200, Ok("ok")),
            "1xx are passed over"
        );
        // A body of unknown length is sent chunked, a known one by its length.
        let pieces = futures_util::stream::iter(
            [&b"hello"[..], b" ", b"world"]
                .map(|p| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(p)))),
        );
        let (status, body, _) = fetch(
            &mut client,
            "POST",
            "/echo",
            StreamBody::new(pieces).boxed(),
        )
        .await;
        assert_eq!(
            (status, body.as_deref()),
            (200, Ok("got 11 bytes: hello world"))
        );
        let big = Bytes::from(vec![b'x'; 300_000]);
        let (_, body, _) = fetch(&mut client, "PUT", "/echo", Full::new(big).boxed()).await;
        assert!(body.unwrap().starts_with("got 300000 bytes: xxx"));
        assert_eq!(
            connections.load(SeqCst),
            1,
            "all of them on one upstream connection"
        );
        let heads = seen.lock().unwrap().clone();
        assert!(
            heads[5]
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{heads:?}"
        );
        assert!(
            heads[6]
                .to_ascii_lowercase()
                .contains("content-length: 300000"),
            "{heads:?}"
        );
        assert!(
            heads
                .iter()
                .all(|h| !h.to_ascii_lowercase().contains("\nte:")),
            "hop-by-hop"
        );

        // An answer delimited by the origin closing: whole, and the next request dials anew.
        let (status, body, _) = fetch(&mut client, "GET", "/until-close", empty()).await;
        assert_eq!(
            (status, body.as_deref()),
            (200, Ok("until the origin closes"))
        );
        let (_, body, _) = fetch(&mut client, "GET", "/length", empty()).await;
        assert_eq!(body.as_deref(), Ok("hello"));
        assert_eq!(connections.load(SeqCst), 2);

        // Not HTTP: a 502 that says so. Cut short: the client's body ends in an error.
        let (status, body, _) = fetch(&mut client, "GET", "/garbage", empty()).await;
        assert_eq!(status, 502);
        assert!(body.unwrap().contains("not valid HTTP/1"));
        let mut client = proxy_client().await;
        let (status, body, _) = fetch(&mut client, "GET", "/cut", empty()).await;
        assert_eq!(status, 200);
        assert!(body.is_err(), "a truncated body is not passed off as whole");

        // An origin that refuses an upload before reading it: its answer reaches the client.
        // (A raw client: hyper's stops at the failed write and never reads the answer.)
        let (mut from_proxy, mut to_proxy) = TcpStream::connect(addr(SIDECAR, 3128))
            .await
            .unwrap()
            .into_split();
        tokio::spawn(async move {
            let head = format!(
                "POST http://api.allowed.test/refuse HTTP/1.1\r\nhost: api.allowed.test\r\ncontent-length: {}\r\n\r\n",
                4 << 20
            );
            let _ = to_proxy.write_all(head.as_bytes()).await;
            let _ = to_proxy.write_all(&vec![b'x'; 4 << 20]).await;
        });
        let mut answer = Vec::new();
        while find(&answer, b"\r\n\r\n").is_none() {
            let mut chunk = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(10), from_proxy.read(&mut chunk))
                .await
                .expect("an answer within 10 s")
                .unwrap();
            assert!(n > 0, "closed without an answer: {answer:?}");
            answer.extend_from_slice(&chunk[..n]);
        }
        assert!(
            answer.starts_with(b"HTTP/1.1 413"),
            "{}",
            String::from_utf8_lossy(&answer)
        );

        // A request framed two ways (the shape of request smuggling): the body goes upstream
        // framed one way only, as the client's chunked framing delimited it.
        let answer = exchange(
            addr(SIDECAR, 3128),
            b"POST http://api.allowed.test/echo HTTP/1.1\r\nhost: api.allowed.test\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        .await;
        assert!(answer.ends_with("got 5 bytes: hello"), "{answer}");
        let head = seen.lock().unwrap().last().unwrap().to_ascii_lowercase();
        assert!(
            head.contains("transfer-encoding: chunked") && !head.contains("content-length"),
            "{head}"
        );

        // And the sidecar goes on serving, on a fresh connection.
        let mut client = proxy_client().await;
        let (_, body, _) = fetch(&mut client, "GET", "/length", empty()).await;
        assert_eq!(body.as_deref(), Ok("hello"));
        // One record per request (the last is written as its body ends, a moment after the
        // client has it).
        let mut logged = 0;
        for _ in 0..100 {
            logged = decisions("?verdict=allow").await.len();
            if logged >= 14 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(logged, 14);
    });
}

/// An origin that hangs up on a request arriving on a kept connection: a request that may be sent
/// twice (idempotent, no body) goes again on a new connection and is answered; one that may not
/// gets a 502; and a request that fails on a new connection is not sent again.
#[test]
fn a_request_the_origin_hangs_up_on_is_sent_again_only_when_it_may_be() {
    in_private_network(|| async {
        let (connections, seen) = scripted_origin().await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let mut client = proxy_client().await;
        let asked = |path: &str| {
            let line = format!(" {path} ");
            let seen = seen.lock().unwrap();
            seen.iter().filter(|head| head.contains(&line)).count()
        };

        let (_, body, _) = fetch(&mut client, "GET", "/length", empty()).await;
        assert_eq!(body.as_deref(), Ok("hello"));
        assert_eq!(connections.load(SeqCst), 1);
        // Kept, then hung up on: sent again, on a second connection.
        let (status, body, _) = fetch(&mut client, "GET", "/stale", empty()).await;
        assert_eq!((status, body.as_deref()), (200, Ok("fresh")));
        assert_eq!((asked("/stale"), connections.load(SeqCst)), (2, 2));

        // A POST is not idempotent: sent once, and the client hears of the failure.
        let (status, body, _) = fetch(&mut client, "POST", "/stale", empty()).await;
        assert_eq!(status, 502, "{body:?}");
        assert!(
            body.unwrap()
                .contains("AF-RUN-055: 203.0.113.10:80 did not answer")
        );
        assert_eq!((asked("/stale"), connections.load(SeqCst)), (3, 2));
        // Nor a PUT with a body: the body was streamed from the client and is gone.
        let (_, body, _) = fetch(&mut client, "GET", "/length", empty()).await;
        assert_eq!(body.as_deref(), Ok("hello"));
        let order = Full::new(Bytes::from_static(b"order")).boxed();
        let (status, _, _) = fetch(&mut client, "PUT", "/stale", order).await;
        assert_eq!(status, 502);
        assert_eq!((asked("/stale"), connections.load(SeqCst)), (4, 3));

        // On a new connection a hang-up is the origin's answer: not sent again.
        let (status, _, _) = fetch(&mut client, "GET", "/drop", empty()).await;
        assert_eq!(status, 502);
        assert_eq!((asked("/drop"), connections.load(SeqCst)), (1, 4));

        let (_, metrics) = control_get("/metrics", Some(TOKEN)).await;
        assert!(
            metrics.contains("af_egress_upstream_retries_total 1\n"),
            "{metrics}"
        );
    });
}

/// An origin that goes silent — before its answer, or halfway through its body — is given up on
/// after `limits.upstream_read_timeout_ms` (2 s in the tests' configuration): a 504 that says so,
/// or a body that ends in an error rather than passing as whole; the sidecar serves on. A client
/// whose upload takes longer than that is not counted against the origin.
#[test]
fn an_origin_that_goes_silent_is_given_up_on() {
    in_private_network(|| async {
        let (_, _) = scripted_origin().await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let mut client = proxy_client().await;

        let (status, body, _) = fetch(&mut client, "GET", "/silent", empty()).await;
        assert_eq!(status, 504, "{body:?}");
        let body = body.unwrap();
        assert!(body.contains("AF-RUN-055") && body.contains("sent nothing for 2 s"));
        let (status, body, _) = fetch(&mut client, "GET", "/stall", empty()).await;
        assert_eq!(status, 200);
        assert!(body.is_err(), "a stalled body is not passed off as whole");
        let mut client = proxy_client().await;
        let order = Full::new(Bytes::from_static(b"order")).boxed();
        let (status, _, _) = fetch(&mut client, "POST", "/silent", order).await;
        assert_eq!(status, 504, "silent after a whole upload");
        // An upload that takes longer than the limit, the origin answering once it has it all:
        // the origin was never the one keeping the answer back.
        let slowly = futures_util::stream::unfold(0, |piece| async move {
            if piece == 3 {
                return None;
            }
            if piece > 0 {
                tokio::time::sleep(Duration::from_millis(1200)).await;
            }
            let data = Frame::data(Bytes::from_static(b"part "));
            Some((Ok::<_, std::convert::Infallible>(data), piece + 1))
        });
        let (status, body, _) = fetch(
            &mut client,
            "POST",
            "/echo",
            StreamBody::new(slowly).boxed(),
        )
        .await;
        assert_eq!(
            (status, body.as_deref()),
            (200, Ok("got 15 bytes: part part part "))
        );

        let mut client = proxy_client().await;
        let (_, body, _) = fetch(&mut client, "GET", "/length", empty()).await;
        assert_eq!(body.as_deref(), Ok("hello"));
        let logged = decisions("?verdict=allow").await;
        assert!(
            logged
                .iter()
                .any(|d| d["bytes_down"] == 0 && d["bytes_up"] == 0),
            "the silent origin's request is recorded: {logged:?}"
        );
    });
}
