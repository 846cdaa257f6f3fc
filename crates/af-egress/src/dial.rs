//! Dialling an allowed destination: resolve, classify, and connect to exactly the address that
//! was classified, so nothing between the check and the connection can change where it goes.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

use crate::client_hello::{HelloRead, read_client_hello};
use crate::context::Shared;
use crate::policy::{DenyReason, Target, choose_address};

/// The address to dial for an allowed target, and the address rule that permitted it when it was
/// not public.
pub async fn dial_address(
    target: &Target,
    shared: &Shared,
) -> Result<(IpAddr, Option<String>), DenyReason> {
    match target {
        // decide() already required a rule naming this literal.
        Target::Ip(ip) => Ok((*ip, None)),
        Target::Name(name) => {
            let resolved = shared.resolver.resolve(name).await;
            choose_address(&resolved, &shared.policy)
        }
    }
}

/// The rule as logged: the allow rule, and the address rule when one let a non-public address
/// through (`api.internal.example via 10.20.0.0/16`).
pub fn logged_rule(rule: String, via: Option<String>) -> String {
    match via {
        Some(address_rule) if address_rule != rule => format!("{rule} via {address_rule}"),
        _ => rule,
    }
}

pub async fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting to {addr} timed out"),
            )
        })??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads a connection's opening bytes until they hold a whole ClientHello. Returns the bytes (to
/// be replayed upstream) and the server name.
pub async fn read_hello<S: AsyncRead + Unpin>(
    stream: &mut S,
    limit: Duration,
) -> Result<(Vec<u8>, Option<String>), DenyReason> {
    let mut bytes = Vec::with_capacity(2048);
    let read = async {
        loop {
            match read_client_hello(&bytes) {
                HelloRead::Complete { server_name } => return Ok(server_name),
                HelloRead::NotTls(_) => return Err(DenyReason::NotTls),
                HelloRead::NeedMore => {
                    // Straight into `bytes`: a chunk array here would be part of the state of
                    // every tunnel's task for as long as the tunnel lives.
                    bytes.reserve(4096);
                    match stream.read_buf(&mut bytes).await {
                        Ok(0) | Err(_) => return Err(DenyReason::NotTls),
                        Ok(_) => {}
                    }
                }
            }
        }
    };
    match tokio::time::timeout(limit, read).await {
        Ok(Ok(server_name)) => Ok((bytes, server_name)),
        Ok(Err(reason)) => Err(reason),
        Err(_) => Err(DenyReason::ClientHelloTimeout),
    }
}
