//! The SMTP sink: outbound mail is accepted and put in the inbox, never delivered. With mail
//! capture off, every session is refused at the greeting and recorded as denied.
//!
//! With the environment's capture CA (`tls_capture`), the sink offers STARTTLS (RFC 3207) and
//! answers the handshake with a certificate for the name the client asked for, signed by that CA,
//! as HTTPS capture does: mailers that insist on TLS (Django's `EMAIL_USE_TLS`, submission on 587)
//! are captured too. Without the CA it is not offered, and a client that asks anyway is told it
//! is not available. On the SMTPS listener (implicit TLS, RFC 8314) the handshake comes first and
//! is answered the same way; a session that cannot be answered there is closed and recorded.

use std::net::SocketAddr;
use std::sync::Arc;

use af_manifest::MailPolicy;
use af_runtime::Verdict;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::accept::Admitted;
use crate::budget::Claim;
use crate::context::Shared;
use crate::decision_log::Pending;
use crate::policy::DenyReason;
use crate::tls_capture;

/// The longest command line accepted (RFC 5321 allows 512; extensions add a little).
const MAX_LINE: usize = 2048;
const MAX_RECIPIENTS: usize = 100;

const GREETING: &[u8] = b"220 af-sidecar ESMTP mail capture; nothing is delivered\r\n";

/// Serves SMTP clients on `listener` for ever.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    crate::accept::accept_workloads(
        listener,
        "smtp",
        shared.clone(),
        |stream, client, admitted| session(stream, client, admitted, shared.clone()),
    )
    .await;
}

/// A message as parsed from its DATA.
#[derive(Debug, Default, PartialEq, Eq)]
struct Message {
    subject: String,
    from_header: String,
    body: String,
}

/// Splits a message into its headers (unfolded) and body.
fn parse_message(data: &str) -> Message {
    let (head, body) = data
        .split_once("\r\n\r\n")
        .or_else(|| data.split_once("\n\n"))
        .unwrap_or((data, ""));
    let mut message = Message {
        body: body.to_string(),
        ..Message::default()
    };
    let mut unfolded: Vec<String> = Vec::new();
    for line in head.lines() {
        match (line.starts_with([' ', '\t']), unfolded.last_mut()) {
            (true, Some(last)) => last.push_str(line),
            _ => unfolded.push(line.to_string()),
        }
    }
    for line in unfolded {
        if let Some((name, value)) = line.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "subject" => message.subject = value.trim().to_string(),
                "from" => message.from_header = value.trim().to_string(),
                _ => {}
            }
        }
    }
    message
}

/// The address inside `FROM:<a@b>` / `TO:<a@b>`.
fn path_argument(argument: &str) -> String {
    let argument = argument.trim();
    let inner = argument
        .split_once('<')
        .and_then(|(_, rest)| rest.split_once('>'))
        .map_or(argument, |(address, _)| address);
    inner.trim().to_string()
}

/// Whether the session can start TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tls {
    /// The sidecar has a capture CA: STARTTLS is offered.
    Offered,
    /// The session runs over TLS, started with STARTTLS.
    Started,
    /// The session runs over TLS from its first byte (SMTPS, RFC 8314).
    Implicit,
    /// No capture CA.
    Unavailable,
}

/// How a conversation ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    Closed,
    /// The client asked for TLS and was told to go ahead.
    StartTls,
}

/// Where a session is, for its decision records.
struct Peer<'a> {
    client: SocketAddr,
    port: u16,
    shared: &'a Shared,
}

async fn session(stream: TcpStream, client: SocketAddr, _admitted: Admitted, shared: Arc<Shared>) {
    let port = stream.local_addr().map(|a| a.port()).unwrap_or(25);
    let (read, mut write) = stream.into_split();
    if shared.policy.mail == MailPolicy::Deny {
        Pending::new(&shared.environment, client, "smtp", "CONNECT", "", port).finish(
            &shared.log,
            Verdict::Deny,
            &DenyReason::Mail.to_string(),
            0,
            0,
        );
        let _ = write
            .write_all(b"554 5.7.1 outbound mail is denied by this environment's egress policy\r\n")
            .await;
        return;
    }
    let _ = write.write_all(GREETING).await;
    let peer = Peer {
        client,
        port,
        shared: &shared,
    };
    let tls = if shared.capture_ca.is_some() {
        Tls::Offered
    } else {
        Tls::Unavailable
    };
    let mut reader = BufReader::new(read);
    if converse(&mut reader, &mut write, &peer, tls).await == Ended::Closed {
        return;
    }
    // Nothing the client sent after STARTTLS and before the handshake may be acted on (RFC 3207
    // section 4: a man in the middle could have added it in the clear): such a session ends.
    if !reader.buffer().is_empty() {
        return record_tls(
            &peer,
            "STARTTLS",
            "",
            "commands sent after STARTTLS, before the handshake",
        );
    }
    let Ok(stream) = reader.into_inner().reunite(write) else {
        return;
    };
    let Some(secured) = start_tls(stream, &peer, "STARTTLS").await else {
        return;
    };
    let (read, mut write) = tokio::io::split(secured);
    converse(&mut BufReader::new(read), &mut write, &peer, Tls::Started).await;
}

