//! Just enough HTTP/1.1 for the example: a thread-per-connection server and a client that honours
//! `HTTP_PROXY` / `HTTPS_PROXY` / `NO_PROXY` the way curl does, and speaks TLS to https:// URLs.
//! One request per connection (`Connection: close`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::tls;

/// Requests and responses larger than this are refused: the example never needs more.
const MAX_MESSAGE: usize = 1 << 20;
const IO_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: String,
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: format!("{value}\n"),
        }
    }

    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        502 => "Bad Gateway",
        _ => "Status",
    }
}

/// Serves `handler` on `listen` for ever, one thread per connection.
pub fn serve<H>(listen: &str, handler: H) -> std::io::Result<()>
where
    H: Fn(Request) -> Response + Send + Sync + 'static,
{
    let listener = TcpListener::bind(listen)?;
    eprintln!("listening on {listen}");
    let handler = Arc::new(handler);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let handler = handler.clone();
        std::thread::spawn(move || {
            if let Err(err) = answer(stream, handler.as_ref()) {
                eprintln!("connection failed: {err}");
            }
        });
    }
    Ok(())
}

fn answer(stream: TcpStream, handler: &dyn Fn(Request) -> Response) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut words = request_line.split_whitespace();
    let (Some(method), Some(path)) = (words.next(), words.next()) else {
        return write_response(stream, &Response::text(400, "malformed request line\n"));
    };
    let length = read_headers(&mut reader)?.content_length;
    if length > MAX_MESSAGE {
        return write_response(stream, &Response::text(400, "body too large\n"));
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let request = Request {
        method: method.to_string(),
        path: path.to_string(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    eprintln!("{} {}", request.method, request.path);
    write_response(stream, &handler(request))
}

struct Headers {
    content_length: usize,
    chunked: bool,
}

fn read_headers(reader: &mut impl BufRead) -> std::io::Result<Headers> {
    let mut headers = Headers {
        content_length: 0,
        chunked: false,
    };
    let mut read = 0;
    loop {
        let mut line = String::new();
        read += reader.read_line(&mut line)?;
        if read > MAX_MESSAGE {
            return Err(std::io::Error::other("headers too large"));
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok(headers);
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "content-length" {
            headers.content_length = value.parse().unwrap_or(0);
        } else if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
            headers.chunked = true;
        }
    }
}

fn write_response(mut stream: TcpStream, response: &Response) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len(),
        response.body
    )?;
    stream.flush()
}

/// An `http://` URL taken apart.
#[derive(Debug, PartialEq, Eq)]
struct Url<'a> {
    tls: bool,
    host: &'a str,
    port: u16,
    path: &'a str,
}

fn parse_url(url: &str) -> Result<Url<'_>, String> {
    let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => {
            return Err(format!(
                "{url}: only http:// and https:// URLs are supported"
            ));
        }
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (
            host,
            port.parse()
                .map_err(|_| format!("{url}: the port is not a number"))?,
        ),
        None => (authority, if tls { 443 } else { 80 }),
    };
    Ok(Url {
        tls,
        host,
        port,
        path,
    })
}

/// Whether `host` is on a `NO_PROXY` list (exact names, or `.suffix` / `suffix` matching below it).
fn bypasses_proxy(host: &str, no_proxy: &str) -> bool {
    no_proxy.split(',').map(str::trim).any(|entry| {
        let entry = entry.trim_start_matches('.');
        !entry.is_empty()
            && (host.eq_ignore_ascii_case(entry)
                || host
                    .to_ascii_lowercase()
                    .ends_with(&format!(".{}", entry.to_ascii_lowercase())))
    })
}

fn env_either(upper: &str, lower: &str) -> Option<String> {
    std::env::var(upper)
        .or_else(|_| std::env::var(lower))
        .ok()
        .filter(|v| !v.is_empty())
}

