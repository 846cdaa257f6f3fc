//! What the conformance agent does when asked, each answered as JSON: an error is an answer too
//! (`{"error": ...}`), since "it could not" is often exactly what the suite wants to see.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::agent_wire::{exchange, open_tunnel, split_url};

const TIMEOUT: Duration = Duration::from_secs(5);

/// `HTTP_PROXY` as the environment gives it: the sidecar's `host:port`.
pub(crate) fn proxy_server() -> Option<String> {
    let proxy = std::env::var("HTTP_PROXY")
        .or_else(|_| std::env::var("http_proxy"))
        .ok()?;
    split_url(&proxy).map(|(server, _)| server)
}

pub(crate) fn failed(err: impl std::fmt::Display) -> Value {
    json!({"error": err.to_string()})
}

#[derive(Debug, Deserialize)]
pub struct FetchRequest {
    pub url: String,
    /// Through the sidecar's proxy (`HTTP_PROXY`), or straight to the URL's host.
    #[serde(default)]
    pub via_proxy: bool,
    #[serde(default = "get")]
    pub method: String,
    #[serde(default)]
    pub body: String,
}

fn get() -> String {
    "GET".into()
}

/// One HTTP request; `{"status", "body"}` or `{"error"}`.
pub fn fetch(request: &FetchRequest) -> Value {
    let Some((server, path)) = split_url(&request.url) else {
        return failed(format!("{} is not an http:// URL", request.url));
    };
    let (connect_to, target) = if request.via_proxy {
        match proxy_server() {
            Some(proxy) => (proxy, request.url.clone()),
            None => return failed("HTTP_PROXY is not set"),
        }
    } else {
        (server.clone(), path)
    };
    let message = format!(
        "{} {target} HTTP/1.1\r\nhost: {server}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        request.method,
        request.body.len(),
        request.body
    );
    match exchange(&connect_to, message.as_bytes(), TIMEOUT) {
        Ok((status, body)) => json!({"status": status, "body": String::from_utf8_lossy(&body)}),
        Err(err) => failed(format!("{connect_to}: {err}")),
    }
}

