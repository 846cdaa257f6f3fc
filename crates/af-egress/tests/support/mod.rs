//! A private world for sidecar tests: a network namespace of the test's own, with the "outside"
//! hosts (TEST-NET addresses, a metadata address, a private-range host) added to its loopback, so
//! no packet of a test ever leaves this machine, and tests run in parallel without sharing ports.
//!
//! Needs root (to create the namespace). These are containment tests: they never skip; without
//! the privilege they fail, saying what is missing.

#![allow(
    dead_code,
    reason = "each test file uses its own part of the support module"
)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use af_egress::RunningSidecar;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// The sidecar's address as workloads see it.
pub const SIDECAR: &str = "10.99.0.2";
/// A "public" origin the policy allows (through the CIDR rule for its TEST-NET network).
pub const ORIGIN: &str = "203.0.113.10";
/// A "public" host no rule names.
pub const UNLISTED: &str = "198.51.100.10";
/// The metadata endpoint.
pub const METADATA: &str = "169.254.169.254";
/// A host on the operator's private network.
pub const PRIVATE: &str = "10.20.0.5";
/// The platform's resolver, for internal names.
pub const PLATFORM_DNS: &str = "10.99.0.53";
/// A service inside the environment.
pub const SERVICE: &str = "10.99.0.7";
/// The control token of every test sidecar.
pub const TOKEN: &str = "test-control-token-0123456789";

/// Runs `body` on a fresh tokio runtime inside a new network namespace whose loopback carries
/// every address above (and the IPv6 metadata address).
pub fn in_private_network<F, Fut>(body: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let thread = std::thread::spawn(move || {
        // Namespaces are per thread: this one, and the runtime threads it starts, live in it.
        if let Err(err) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            panic!(
                "cannot create a network namespace ({err}): the sidecar's containment tests need root \
                 (CAP_SYS_ADMIN); run them as root, as CI does"
            );
        }
        ip(&["link", "set", "lo", "up"]);
        for address in [
            SIDECAR,
            ORIGIN,
            UNLISTED,
            METADATA,
            PRIVATE,
            PLATFORM_DNS,
            SERVICE,
        ] {
            ip(&["addr", "add", &format!("{address}/32"), "dev", "lo"]);
        }
        ip(&[
            "-6",
            "addr",
            "add",
            "fd00:ec2::254/128",
            "dev",
            "lo",
            "nodad",
        ]);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        runtime.block_on(async move {
            tokio::time::timeout(Duration::from_secs(60), body())
                .await
                .expect("the test did not finish within 60 s");
        });
    });
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

fn ip(args: &[&str]) {
    let status = Command::new("ip")
        .args(args)
        .status()
        .expect("the `ip` command (iproute2) is needed to build the test network");
    assert!(status.success(), "ip {args:?} failed");
}

/// A sidecar started from `extra` YAML appended to a base configuration in which the sidecar
/// listens on SIDECAR (proxy 3128, transparent 80/443, DNS 53, SMTP 25) and its control API on
/// 127.0.0.1:9901.
pub struct TestSidecar {
    pub running: RunningSidecar,
    pub dir: PathBuf,
}

