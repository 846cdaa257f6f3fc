//! Escape routes and how one is tried. Each attempt ends `denied` (the platform refused it: the
//! send failed with EPERM, a reset or an unreachable came back), `escaped` (something outside
//! answered), or `unanswered` (nothing came back in time, or the attempt could not be made). Only
//! `denied` is a pass: an unanswered question about a security control is not a pass.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Denied,
    Escaped,
    Unanswered,
}

/// How a route is tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// A TCP connection; established is escaped.
    Tcp(SocketAddr),
    /// An HTTP request; any HTTP answer is escaped, a connection closed unanswered is denied (the
    /// listener refused the client). For listeners that accept and then refuse, such as the
    /// sidecar's control API on the workloads' side.
    Http(SocketAddr),
    /// A DNS query over UDP; any answer to it is escaped.
    DnsUdp(SocketAddr),
    /// A datagram; any datagram back is escaped.
    Udp(SocketAddr),
    /// An ICMP echo request (ping socket); a reply is escaped.
    Icmp(IpAddr),
    /// A route whose target nobody configured: never judged, so never a pass.
    Unconfigured,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub name: String,
    pub kind: RouteKind,
}

impl Route {
    pub fn target(&self) -> String {
        match &self.kind {
            RouteKind::Tcp(addr) => format!("tcp {addr}"),
            RouteKind::Http(addr) => format!("http {addr}"),
            RouteKind::DnsUdp(addr) => format!("dns/udp {addr}"),
            RouteKind::Udp(addr) => format!("udp {addr}"),
            RouteKind::Icmp(ip) => format!("icmp {ip}"),
            RouteKind::Unconfigured => "not configured".to_string(),
        }
    }
}

/// Reads `NAME=KIND:ADDRESS`, KIND one of `tcp`, `http`, `dns`, `udp`, `icmp` (`icmp` takes an
/// address without a port).
pub fn parse_route(spec: &str) -> Result<Route, String> {
    let (name, rest) = spec
        .split_once('=')
        .ok_or_else(|| format!("{spec:?} is not NAME=KIND:ADDRESS"))?;
    let (kind, address) = rest
        .split_once(':')
        .ok_or_else(|| format!("{spec:?} is not NAME=KIND:ADDRESS"))?;
    let socket = || {
        address
            .parse::<SocketAddr>()
            .map_err(|_| format!("{address:?} in {spec:?} is not an address:port"))
    };
    let kind = match kind {
        "tcp" => RouteKind::Tcp(socket()?),
        "http" => RouteKind::Http(socket()?),
        "dns" => RouteKind::DnsUdp(socket()?),
        "udp" => RouteKind::Udp(socket()?),
        "icmp" => RouteKind::Icmp(
            address
                .trim_matches(['[', ']'])
                .parse()
                .map_err(|_| format!("{address:?} in {spec:?} is not an IP address"))?,
        ),
        other => {
            return Err(format!(
                "{other:?} in {spec:?} is not tcp, dns, udp or icmp"
            ));
        }
    };
    Ok(Route {
        name: name.to_string(),
        kind,
    })
}

/// One route's result, as the verdict line reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RouteResult {
    pub route: String,
    pub target: String,
    pub outcome: Outcome,
    pub detail: String,
}

/// What an error from trying a route means. Refusals the platform makes are `denied`; silence and
/// everything that prevented an answer are `unanswered`.
pub fn outcome_of(err: &io::Error) -> Outcome {
    match err.kind() {
        io::ErrorKind::PermissionDenied
        | io::ErrorKind::ConnectionRefused
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable
        | io::ErrorKind::AddrNotAvailable => Outcome::Denied,
        _ => Outcome::Unanswered,
    }
}

/// Tries one route, blocking for at most about `timeout`.
pub fn try_route(route: &Route, timeout: Duration) -> RouteResult {
    let (outcome, detail) = match attempt(&route.kind, timeout) {
        Ok(detail) => (Outcome::Escaped, detail),
        Err(err) => (outcome_of(&err), err.to_string()),
    };
    RouteResult {
        route: route.name.clone(),
        target: route.target(),
        outcome,
        detail,
    }
}

/// Tries every route at once (each on its own thread), results in the routes' order.
pub fn try_routes(routes: &[Route], timeout: Duration) -> Vec<RouteResult> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = routes
            .iter()
            .map(|route| scope.spawn(move || try_route(route, timeout)))
            .collect();
        handles
            .into_iter()
            .zip(routes)
            .map(|(handle, route)| {
                handle.join().unwrap_or_else(|_| RouteResult {
                    route: route.name.clone(),
                    target: route.target(),
                    outcome: Outcome::Unanswered,
                    detail: "the attempt crashed".to_string(),
                })
            })
            .collect()
    })
}