/// POSTs to `url` (directly) until it answers 2xx or `patience` runs out; the last answer.
pub fn post_with_retries(url: &str, patience: Duration) -> Value {
    let started = Instant::now();
    loop {
        let answer = fetch(&FetchRequest {
            url: url.to_string(),
            via_proxy: false,
            method: "POST".into(),
            body: String::new(),
        });
        let ok = answer["status"]
            .as_u64()
            .is_some_and(|s| (200..300).contains(&s));
        if ok || started.elapsed() > patience {
            return json!({"url": url, "answer": answer});
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[derive(Debug, Deserialize)]
pub struct ConnectRequest {
    /// `host:port` asked for in the CONNECT line.
    pub target: String,
    /// The server name the ClientHello carries.
    pub sni: String,
}

/// CONNECT through the sidecar, then a ClientHello naming `sni`. `after_hello` tells what the
/// tunnel did next: `closed` (refused), `data` (something answered), `open` (silence: the tunnel
/// stayed up).
pub fn connect_and_hello(request: &ConnectRequest) -> Value {
    let Some(proxy) = proxy_server() else {
        return failed("HTTP_PROXY is not set");
    };
    let attempt = || -> io::Result<Value> {
        let (mut stream, status) = open_tunnel(&proxy, &request.target, TIMEOUT)?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        if status != 200 {
            return Ok(json!({"connect_status": status}));
        }
        stream.write_all(&af_wire::client_hello::build_client_hello(Some(
            &request.sni,
        )))?;
        let mut buffer = [0u8; 256];
        let after = match stream.read(&mut buffer) {
            Ok(0) => "closed",
            Ok(_) => "data",
            Err(err) if err.kind() == io::ErrorKind::ConnectionReset => "closed",
            Err(_) => "open",
        };
        Ok(json!({"connect_status": status, "after_hello": after}))
    };
    attempt().unwrap_or_else(failed)
}

#[derive(Debug, Deserialize)]
pub struct DnsRequest {
    pub server: String,
    pub name: String,
    /// 1 = A, 16 = TXT, 15 = MX, 10 = NULL.
    pub qtype: u16,
    #[serde(default)]
    pub tcp: bool,
}

/// One DNS question; `{"rcode", "addresses"}` or `{"error"}`.
pub fn ask_dns(request: &DnsRequest) -> Value {
    let id = (std::process::id() as u16).wrapping_mul(31) ^ request.qtype;
    let query = af_wire::dns_wire::build_query(id, &request.name, request.qtype);
    let answer = if request.tcp {
        dns_over_tcp(&request.server, &query)
    } else {
        dns_over_udp(&request.server, &query)
    };
    match answer.map(|bytes| af_wire::dns_wire::read_response_addresses(&bytes)) {
        Ok(Some((rcode, addresses))) => json!({"rcode": rcode, "addresses": addresses}),
        Ok(None) => failed("an answer that is not a DNS response"),
        Err(err) => failed(format!("{}: {err}", request.server)),
    }
}

fn dns_over_udp(server: &str, query: &[u8]) -> io::Result<Vec<u8>> {
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    socket.connect(server)?;
    socket.set_read_timeout(Some(TIMEOUT))?;
    socket.send(query)?;
    let mut buffer = vec![0u8; 4096];
    let n = socket.recv(&mut buffer)?;
    buffer.truncate(n);
    Ok(buffer)
}

fn dns_over_tcp(server: &str, query: &[u8]) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(server)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    let length = u16::try_from(query.len()).map_err(io::Error::other)?;
    stream.write_all(&length.to_be_bytes())?;
    stream.write_all(query)?;
    let mut prefix = [0u8; 2];
    stream.read_exact(&mut prefix)?;
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
    stream.read_exact(&mut message)?;
    Ok(message)
}

#[derive(Debug, Deserialize)]
pub struct MailRequest {
    pub server: String,
    pub from: String,
    pub to: String,
    pub subject: String,
    pub body: String,
    /// Ask for STARTTLS after EHLO and send the message inside TLS, the server verified against
    /// the trust store the environment names (`SSL_CERT_FILE`), as a mailer that requires TLS
    /// does.
    #[serde(default)]
    pub starttls: bool,
    /// Speak TLS from the first byte (SMTPS, port 465), the server verified the same way.
    #[serde(default)]
    pub implicit_tls: bool,
}

/// One message over SMTP, plain, after STARTTLS, or over implicit TLS; `{"sent": true}` or
/// `{"error"}` naming the step that failed.
pub fn send_mail(request: &MailRequest) -> Value {
    let message = format!(
        "From: {}\r\nTo: {}\r\nSubject: {}\r\n\r\n{}\r\n.\r\n",
        request.from, request.to, request.subject, request.body
    );
    // Each step: what to send and the reply code it must get.
    let envelope: [(String, &str); 6] = [
        ("EHLO agent\r\n".into(), "250"),
        (format!("MAIL FROM:<{}>\r\n", request.from), "250"),
        (format!("RCPT TO:<{}>\r\n", request.to), "250"),
        ("DATA\r\n".into(), "354"),
        (message, "250"),
        ("QUIT\r\n".into(), "221"),
    ];
    // The server's name, for verifying its certificate.
    let host = request
        .server
        .rsplit_once(':')
        .map_or(request.server.as_str(), |(host, _)| host);
    let secure = |stream: TcpStream| -> Result<_, String> {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host}: {e}"))?;
        let connection =
            rustls::ClientConnection::new(crate::agent_https::environment_trust()?, name)
                .map_err(|e| e.to_string())?;
        Ok(BufReader::new(rustls::StreamOwned::new(connection, stream)))
    };
    let conversation = || -> Result<(), String> {
        let stream = TcpStream::connect(&request.server).map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(TIMEOUT))
            .map_err(|e| e.to_string())?;
        if request.implicit_tls {
            let mut secured = secure(stream)?;
            smtp_step(&mut secured, "", "220").map_err(|e| format!("over TLS: {e}"))?;
            return envelope
                .iter()
                .try_for_each(|(say, want)| smtp_step(&mut secured, say, want))
                .map_err(|e| format!("over TLS: {e}"));
        }
        let mut plain = BufReader::new(stream);
        smtp_step(&mut plain, "", "220")?;
        if !request.starttls {
            return envelope
                .iter()
                .try_for_each(|(say, want)| smtp_step(&mut plain, say, want));
        }
        smtp_step(&mut plain, "EHLO agent\r\n", "250")?;
        smtp_step(&mut plain, "STARTTLS\r\n", "220")?;
        if !plain.buffer().is_empty() {
            return Err("the server said more before the handshake".into());
        }
        let mut secured = secure(plain.into_inner())?;
        envelope
            .iter()
            .try_for_each(|(say, want)| smtp_step(&mut secured, say, want))
            .map_err(|e| format!("inside TLS: {e}"))
    };
    match conversation() {
        Ok(()) => json!({"sent": true}),
        Err(err) => failed(err),
    }
}

