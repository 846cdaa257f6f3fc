//! TLS: CONNECT tunnels through the forward proxy, and transparent TLS clients on port 443. Both
//! are decided by name (the CONNECT host, or the ClientHello's server name); an allowed one is
//! spliced to the checked address without terminating TLS, a captured one is answered by the
//! sidecar ([`crate::tls_capture`]). A CONNECT whose ClientHello names another server than the
//! CONNECT host is refused (domain fronting).

use std::net::SocketAddr;
use std::sync::Arc;

use af_runtime::Verdict;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::accept::Admitted;
use crate::body::{ProxyBody, full};
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::dial::{connect as dial, dial_address, logged_rule, read_hello};
use crate::http_proxy::{AdmissionSlot, refuse_invalid_host, relay_once_switched};
use crate::policy::{Decision, DenyReason, Target, decide};
use crate::refusal::Refusal;
use crate::splice;
use crate::tls_capture::{self, CapturedConnection, NO_CA_NOTE};

/// Bytes read per system call in each direction of a tunnel that is copied: large enough that a
/// 1 MiB download is a few dozen reads, not a hundred and twenty-eight.
const TUNNEL_BUFFER: usize = 32 << 10;

/// The port transparent TLS clients meant to reach.
const HTTPS_PORT: u16 = 443;

/// Handles `CONNECT host:port`: decides, answers 200, then checks the ClientHello and splices.
pub async fn connect(
    mut req: Request<Incoming>,
    peer: SocketAddr,
    shared: Arc<Shared>,
    admission: AdmissionSlot,
) -> Response<ProxyBody> {
    let Some(authority) = req.uri().authority().cloned() else {
        return Refusal::not_forwardable(
            StatusCode::BAD_REQUEST,
            "the CONNECT names no host:port",
            "send CONNECT host:port",
        )
        .into_response();
    };
    let host = authority.host().to_string();
    let port = authority.port_u16().unwrap_or(HTTPS_PORT);
    let mut pending = Pending::new(&shared.environment, peer, "connect", "CONNECT", &host, port);
    let Some(target) = Target::parse(&host) else {
        return refuse_invalid_host(pending, &shared);
    };
    let rule = match decide(&target, &shared.policy) {
        Decision::Deny { reason } => {
            pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
            return Refusal::denied(&target, &reason).into_response();
        }
        Decision::Capture { rule, response } => {
            if shared.capture_ca.is_none() {
                pending.finish(
                    &shared.log,
                    Verdict::Capture,
                    &format!("{rule} ({NO_CA_NOTE})"),
                    0,
                    0,
                );
                return Refusal::capture_without_ca(&target, NO_CA_NOTE).into_response();
            }
            let captured = CapturedConnection {
                peer,
                protocol: "connect",
                host,
                port,
                rule,
                response: response.clone(),
            };
            let switching = hyper::upgrade::on(&mut req);
            relay_once_switched(switching, &admission, "CONNECT", move |client| async move {
                if let Some(client) = client {
                    capture_tunnel(client, captured, shared).await;
                }
            });
            return Response::new(full(""));
        }
        Decision::Allow { rule } => rule,
    };
    let (ip, via) = match dial_address(&target, &shared).await {
        Ok(chosen) => chosen,
        Err(reason) => {
            pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
            return Refusal::denied(&target, &reason).into_response();
        }
    };
    let addr = SocketAddr::new(ip, port);
    pending.set_resolved(addr);
    let rule = logged_rule(rule, via);
    // Dialled before the 200, as squid does, so a client whose allowed destination cannot be
    // reached is told so (502) instead of getting a tunnel that closes at once. The connection
    // carries nothing of the client's until its ClientHello has been checked.
    let upstream = match dial(addr, shared.limits.connect_timeout()).await {
        Ok(stream) => stream,
        Err(err) => {
            pending.finish(&shared.log, Verdict::Allow, &rule, 0, 0);
            return Refusal::unreachable(addr, &err).into_response();
        }
    };
    let switching = hyper::upgrade::on(&mut req);
    relay_once_switched(switching, &admission, "CONNECT", move |client| async move {
        match client {
            Some(client) => splice_tls(client, &target, upstream, pending, &rule, &shared).await,
            None => pending.finish(&shared.log, Verdict::Allow, &rule, 0, 0),
        }
    });
    Response::new(full(""))
}

