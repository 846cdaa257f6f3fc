//! The least a relay can do, as a reference for `af-bench proxy --least-relay`: a thread per
//! direction, a blocking read and a blocking write per message, no decision, no log, no parsing
//! beyond finding where the client's first request ends. Every connection goes to the origin.
//! A CONNECT is answered 200 and its bytes are passed on; anything else is forwarded to the
//! origin's port 80 byte for byte, the whole client connection over one origin connection, so
//! a keep-alive client's requests are never read as requests at all.
//!
//! It is not a proxy anyone could deploy (it decides nothing); it is a floor for one client with
//! small messages, where the rate is set by the wake-ups between the processes and no relay can
//! wake fewer times than this one (one blocking read wakes it; no event loop in between). It is
//! not one elsewhere: with bulk, splicing beats its copying, and with many clients an event loop
//! beats a thread per connection — there the CPU line's bounds are the better reference
//! (docs/performance.md).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};

use anyhow::{Context, Result};

use crate::world::ORIGIN;

/// Where a client's connection goes, from its first request's head.
#[derive(Debug, PartialEq, Eq)]
struct Route {
    /// A CONNECT: answer 200, then relay.
    tunnel: bool,
    port: u16,
}

/// A CONNECT goes to the port it names; any other request to port 80.
fn route(head: &[u8]) -> Option<Route> {
    let Some(rest) = head.strip_prefix(b"CONNECT ") else {
        return Some(Route {
            tunnel: false,
            port: 80,
        });
    };
    let authority = rest.split(|&b| b == b' ').next()?;
    let port = std::str::from_utf8(authority).ok()?.rsplit_once(':')?.1;
    Some(Route {
        tunnel: true,
        port: port.parse().ok()?,
    })
}

/// Serves on `listen` until killed.
pub fn serve(listen: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    for client in listener.incoming().flatten() {
        std::thread::spawn(move || relay(client));
    }
    Ok(())
}

fn relay(mut client: TcpStream) {
    let _ = client.set_nodelay(true);
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 1024];
    let end = loop {
        match client.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let Some(route) = route(&head) else { return };
    let Ok(mut origin) = TcpStream::connect((ORIGIN, route.port)) else {
        return;
    };
    let _ = origin.set_nodelay(true);
    let first = if route.tunnel {
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .is_err()
        {
            return;
        }
        &head[end..]
    } else {
        &head[..]
    };
    if !first.is_empty() && origin.write_all(first).is_err() {
        return;
    }
    let (Ok(client_again), Ok(origin_again)) = (client.try_clone(), origin.try_clone()) else {
        return;
    };
    std::thread::spawn(move || copy(client_again, origin_again));
    copy(origin, client);
}

/// `from` to `to` until `from` ends, then half-closes `to`.
fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = vec![0u8; 32 << 10];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_goes_to_the_port_it_names_and_anything_else_to_80() {
        assert_eq!(
            route(b"CONNECT origin.bench.test:443 HTTP/1.1\r\n\r\n"),
            Some(Route {
                tunnel: true,
                port: 443
            })
        );
        assert_eq!(
            route(b"GET http://origin.bench.test/ HTTP/1.1\r\n\r\n"),
            Some(Route {
                tunnel: false,
                port: 80
            })
        );
        assert_eq!(route(b"CONNECT origin.bench.test HTTP/1.1\r\n\r\n"), None);
        assert_eq!(
            route(b"CONNECT origin.bench.test:https HTTP/1.1\r\n\r\n"),
            None
        );
    }
}