/// Says `say` (nothing, for the greeting) and reads the whole reply, whose code must be `want`.
fn smtp_step<S: Read + Write>(
    stream: &mut BufReader<S>,
    say: &str,
    want: &str,
) -> Result<(), String> {
    stream
        .get_mut()
        .write_all(say.as_bytes())
        .map_err(|e| format!("sending {say:?}: {e}"))?;
    // Replies may span lines ("250-..."); the last line has a space after the code.
    loop {
        let mut line = String::new();
        stream
            .read_line(&mut line)
            .map_err(|e| format!("reading the reply to {say:?}: {e}"))?;
        if !line.starts_with(want) {
            return Err(format!("{say:?} got {:?}, not {want}", line.trim_end()));
        }
        if line.as_bytes().get(3) != Some(&b'-') {
            return Ok(());
        }
    }
}

/// E17: what a workload without NET_ADMIN and NET_RAW gets when it tries to open raw sockets or
/// change the filter. Each is `denied: <why>` or `allowed`.
pub fn tamper() -> Value {
    use socket2::{Domain, Protocol, Socket, Type};
    let verdict = |result: io::Result<()>| match result {
        Ok(()) => "allowed".to_string(),
        Err(err) => format!("denied: {err}"),
    };
    let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)).map(drop);
    // AF_PACKET (17): every frame on the interface, the filter bypassed.
    let packet = Socket::new(Domain::from(17), Type::RAW, None).map(drop);
    let iptables = [
        "/usr/sbin/xtables-nft-multi",
        "/usr/sbin/iptables",
        "/sbin/iptables",
    ]
    .into_iter()
    .find(|path| std::path::Path::new(path).exists())
    .map(|path| {
        let mut command = std::process::Command::new(path);
        if path.ends_with("multi") {
            command.arg("iptables");
        }
        match command.args(["-w", "-F"]).output() {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(io::Error::other(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            )),
            Err(err) => Err(err),
        }
    });
    json!({
        "raw_socket": verdict(raw),
        "packet_socket": verdict(packet),
        "iptables_flush": iptables.map_or_else(|| "no iptables program here".to_string(), verdict),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_reports_an_unreachable_server_as_an_error() {
        let answer = fetch(&FetchRequest {
            url: "http://127.0.0.1:1/x".into(),
            via_proxy: false,
            method: "GET".into(),
            body: String::new(),
        });
        assert!(
            answer["error"].as_str().unwrap().contains("127.0.0.1:1"),
            "{answer}"
        );
        let not_http = fetch(&FetchRequest {
            url: "ftp://x".into(),
            via_proxy: false,
            method: "GET".into(),
            body: String::new(),
        });
        assert!(not_http["error"].is_string());
    }

    /// A one-line message to `server`, after STARTTLS or not.
    fn mail_to(server: String, starttls: bool) -> MailRequest {
        MailRequest {
            server,
            from: "a@b.example".into(),
            to: "c@d.example".into(),
            subject: "s".into(),
            body: "b".into(),
            starttls,
            implicit_tls: false,
        }
    }

    #[test]
    fn a_mail_conversation_reports_the_step_that_failed() {
        // A server that greets with the wrong code.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.write_all(b"554 go away\r\n").unwrap();
        });
        let answer = send_mail(&mail_to(server, false));
        assert!(
            answer["error"].as_str().unwrap().contains("554 go away"),
            "{answer}"
        );
    }

    #[test]
    fn a_server_that_refuses_starttls_is_reported_not_bypassed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            writer.write_all(b"220 hi\r\n").unwrap();
            for reply in ["250 ok\r\n", "454 4.7.0 TLS not available\r\n"] {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                writer.write_all(reply.as_bytes()).unwrap();
            }
        });
        let answer = send_mail(&mail_to(server, true));
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.contains("STARTTLS") && error.contains("454"),
            "{answer}"
        );
    }
}