/// `Ok(what came back)` when the route got out.
fn attempt(kind: &RouteKind, timeout: Duration) -> io::Result<String> {
    match kind {
        RouteKind::Tcp(addr) => {
            TcpStream::connect_timeout(addr, timeout)?;
            Ok("connection established".to_string())
        }
        RouteKind::Http(addr) => http_get(*addr, timeout),
        RouteKind::DnsUdp(addr) => {
            let id = (std::process::id() as u16) ^ 0x5a5a;
            let answer = datagram(
                *addr,
                &af_wire::dns_wire::build_query(id, "probe.antifailure.invalid", 1),
                timeout,
            )?;
            if answer.len() >= 2 && answer[..2] == id.to_be_bytes() {
                Ok(format!("a DNS answer of {} bytes", answer.len()))
            } else {
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a datagram that is not the answer",
                ))
            }
        }
        RouteKind::Udp(addr) => datagram(*addr, UDP_PROBE, timeout)
            .map(|reply| format!("a datagram of {} bytes", reply.len())),
        RouteKind::Icmp(ip) => ping(*ip, timeout),
        RouteKind::Unconfigured => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no target is configured for this route",
        )),
    }
}

fn http_get(addr: SocketAddr, timeout: Duration) -> io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(
        format!("GET / HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut answer = [0u8; 64];
    let n = stream.read(&mut answer)?;
    if n == 0 {
        // Accepted and closed without a word: the listener refused this client.
        return Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "closed without an answer",
        ));
    }
    let head = String::from_utf8_lossy(&answer[..n]);
    match head.strip_prefix("HTTP/") {
        Some(_) => Ok(format!(
            "an HTTP answer: {}",
            head.lines().next().unwrap_or_default()
        )),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "an answer that is not HTTP",
        )),
    }
}

/// What a `udp` route sends: long enough that a DNS server on the port answers it (with FORMERR),
/// so a datagram that got out is seen to have got out.
const UDP_PROBE: &[u8] = b"af-probe-udp\0\0\0\0";

fn datagram(addr: SocketAddr, payload: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    let bind: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = UdpSocket::bind(bind)?;
    socket.connect(addr)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.send(payload)?;
    let mut buf = vec![0u8; 2048];
    let n = socket.recv(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// An echo request through an unprivileged ping socket (no raw socket, no NET_RAW).
fn ping(ip: IpAddr, timeout: Duration) -> io::Result<String> {
    let (domain, protocol, echo_request) = match ip {
        IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4, 8u8),
        IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6, 128u8),
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(protocol)).map_err(|err| {
        // Ping sockets are limited by net.ipv4.ping_group_range; without one nothing can be judged.
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!("cannot open a ping socket ({err})"),
        )
    })?;
    socket.set_read_timeout(Some(timeout))?;
    socket.connect(&SocketAddr::new(ip, 0).into())?;
    // type, code, checksum (the kernel fills it in), identifier (the kernel sets it), sequence.
    socket.send(&[echo_request, 0, 0, 0, 0, 0, 0, 1, b'a', b'f'])?;
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 256];
    let n = socket.recv(&mut buf)?;
    Ok(format!("an ICMP reply of {n} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_routes() {
        assert_eq!(
            parse_route("quic=udp:203.0.113.10:443").unwrap().kind,
            RouteKind::Udp("203.0.113.10:443".parse().unwrap())
        );
        assert_eq!(
            parse_route("ping=icmp:203.0.113.10").unwrap().kind,
            RouteKind::Icmp("203.0.113.10".parse().unwrap())
        );
        assert_eq!(
            parse_route("v6=icmp:[2001:db8::10]").unwrap().kind,
            RouteKind::Icmp("2001:db8::10".parse().unwrap())
        );
        assert_eq!(
            parse_route("dot=tcp:[2001:db8::53]:853").unwrap().kind,
            RouteKind::Tcp("[2001:db8::53]:853".parse().unwrap())
        );
        for bad in [
            "x",
            "x=tcp",
            "x=tcp:nowhere",
            "x=sctp:1.2.3.4:5",
            "x=icmp:1.2.3.4:5",
        ] {
            assert!(parse_route(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refusals_are_denied_and_silence_is_not() {
        use io::ErrorKind::*;
        for kind in [
            PermissionDenied,
            ConnectionRefused,
            ConnectionReset,
            HostUnreachable,
            NetworkUnreachable,
        ] {
            assert_eq!(
                outcome_of(&io::Error::from(kind)),
                Outcome::Denied,
                "{kind:?}"
            );
        }
        for kind in [TimedOut, WouldBlock, Unsupported, NotFound, InvalidData] {
            assert_eq!(
                outcome_of(&io::Error::from(kind)),
                Outcome::Unanswered,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn an_unconfigured_route_is_never_a_pass() {
        let result = try_route(
            &Route {
                name: "platform-api".into(),
                kind: RouteKind::Unconfigured,
            },
            Duration::from_millis(10),
        );
        assert_eq!(result.outcome, Outcome::Unanswered);
    }
}