impl Drop for TestSidecar {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub async fn start_sidecar(policy: &str, extra: &str) -> TestSidecar {
    start_sidecar_resolving(policy, extra, "").await
}

/// As [`start_sidecar`], with more lines in the `resolver` section.
pub async fn start_sidecar_resolving(policy: &str, extra: &str, resolver: &str) -> TestSidecar {
    let dir = std::env::temp_dir().join(format!(
        "af-egress-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "environment: test-env
listen:
  proxy: {SIDECAR}:3128
  http: {SIDECAR}:80
  tls: {SIDECAR}:443
  dns: {SIDECAR}:53
  smtp: [{SIDECAR}:25]
  smtps: [{SIDECAR}:465]
dns:
  answer_v4: {SIDECAR}
  internal_names: [web]
  internal_suffixes: [svc.cluster.local]
  upstream: {PLATFORM_DNS}:53
control:
  listen: 127.0.0.1:9901
  token: {TOKEN}
  workload_addresses: [{SIDECAR}]
log:
  path: {log}
resolver:
  static_hosts:
    api.allowed.test: [{ORIGIN}]
    rebind-private.allowed.test: [{PRIVATE}]
    rebind-loopback.allowed.test: [127.0.0.1]
    rebind-metadata.allowed.test: [{METADATA}]
    rebind-v6metadata.allowed.test: [\"fd00:ec2::254\"]
{resolver}
webhooks:
  web: {SERVICE}:8080
limits:
  header_read_timeout_ms: 1000
  client_hello_timeout_ms: 2000
  upstream_read_timeout_ms: 2000
{policy}
{extra}
",
        log = dir.join("decisions.jsonl").display(),
    );
    let loaded = af_egress::parse_config(&config, &dir)
        .unwrap_or_else(|problems| panic!("test config: {problems:?}"));
    let running = af_egress::start(loaded).await.expect("the sidecar starts");
    TestSidecar { running, dir }
}

/// The usual policy: the allowed name and the TEST-NET origin network, two captured hosts, mail
/// captured.
pub const POLICY: &str = "policy:
  allow:
    - api.allowed.test
    - \"*.allowed.test\"
    - 203.0.113.0/24
  capture:
    - host: api.payments.test
      response: {status: 200, content_type: application/json, body: '{\"id\": \"ch_twin\"}'}
    - hooks.chat.test
  mail: capture
";

pub fn addr(host: &str, port: u16) -> SocketAddr {
    format!("{host}:{port}").parse().unwrap()
}

/// Requests seen by a test server, as text.
pub type Seen = Arc<Mutex<Vec<String>>>;

/// An HTTP/1.1 server answering every request with `200 <name> saw <path>`, keep-alive, recording
/// each request line.
pub async fn http_origin(at: SocketAddr, name: &'static str) -> Seen {
    let listener = TcpListener::bind(at)
        .await
        .unwrap_or_else(|e| panic!("bind {at}: {e}"));
    let seen: Seen = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = find(&buf, b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        let body_len = content_length(&head);
                        if buf.len() < end + 4 + body_len {
                            break;
                        }
                        buf.drain(..end + 4 + body_len);
                        let line = head.lines().next().unwrap_or("").to_string();
                        record.lock().unwrap().push(head.clone());
                        let path = line.split(' ').nth(1).unwrap_or("").to_string();
                        let body = format!("{name} saw {path}");
                        let response = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(response.as_bytes()).await.is_err()
                            || head.to_ascii_lowercase().contains("connection: close")
                        {
                            return;
                        }
                    }
                }
            });
        }
    });
    seen
}

/// A TCP server that records what arrives and answers `ack:` followed by the byte count, standing
/// in for a TLS origin (the sidecar never looks past the ClientHello).
pub async fn tcp_origin(at: SocketAddr) -> Seen {
    let listener = TcpListener::bind(at)
        .await
        .unwrap_or_else(|e| panic!("bind {at}: {e}"));
    let seen: Seen = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            tokio::spawn(async move {
                let mut chunk = vec![0u8; 65536];
                if let Ok(n) = stream.read(&mut chunk).await
                    && n > 0
                {
                    record.lock().unwrap().push(format!("{n} bytes"));
                    let _ = stream.write_all(format!("ack:{n}").as_bytes()).await;
                }
            });
        }
    });
    seen
}

/// A stand-in for the platform's resolver: answers every A query with SERVICE, recording names.
pub async fn platform_dns(at: SocketAddr) -> Seen {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    platform_dns_recording(at, move |query| {
        record.lock().unwrap().push(query_name(query))
    })
    .await;
    seen
}

/// Datagrams as they arrived.
pub type Received = Arc<Mutex<Vec<Vec<u8>>>>;

/// The platform's resolver stand-in of [`platform_dns`], recording every query byte for byte.
pub async fn platform_dns_bytes(at: SocketAddr) -> Received {
    let seen: Received = Arc::default();
    let record = seen.clone();
    platform_dns_recording(at, move |query| record.lock().unwrap().push(query.to_vec())).await;
    seen
}

async fn platform_dns_recording(at: SocketAddr, record: impl Fn(&[u8]) + Send + 'static) {
    let socket = UdpSocket::bind(at).await.unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            record(&buf[..n]);
            let Some(end) = af_egress::dns_wire::question_end(&buf[..n]) else {
                continue;
            };
            // The question as asked, one answer: SERVICE.
            let mut reply = buf[..end].to_vec();
            reply[2] |= 0x80;
            reply[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
            reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4]);
            reply.extend_from_slice(&SERVICE.parse::<std::net::Ipv4Addr>().unwrap().octets());
            let _ = socket.send_to(&reply, from).await;
        }
    });
}