/// Serves SMTP over implicit TLS (SMTPS, RFC 8314: port 465) on `listener` for ever: the
/// handshake first, answered behind the capture CA as STARTTLS is, then the same conversation.
pub async fn serve_implicit_tls(listener: TcpListener, shared: Arc<Shared>) {
    crate::accept::accept_workloads(
        listener,
        "smtps",
        shared.clone(),
        |stream, client, admitted| implicit_tls_session(stream, client, admitted, shared.clone()),
    )
    .await;
}

async fn implicit_tls_session(
    stream: TcpStream,
    client: SocketAddr,
    _admitted: Admitted,
    shared: Arc<Shared>,
) {
    let port = stream.local_addr().map(|a| a.port()).unwrap_or(465);
    let peer = Peer {
        client,
        port,
        shared: &shared,
    };
    // A client that speaks TLS first cannot read a refusal in the clear: the session is closed,
    // and the decision log says why.
    if shared.policy.mail == MailPolicy::Deny {
        Pending::new(&shared.environment, client, "smtp", "SMTPS", "", port).finish(
            &shared.log,
            Verdict::Deny,
            &DenyReason::Mail.to_string(),
            0,
            0,
        );
        return;
    }
    if shared.capture_ca.is_none() {
        return record_tls(&peer, "SMTPS", "", NO_CA_FOR_SMTPS);
    }
    let Some(secured) = start_tls(stream, &peer, "SMTPS").await else {
        return;
    };
    let (read, mut write) = tokio::io::split(secured);
    if write.write_all(GREETING).await.is_err() {
        return;
    }
    converse(&mut BufReader::new(read), &mut write, &peer, Tls::Implicit).await;
}

/// What the decision log says of an SMTPS session to a sidecar without a capture CA.
const NO_CA_FOR_SMTPS: &str = "tls not captured: this sidecar has no capture CA (tls_capture), so mail over implicit TLS cannot be answered; plain SMTP and STARTTLS on 25 and 587 can";

/// Answers the TLS handshake (after STARTTLS, or first of all on SMTPS: `method` says which, for
/// the record) with a certificate, signed by the capture CA, for the name the client asked for
/// (a client that names none is answered as `af-sidecar`); a handshake that fails is recorded
/// with what to do about it, as HTTPS capture records it.
async fn start_tls(
    stream: TcpStream,
    peer: &Peer<'_>,
    method: &str,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let ca = peer.shared.capture_ca.clone()?;
    let mut asked = String::new();
    let handshake = async {
        let start =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream)
                .await
                .map_err(|e| e.to_string())?;
        asked = start
            .client_hello()
            .server_name()
            .unwrap_or("af-sidecar")
            .to_string();
        let mut config = (*ca.server_config(&asked)?).clone();
        // The certificate's configuration is shared with HTTPS capture, whose answers are HTTP;
        // here the protocol is SMTP, which negotiates none.
        config.alpn_protocols.clear();
        start
            .into_stream(Arc::new(config))
            .await
            .map_err(|e| e.to_string())
    };
    match tls_capture::bounded_handshake(peer.shared, handshake).await {
        Ok(secured) => Some(secured),
        Err(note) => {
            record_tls(peer, method, &asked, &note);
            None
        }
    }
}

/// Records a TLS session (`STARTTLS` or `SMTPS`) that came to nothing: the mail it would have
/// carried was not captured.
fn record_tls(peer: &Peer<'_>, method: &str, host: &str, note: &str) {
    let shared = peer.shared;
    Pending::new(
        &shared.environment,
        peer.client,
        "smtp",
        method,
        host,
        peer.port,
    )
    .finish(
        &shared.log,
        Verdict::Capture,
        &format!("mail ({note})"),
        0,
        0,
    );
}

