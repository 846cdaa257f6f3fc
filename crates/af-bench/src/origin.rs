//! The origin side, run inside the benchmark's namespace: an HTTP server, the same behind a fake
//! TLS handshake (it swallows one ClientHello record, then speaks HTTP — neither proxy looks past
//! the hello), and a DNS server that answers every query.

use std::sync::Arc;

use anyhow::Result;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

use crate::world::{ORIGIN, UPSTREAM_DNS};

pub const SMALL_BYTES: usize = 100;
pub const LARGE_BYTES: usize = 1 << 20;

pub async fn serve() -> Result<()> {
    let small: Arc<Vec<u8>> = Arc::new(response(SMALL_BYTES));
    let large: Arc<Vec<u8>> = Arc::new(response(LARGE_BYTES));
    let http = TcpListener::bind((ORIGIN, 80)).await?;
    let tls = TcpListener::bind((ORIGIN, 443)).await?;
    let dns = UdpSocket::bind((UPSTREAM_DNS, 53)).await?;
    tokio::spawn(accept(http, false, small.clone(), large.clone()));
    tokio::spawn(accept(tls, true, small, large));
    answer_dns(dns).await
}

fn response(size: usize) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {size}\r\n\r\n").into_bytes();
    out.resize(out.len() + size, b'x');
    out
}

async fn accept(listener: TcpListener, fake_tls: bool, small: Arc<Vec<u8>>, large: Arc<Vec<u8>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (small, large) = (small.clone(), large.clone());
        tokio::spawn(async move {
            let _ = serve_connection(stream, fake_tls, &small, &large).await;
        });
    }
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    fake_tls: bool,
    small: &[u8],
    large: &[u8],
) -> std::io::Result<()> {
    if fake_tls {
        let mut header = [0u8; 5];
        stream.read_exact(&mut header).await?;
        let mut record = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
        stream.read_exact(&mut record).await?;
    }
    let mut buf = Vec::with_capacity(4096);
    loop {
        let end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end + 4);
        let body = if head.starts_with("get /large")
            || head.starts_with("get http://origin.bench.test/large")
        {
            large
        } else {
            small
        };
        stream.write_all(body).await?;
        if head.contains("connection: close") {
            return Ok(());
        }
    }
}

async fn answer_dns(socket: UdpSocket) -> Result<()> {
    let mut buf = vec![0u8; 2048];
    loop {
        let (n, from) = socket.recv_from(&mut buf).await?;
        if n < 12 {
            continue;
        }
        // Header and question only (an EDNS record the forwarder added is dropped), then one answer.
        let mut end = 12;
        while end < n && buf[end] != 0 {
            end += 1 + usize::from(buf[end]);
        }
        let question_end = (end + 5).min(n);
        let mut reply = buf[..question_end].to_vec();
        reply[2] |= 0x80;
        reply[3] |= 0x80;
        reply[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
        reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 51, 100, 1]);
        let _ = socket.send_to(&reply, from).await;
    }
}