fn query_name(bytes: &[u8]) -> String {
    let mut labels = Vec::new();
    let mut at = 12;
    while let Some(&len) = bytes.get(at) {
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(&bytes[at + 1..at + 1 + len as usize]).to_string());
        at += 1 + len as usize;
    }
    labels.join(".")
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &str) -> usize {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Sends raw bytes and reads until the peer closes (or 5 s pass); the whole answer as text.
pub async fn exchange(at: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(at)
        .await
        .unwrap_or_else(|e| panic!("connect {at}: {e}"));
    stream.write_all(request).await.unwrap();
    read_all(&mut stream).await
}

/// Sends raw bytes and returns the raw answer, read until the peer closes or goes quiet for 1 s.
pub async fn exchange_bytes(at: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(at)
        .await
        .unwrap_or_else(|e| panic!("connect {at}: {e}"));
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_secs(1), stream.read(&mut chunk)).await
    {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    out
}

pub async fn read_all(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Everything the peer sends until it closes the connection, or `None` when it is still open
/// after 5 s: tells "the sidecar cut the client off" apart from "nothing happened".
pub async fn until_closed(stream: &mut TcpStream) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

/// Reads one HTTP response head (and its body by content-length) from a kept-alive connection.
pub async fn read_response(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let need = end + 4 + content_length(&head);
            if buf.len() >= need {
                return String::from_utf8_lossy(&buf[..need]).into_owned();
            }
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("a response within 5 s")
            .unwrap();
        if n == 0 {
            return String::from_utf8_lossy(&buf).into_owned();
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One of the sidecar's metrics as `/metrics` gives it now (a series without labels).
pub async fn metric(name: &str) -> u64 {
    let (_, metrics) = control_get("/metrics", Some(TOKEN)).await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {metrics}"))
}

/// Waits until `metric(name)` reaches `at_least` (asked again for up to 5 s, so that one that
/// never does fails): for a test to know the sidecar has taken what it was sent.
pub async fn metric_reaches(name: &str, at_least: u64) {
    for _ in 0..500 {
        if metric(name).await >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} never reached {at_least}");
}

/// A GET through the control API, with or without the token; (status line, body).
pub async fn control_get(path: &str, token: Option<&str>) -> (String, String) {
    control_request("GET", path, token, "").await
}

pub async fn control_request(
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (String, String) {
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: control\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = exchange(addr("127.0.0.1", 9901), request.as_bytes()).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// The decision log as JSON values, through the control API.
pub async fn decisions(query: &str) -> Vec<serde_json::Value> {
    let (status, body) = control_get(&format!("/v1/decisions{query}"), Some(TOKEN)).await;
    assert!(status.contains("200"), "{status}: {body}");
    body.lines()
        .filter(|l| !l.trim().is_empty() && l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The decision log once a record matching `wanted` is in it: a tunnel's record is written when
/// the tunnel closes, a moment after the client has read its last byte. Waits at most 5 s.
pub async fn decisions_once(
    query: &str,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    for _ in 0..100 {
        let records = decisions(query).await;
        if records.iter().any(&wanted) {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no matching record in the decision log: {:?}",
        decisions(query).await
    );
}

/// Sends one DNS query over UDP and returns (rcode, addresses), or `None` when nothing answers
/// within a second.
pub async fn dns_query(
    server: SocketAddr,
    name: &str,
    qtype: u16,
) -> Option<(u8, Vec<std::net::IpAddr>)> {
    let socket = UdpSocket::bind("0.0.0.0:0").await.unwrap();
    socket
        .send_to(
            &af_egress::dns_wire::build_query(0x4242, name, qtype),
            server,
        )
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(Duration::from_secs(1), socket.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    af_egress::dns_wire::read_response_addresses(&buf[..n])
}

/// A minimal TLS ClientHello naming `server_name`.
pub fn client_hello(server_name: &str) -> Vec<u8> {
    af_egress::client_hello::build_client_hello(Some(server_name))
}

/// JSON for the inbox, through the control API.
pub async fn inbox() -> Vec<serde_json::Value> {
    let (status, body) = control_get("/v1/inbox", Some(TOKEN)).await;
    assert!(status.contains("200"), "{status}: {body}");
    serde_json::from_str(&body).unwrap()
}

pub fn headers_of(seen: &Seen) -> Vec<String> {
    seen.lock().unwrap().clone()
}

pub fn counts(values: &[serde_json::Value], key: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for v in values {
        *out.entry(v[key].as_str().unwrap_or("").to_string())
            .or_default() += 1;
    }
    out
}