/// The SMTP conversation from the first command: mail is captured until the client quits, goes
/// quiet or away, or (when `tls` is offered) asks for TLS.
async fn converse<R, W>(reader: &mut R, write: &mut W, peer: &Peer<'_>, tls: Tls) -> Ended
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let shared = peer.shared;
    let idle = shared.limits.idle_timeout();
    let max_bytes = shared.limits.max_mail_bytes;
    let rule = match tls {
        Tls::Started => "mail (starttls)",
        Tls::Implicit => "mail (smtps)",
        Tls::Offered | Tls::Unavailable => "mail",
    };
    let mut from = String::new();
    let mut recipients: Vec<String> = Vec::new();
    loop {
        let Some(line) = read_line(reader, idle).await else {
            return Ended::Closed;
        };
        let (verb, argument) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let reply: Vec<u8> = match verb.to_ascii_uppercase().as_str() {
            "EHLO" => format!(
                "250-af-sidecar\r\n250-SIZE {max_bytes}\r\n250-8BITMIME\r\n{}250 PIPELINING\r\n",
                if tls == Tls::Offered {
                    "250-STARTTLS\r\n"
                } else {
                    ""
                }
            )
            .into_bytes(),
            "HELO" => b"250 af-sidecar\r\n".to_vec(),
            "MAIL" if argument.to_ascii_uppercase().starts_with("FROM:") => {
                from = path_argument(&argument[5..]);
                recipients.clear();
                b"250 2.1.0 OK\r\n".to_vec()
            }
            "RCPT" if argument.to_ascii_uppercase().starts_with("TO:") => {
                if recipients.len() >= MAX_RECIPIENTS {
                    b"452 4.5.3 too many recipients\r\n".to_vec()
                } else {
                    recipients.push(path_argument(&argument[3..]));
                    b"250 2.1.5 OK\r\n".to_vec()
                }
            }
            "DATA" if recipients.is_empty() => b"503 5.5.1 RCPT first\r\n".to_vec(),
            "DATA" => {
                if write
                    .write_all(b"354 end with <CRLF>.<CRLF>\r\n")
                    .await
                    .is_err()
                {
                    return Ended::Closed;
                }
                // Held until the message is in the inbox.
                let mut claim = shared.mail_budget.claim();
                let data = match read_data(reader, idle, max_bytes, &mut claim).await {
                    Ok(data) => data,
                    Err(refused) => {
                        let _ = write.write_all(refused.reply()).await;
                        return Ended::Closed;
                    }
                };
                let message = parse_message(&data);
                let host = recipients
                    .first()
                    .and_then(|r| r.rsplit_once('@'))
                    .map_or("", |(_, domain)| domain)
                    .to_string();
                let id = shared.inbox.add_mail(
                    if from.is_empty() {
                        message.from_header.clone()
                    } else {
                        from.clone()
                    },
                    std::mem::take(&mut recipients),
                    message.subject,
                    message.body,
                );
                Pending::new(
                    &shared.environment,
                    peer.client,
                    "smtp",
                    "DATA",
                    &host,
                    peer.port,
                )
                .finish(
                    &shared.log,
                    Verdict::Capture,
                    rule,
                    data.len() as u64,
                    0,
                );
                format!("250 2.0.0 captured as {id}\r\n").into_bytes()
            }
            "RSET" => {
                from.clear();
                recipients.clear();
                b"250 2.0.0 OK\r\n".to_vec()
            }
            "NOOP" => b"250 2.0.0 OK\r\n".to_vec(),
            "QUIT" => {
                let _ = write.write_all(b"221 2.0.0 bye\r\n").await;
                return Ended::Closed;
            }
            "STARTTLS" => match tls {
                Tls::Offered if argument.is_empty() => {
                    return match write.write_all(b"220 2.0.0 ready to start TLS\r\n").await {
                        Ok(()) => Ended::StartTls,
                        Err(_) => Ended::Closed,
                    };
                }
                Tls::Offered => b"501 5.5.4 STARTTLS takes no argument\r\n".to_vec(),
                Tls::Started | Tls::Implicit => b"503 5.5.1 TLS is already active\r\n".to_vec(),
                Tls::Unavailable => b"454 4.7.0 TLS not available: this environment has no capture CA; the sink accepts plain SMTP\r\n".to_vec(),
            },
            _ => b"502 5.5.2 command not recognized\r\n".to_vec(),
        };
        if write.write_all(&reply).await.is_err() {
            return Ended::Closed;
        }
    }
}