/// A CONNECT tunnel to a captured host: its ClientHello may name no server or the CONNECT host (the
/// certificate is made for that name), then the sidecar answers it.
async fn capture_tunnel<C>(mut client: C, captured: CapturedConnection, shared: Arc<Shared>)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let refuse = |reason: DenyReason| {
        Pending::new(
            &shared.environment,
            captured.peer,
            captured.protocol,
            "CONNECT",
            &captured.host,
            captured.port,
        )
        .finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0)
    };
    let (hello, server_name) =
        match read_hello(&mut client, shared.limits.client_hello_timeout()).await {
            Ok(read) => read,
            Err(reason) => return refuse(reason),
        };
    if let Some(sni) = server_name.filter(|sni| !sni.eq_ignore_ascii_case(&captured.host)) {
        return refuse(DenyReason::SniMismatch { sni });
    }
    tls_capture::answer(client, hello, captured, shared.clone()).await;
}

/// Reads the ClientHello, checks its server name against `target`, replays the hello to
/// `upstream` and relays both ways until either side closes. Records the decision at the end.
async fn splice_tls<C>(
    mut client: C,
    target: &Target,
    upstream: TcpStream,
    pending: Pending,
    rule: &str,
    shared: &Shared,
) where
    C: AsyncRead + AsyncWrite + Unpin + IntoSocket,
{
    let (hello, server_name) =
        match read_hello(&mut client, shared.limits.client_hello_timeout()).await {
            Ok(read) => read,
            Err(reason) => {
                return pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
            }
        };
    if let Err(reason) = check_server_name(target, server_name.as_deref(), shared) {
        return pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
    }
    relay_to(client, hello, &[], upstream, pending, rule, shared).await;
}

/// Domain fronting: a tunnel to an allowed name must carry that name in its ClientHello. A tunnel
/// to an allowed IP literal may carry no name, or a name the policy allows too.
fn check_server_name(
    target: &Target,
    server_name: Option<&str>,
    shared: &Shared,
) -> Result<(), DenyReason> {
    let mismatch = || DenyReason::SniMismatch {
        sni: server_name.unwrap_or("(none)").to_string(),
    };
    match (target, server_name) {
        (Target::Name(name), Some(sni)) if sni == name => Ok(()),
        (Target::Name(_), _) => Err(mismatch()),
        (Target::Ip(_), None) => Ok(()),
        (Target::Ip(_), Some(sni)) => {
            match Target::parse(sni).map(|t| decide(&t, &shared.policy)) {
                Some(Decision::Allow { .. }) => Ok(()),
                _ => Err(mismatch()),
            }
        }
    }
}

/// Writes the bytes already read from the client to `upstream` (and those already read from
/// upstream, `for_client`, to the client), then relays both ways: in the kernel when the client
/// is a plain socket underneath ([`crate::splice`]), by copying otherwise.
pub(crate) async fn relay_to<C>(
    client: C,
    already_read: Vec<u8>,
    for_client: &[u8],
    mut upstream: TcpStream,
    pending: Pending,
    rule: &str,
    shared: &Shared,
) where
    C: AsyncRead + AsyncWrite + Unpin + IntoSocket,
{
    let (mut client, rest) = match client.into_socket() {
        Ok((socket, rest)) => (Ok(socket), rest),
        Err(client) => (Err(client), bytes::Bytes::new()),
    };
    for first in [&already_read[..], &rest[..]] {
        if upstream.write_all(first).await.is_err() {
            return pending.finish(&shared.log, Verdict::Allow, rule, 0, 0);
        }
    }
    let handed = match &mut client {
        Ok(socket) => socket.write_all(for_client).await,
        Err(client) => client.write_all(for_client).await,
    };
    if handed.is_err() {
        return pending.finish(&shared.log, Verdict::Allow, rule, 0, 0);
    }
    // Let go of both before the tunnel's long relay: `rest` may hold the whole of hyper's read
    // buffer for this connection (8 KiB or more) however few bytes are left in it.
    let first_bytes = (already_read.len() + rest.len()) as u64;
    drop((already_read, rest));
    let (up, down) = match client {
        Ok(mut socket) => splice::relay(&mut socket, &mut upstream).await,
        Err(mut client) => tokio::io::copy_bidirectional_with_sizes(
            &mut client,
            &mut upstream,
            TUNNEL_BUFFER,
            TUNNEL_BUFFER,
        )
        .await
        .unwrap_or((0, 0)),
    };
    let (up, down) = (up + first_bytes, down + for_client.len() as u64);
    shared.metrics.bytes(up, down);
    pending.finish(&shared.log, Verdict::Allow, rule, up, down);
}