/// Sends one request and returns the status and body. Goes through the proxy (`HTTP_PROXY` for
/// http://, a `CONNECT` tunnel through `HTTPS_PROXY` for https://) unless `NO_PROXY` names the
/// host, as curl would. An https:// server is verified against the trust store `SSL_CERT_FILE`
/// names (else the system's), as OpenSSL-based clients do.
pub fn send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, String), String> {
    let target = parse_url(url)?;
    let no_proxy = env_either("NO_PROXY", "no_proxy").unwrap_or_default();
    let proxy = if target.tls {
        env_either("HTTPS_PROXY", "https_proxy")
    } else {
        env_either("HTTP_PROXY", "http_proxy")
    }
    .filter(|_| !bypasses_proxy(target.host, &no_proxy));
    let authority = format!("{}:{}", target.host, target.port);
    let (connect_to, request_target) = match &proxy {
        Some(proxy) => {
            let proxy = parse_url(proxy)?;
            let through = format!("{}:{}", proxy.host, proxy.port);
            // Through a tunnel the request is the server's own (origin-form).
            let request_target = if target.tls { target.path } else { url };
            (through, request_target.to_string())
        }
        None => (authority.clone(), target.path.to_string()),
    };
    let fail = |err: std::io::Error| format!("{method} {url} via {connect_to}: {err}");
    let mut stream = TcpStream::connect(&connect_to).map_err(fail)?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(fail)?;
    let mut head = format!(
        "{method} {request_target} HTTP/1.1\r\nhost: {authority}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let request = [head.as_bytes(), body.as_bytes()].concat();
    if !target.tls {
        return exchange(stream, &request).map_err(fail);
    }
    if proxy.is_some() {
        open_tunnel(&mut stream, &authority).map_err(fail)?;
    }
    let tls = tls::connect(target.host, stream).map_err(|err| format!("{method} {url}: {err}"))?;
    exchange(tls, &request).map_err(fail)
}

/// Asks the proxy on `stream` for a tunnel to `authority` and reads its answer's head.
fn open_tunnel(stream: &mut TcpStream, authority: &str) -> std::io::Result<()> {
    write!(
        stream,
        "CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n\r\n"
    )?;
    // Byte by byte: what follows the head belongs to the tunnel.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < MAX_MESSAGE {
        if stream.read(&mut byte)? == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let status_line = head.lines().next().unwrap_or_default();
    match status_line.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        _ => Err(std::io::Error::other(format!(
            "the proxy refused the tunnel: {status_line:?}"
        ))),
    }
}

/// Writes `request` and reads the answer: status and body.
fn exchange(mut stream: impl Read + Write, request: &[u8]) -> std::io::Result<(u16, String)> {
    stream.write_all(request)?;
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {status_line:?}")))?;
    let headers = read_headers(&mut reader)?;
    let mut body = Vec::new();
    if headers.chunked {
        read_chunked(&mut reader, &mut body)?;
    } else {
        let limit = if headers.content_length > 0 {
            headers.content_length.min(MAX_MESSAGE)
        } else {
            MAX_MESSAGE
        };
        match reader.take(limit as u64).read_to_end(&mut body) {
            Ok(_) => {}
            // A TLS server that closes without saying so first: what arrived is the body.
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => {}
            Err(err) => return Err(err),
        }
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

fn read_chunked(reader: &mut impl BufRead, body: &mut Vec<u8>) -> std::io::Result<()> {
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        if size == 0 || body.len() + size > MAX_MESSAGE {
            return Ok(());
        }
        let start = body.len();
        body.resize(start + size + 2, 0);
        reader.read_exact(&mut body[start..])?;
        body.truncate(start + size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("http://worker:9090/orders").unwrap(),
            Url {
                tls: false,
                host: "worker",
                port: 9090,
                path: "/orders"
            }
        );
        assert_eq!(
            parse_url("https://api.payments.example").unwrap(),
            Url {
                tls: true,
                host: "api.payments.example",
                port: 443,
                path: "/"
            }
        );
        assert!(parse_url("ftp://x/").is_err());
    }

    #[test]
    fn no_proxy_names_hosts_and_suffixes() {
        let list = "localhost,127.0.0.1,web,worker,.internal";
        assert!(bypasses_proxy("worker", list));
        assert!(bypasses_proxy("db.internal", list));
        assert!(!bypasses_proxy("api.payments.example", list));
        assert!(!bypasses_proxy("workers", list));
    }
}