/// One CRLF-terminated line, without its ending; `None` on timeout, close, or an overlong line.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    idle: std::time::Duration,
) -> Option<String> {
    let mut line = Vec::new();
    let read = tokio::time::timeout(idle, async {
        let mut limited = tokio::io::AsyncReadExt::take(reader, MAX_LINE as u64);
        limited.read_until(b'\n', &mut line).await
    });
    match read.await {
        Ok(Ok(n)) if n > 0 && line.ends_with(b"\n") => {
            let text = String::from_utf8_lossy(&line);
            Some(text.trim_end_matches(['\r', '\n']).to_string())
        }
        _ => None,
    }
}

/// Why a DATA section was not taken whole.
#[derive(Debug, PartialEq, Eq)]
enum DataRefused {
    /// Past `limits.max_mail_bytes`.
    TooLarge,
    /// Past what is left of `limits.max_mail_bytes_in_flight`: other sessions hold the rest.
    NoRoom,
    /// The client went quiet or away, or sent an overlong line.
    Lost,
}

impl DataRefused {
    fn reply(&self) -> &'static [u8] {
        match self {
            DataRefused::TooLarge => b"552 5.3.4 message too large\r\n",
            DataRefused::NoRoom => b"452 4.3.1 insufficient system storage: the sidecar is receiving too much mail at once; try again later\r\n",
            DataRefused::Lost => b"552 5.3.4 message too large or connection lost\r\n",
        }
    }
}

/// The DATA section up to the lone ".", with dot-stuffing undone, each line claimed from the
/// mail budget as it arrives.
async fn read_data<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    idle: std::time::Duration,
    max_bytes: usize,
    claim: &mut Claim<'_>,
) -> Result<String, DataRefused> {
    let mut data = String::new();
    loop {
        let line = read_line(reader, idle).await.ok_or(DataRefused::Lost)?;
        if line == "." {
            return Ok(data);
        }
        let line = line.strip_prefix('.').unwrap_or(&line);
        let size = line.len() + 2;
        if data.len() + size > max_bytes {
            return Err(DataRefused::TooLarge);
        }
        if !claim.grow(size) {
            return Err(DataRefused::NoRoom);
        }
        data.push_str(line);
        data.push_str("\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_headers_and_body() {
        let message = parse_message(
            "From: Shop <orders@shop.example>\r\nSubject: Your order\r\n  #42\r\nTo: a@b\r\n\r\nThanks!\r\n",
        );
        assert_eq!(message.subject, "Your order  #42");
        assert_eq!(message.from_header, "Shop <orders@shop.example>");
        assert_eq!(message.body, "Thanks!\r\n");
    }

    #[tokio::test]
    async fn a_message_is_refused_past_its_own_limit_and_past_the_budget_left() {
        use crate::budget::ByteBudget;
        let idle = std::time::Duration::from_secs(5);
        let read = |text: &'static str, max_bytes: usize, budget: usize| async move {
            let budget = ByteBudget::new(budget);
            let mut claim = budget.claim();
            let mut reader = BufReader::new(text.as_bytes());
            let result = read_data(&mut reader, idle, max_bytes, &mut claim).await;
            drop(claim);
            assert_eq!(budget.in_use(), 0, "the claim is given back");
            result
        };
        let message = "Subject: s\r\n\r\n..dot\r\n.\r\n";
        assert_eq!(
            read(message, 100, 100).await,
            Ok("Subject: s\r\n\r\n.dot\r\n".to_string())
        );
        assert_eq!(read(message, 10, 100).await, Err(DataRefused::TooLarge));
        assert_eq!(read(message, 100, 10).await, Err(DataRefused::NoRoom));
        assert_eq!(
            read("Subject: s\r\n", 100, 100).await,
            Err(DataRefused::Lost)
        );
        assert!(DataRefused::NoRoom.reply().starts_with(b"452 4.3.1"));
    }

    #[test]
    fn path_arguments() {
        assert_eq!(path_argument("<a@b.example> SIZE=100"), "a@b.example");
        assert_eq!(path_argument(" a@b.example"), "a@b.example");
        assert_eq!(path_argument("<>"), "");
    }
}