/// A tunnel's client side that may be a plain socket underneath, so the tunnel can be spliced.
pub(crate) trait IntoSocket: Sized {
    /// The socket and the bytes already read from it but not yet relayed; `Err(self)` when there
    /// is no plain socket.
    fn into_socket(self) -> Result<(TcpStream, bytes::Bytes), Self>;
}

impl IntoSocket for TcpStream {
    fn into_socket(self) -> Result<(TcpStream, bytes::Bytes), Self> {
        Ok((self, bytes::Bytes::new()))
    }
}

impl IntoSocket for TokioIo<hyper::upgrade::Upgraded> {
    fn into_socket(self) -> Result<(TcpStream, bytes::Bytes), Self> {
        match self.into_inner().downcast::<TokioIo<TcpStream>>() {
            Ok(parts) => Ok((parts.io.into_inner(), parts.read_buf)),
            Err(upgraded) => Err(TokioIo::new(upgraded)),
        }
    }
}

/// Serves transparent TLS clients on `listener` for ever.
pub async fn serve_transparent_tls(listener: TcpListener, shared: Arc<Shared>) {
    crate::accept::accept_workloads(listener, "tls", shared.clone(), |stream, peer, admitted| {
        transparent_tls(stream, peer, admitted, shared.clone())
    })
    .await;
}

/// A client that resolved an outside name to the sidecar and opened TLS to it: decided by the
/// ClientHello's server name, spliced to the real host when allowed, closed otherwise.
async fn transparent_tls(
    mut stream: TcpStream,
    peer: SocketAddr,
    _admitted: Admitted,
    shared: Arc<Shared>,
) {
    let _ = stream.set_nodelay(true);
    let unnamed = || {
        Pending::new(
            &shared.environment,
            peer,
            "tls-transparent",
            "TLS",
            "",
            HTTPS_PORT,
        )
    };
    let (hello, server_name) =
        match read_hello(&mut stream, shared.limits.client_hello_timeout()).await {
            Ok(read) => read,
            Err(reason) => {
                return unnamed().finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0);
            }
        };
    let Some(server_name) = server_name else {
        return unnamed().finish(
            &shared.log,
            Verdict::Deny,
            &DenyReason::NoServerName.to_string(),
            0,
            0,
        );
    };
    let mut pending = Pending::new(
        &shared.environment,
        peer,
        "tls-transparent",
        "TLS",
        &server_name,
        HTTPS_PORT,
    );
    let Some(target) = Target::parse(&server_name) else {
        return pending.finish(
            &shared.log,
            Verdict::Deny,
            &DenyReason::InvalidHost.to_string(),
            0,
            0,
        );
    };
    match decide(&target, &shared.policy) {
        Decision::Deny { reason } => {
            pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0)
        }
        Decision::Capture { rule, response } => {
            let captured = CapturedConnection {
                peer,
                protocol: "tls-transparent",
                host: server_name,
                port: HTTPS_PORT,
                rule,
                response: response.clone(),
            };
            tls_capture::answer(stream, hello, captured, shared.clone()).await;
        }
        Decision::Allow { rule } => match dial_address(&target, &shared).await {
            Err(reason) => pending.finish(&shared.log, Verdict::Deny, &reason.to_string(), 0, 0),
            Ok((ip, via)) => {
                let addr = SocketAddr::new(ip, HTTPS_PORT);
                pending.set_resolved(addr);
                let rule = logged_rule(rule, via);
                match dial(addr, shared.limits.connect_timeout()).await {
                    Ok(upstream) => {
                        relay_to(stream, hello, &[], upstream, pending, &rule, &shared).await;
                    }
                    // The client's TLS handshake ends with the connection: nothing else can
                    // be said to a client that believes it talks to the server.
                    Err(err) => {
                        tracing::debug!(%addr, error = %err, "upstream unreachable");
                        pending.finish(&shared.log, Verdict::Allow, &rule, 0, 0);
                    }
                }
            }
        },
    }
}
