//! The few bytes of HTTP/1.1 the conformance agent speaks: one request per connection, in and out.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Larger messages are refused: the agent's requests and answers are small JSON documents.
const LIMIT: usize = 1 << 20;

/// A request as the agent's server reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct Incoming {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

/// Reads the head's lines until the blank one; returns the first line and the body's length.
fn read_head(reader: &mut impl BufRead) -> io::Result<(String, usize)> {
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let mut length = 0usize;
    let mut total = first.len();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line)?;
        total += n;
        if n == 0 || total > LIMIT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "head too long or cut",
            ));
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok((first.trim_end().to_string(), length));
        }
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
}

fn read_body(reader: &mut impl Read, length: usize) -> io::Result<Vec<u8>> {
    if length > LIMIT {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "body too long"));
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    Ok(body)
}

/// Reads one request from a client.
pub fn read_request(stream: &TcpStream) -> io::Result<Incoming> {
    let mut reader = BufReader::new(stream);
    let (first, length) = read_head(&mut reader)?;
    let mut words = first.split(' ');
    let (Some(method), Some(path)) = (words.next(), words.next()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no request line",
        ));
    };
    Ok(Incoming {
        method: method.to_string(),
        path: path.to_string(),
        body: read_body(&mut reader, length)?,
    })
}

/// Writes one response and closes.
pub fn write_response(mut stream: &TcpStream, status: u16, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} agent\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

/// Sends `request` (a whole HTTP/1.1 message) to `server` and reads the answer: status and body.
pub fn exchange(server: &str, request: &[u8], timeout: Duration) -> io::Result<(u16, Vec<u8>)> {
    use std::net::ToSocketAddrs;
    let address = server.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{server} resolves to nothing"),
        )
    })?;
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(request)?;
    read_answer(BufReader::new(stream))
}

/// Reads one HTTP/1.1 answer: status and body.
pub fn read_answer(mut reader: impl BufRead) -> io::Result<(u16, Vec<u8>)> {
    let (status_line, length) = read_head(&mut reader)?;
    let status = status_of(&status_line).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not an HTTP answer: {status_line:?}"),
        )
    })?;
    let mut body = Vec::new();
    if length > 0 {
        body = read_body(&mut reader, length)?;
    } else {
        reader.take(LIMIT as u64).read_to_end(&mut body)?;
    }
    Ok((status, body))
}

fn status_of(status_line: &str) -> Option<u16> {
    status_line.split(' ').nth(1).and_then(|s| s.parse().ok())
}

/// Opens `CONNECT target` through `proxy`; the stream and the proxy's status (the tunnel is open
/// only on 200). The answer's head is read whole, nothing after it.
pub fn open_tunnel(proxy: &str, target: &str, timeout: Duration) -> io::Result<(TcpStream, u16)> {
    use std::net::ToSocketAddrs;
    let address = proxy
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::other("the proxy resolves to nothing"))?;
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n"
    )?;
    // Byte by byte, so nothing the tunnel carries after the head is read here.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 || head.len() > LIMIT {
            break;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let status = status_of(head.lines().next().unwrap_or_default()).unwrap_or(0);
    Ok((stream, status))
}

/// An `http://host[:port]/path` URL: the server to connect to and the path.
pub fn split_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let server = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Some((
        server,
        if path.is_empty() {
            "/".to_string()
        } else {
            path.to_string()
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_server_and_path() {
        assert_eq!(
            split_url("http://ledger:8080/mark/x"),
            Some(("ledger:8080".into(), "/mark/x".into()))
        );
        assert_eq!(
            split_url("http://captured.example"),
            Some(("captured.example:80".into(), "/".into()))
        );
        assert_eq!(
            split_url("http://[2001:db8::1]/x"),
            Some(("[2001:db8::1]:80".into(), "/x".into()))
        );
        assert_eq!(split_url("https://x/"), None);
    }

    #[test]
    fn a_request_head_gives_its_body_length() {
        let mut input: &[u8] = b"POST /try HTTP/1.1\r\nContent-Length: 2\r\nhost: a\r\n\r\n{}";
        let (first, length) = read_head(&mut input).unwrap();
        assert_eq!(first, "POST /try HTTP/1.1");
        assert_eq!(length, 2);
        let mut cut: &[u8] = b"GET / HTTP/1.1\r\nhost: a\r\n";
        assert!(read_head(&mut cut).is_err());
    }
}
