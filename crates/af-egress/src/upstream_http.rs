//! The proxy's HTTP/1.1 connection to an origin: it writes a forwarded request and reads the
//! answer straight off the socket, in the task that serves the client. hyper's client put a
//! request queue, a connection task and two 8 KiB buffers behind every upstream connection,
//! whether busy or idle — about 37 KiB per connection, the most of the sidecar's memory with
//! many keep-alive clients (docs/performance.md). Here a connection is a socket and a read buffer
//! that exists only while an answer is being read.
//!
//! One exchange at a time, no pipelining. The response body is read as the client takes it and
//! framed as RFC 9112 section 6.3 says; when it ends cleanly on a connection that stays open, the
//! connection is handed back for the next request.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use hyper::body::{Body, Frame, SizeHint};
use tokio::net::TcpStream;

use crate::body::{BoxError, FramePoll, ProxyBody};
use crate::chunked::{self, ChunkedDecoder, Decoded};

/// The first read of an answer; a read that fills what it was given doubles the next, up to
/// [`MAX_READ`]. Small answers then cost one small buffer (a typical head and a small body fit
/// in 1 KiB; 4 KiB here made 64 busy clients' peak 0.2 MiB larger), large ones a few more reads.
const FIRST_READ: usize = 1 << 10;

/// The most one read takes. While a piece read is still queued for the client the next read
/// takes a new buffer, so a large response holds up to about twice this per connection: 64
/// clients of 1 MiB responses peak at 10.5 MiB with it, a sixth of squid's (docs/performance.md;
/// with hyper's client, 64 KiB here had made that peak a quarter of squid's or more).
const MAX_READ: usize = 32 << 10;

/// The largest response head accepted (status line and header fields).
const MAX_HEAD: usize = 32 << 10;

/// The most header fields a response head may have.
const MAX_FIELDS: usize = 100;

/// Called with a connection whose answer has been read whole and which stays open.
pub type GiveBack = Box<dyn FnOnce(UpstreamConnection) + Send + Sync>;

/// Why an exchange with an origin failed.
#[derive(Debug)]
pub enum UpstreamError {
    /// The socket failed.
    Io(io::Error),
    /// The origin closed the connection before its answer was complete.
    Closed,
    /// The origin's answer is not HTTP/1 as RFC 9112 has it.
    Protocol(&'static str),
    /// The client's request body failed while it was being forwarded.
    RequestBody(BoxError),
    /// The origin sent nothing for this long while its answer was awaited.
    Silent(Duration),
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamError::Io(err) => write!(f, "the connection failed: {err}"),
            UpstreamError::Closed => {
                f.write_str("the origin closed the connection before its answer was complete")
            }
            UpstreamError::Protocol(what) => write!(f, "its answer is not valid HTTP/1: {what}"),
            UpstreamError::RequestBody(err) => {
                write!(f, "the client's request body failed: {err}")
            }
            UpstreamError::Silent(quiet) => write!(
                f,
                "the origin sent nothing for {} s (limits.upstream_read_timeout_ms)",
                quiet.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for UpstreamError {}

impl From<io::Error> for UpstreamError {
    fn from(err: io::Error) -> Self {
        UpstreamError::Io(err)
    }
}

/// An open connection to an origin, between exchanges or in one.
#[derive(Debug)]
pub struct UpstreamConnection {
    addr: SocketAddr,
    stream: TcpStream,
    /// Bytes read and not yet taken; empty (no allocation) between exchanges.
    buf: BytesMut,
}

impl UpstreamConnection {
    pub async fn open(addr: SocketAddr, timeout: std::time::Duration) -> io::Result<Self> {
        let stream = crate::dial::connect(addr, timeout).await?;
        Ok(Self::over(addr, stream))
    }

    /// A connection over a stream already open to `addr`.
    pub fn over(addr: SocketAddr, stream: TcpStream) -> Self {
        UpstreamConnection {
            addr,
            stream,
            buf: BytesMut::new(),
        }
    }

    /// Waits until the origin has sent something or closed (the pool's tests).
    #[cfg(test)]
    pub async fn readable(&self) {
        self.stream.readable().await.unwrap();
    }

    /// The address this connection was dialled to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Open and quiet: the origin has neither closed it nor sent anything unasked. (A read that
    /// would block; usually answered from the reactor's readiness without a system call.)
    pub fn is_usable(&self) -> bool {
        let mut probe = [0u8; 1];
        self.buf.is_empty()
            && matches!(self.stream.try_read(&mut probe),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock)
    }

    /// Sends `request` and reads the answer's head. The body is read as the client takes it;
    /// when it ends and the connection stays open, the connection goes to `give_back`. When the
    /// connection ends before an answer and the request can be sent again, the failure hands it
    /// back ([`ExchangeFailed::unanswered`]).
    pub async fn exchange(
        mut self,
        request: Outgoing,
        read_timeout: Duration,
        give_back: GiveBack,
    ) -> Result<Response<UpstreamBody>, ExchangeFailed> {
        let written = write_all(&self.stream, &[&request.head]).await;
        let (answer, upload_done, asked_head) = if request.body.is_end_stream() {
            let answer = match written {
                Ok(()) => read_head(&self.stream, &mut self.buf, read_timeout, false).await,
                Err(err) => Err(err.into()),
            };
            match answer {
                Ok(answer) => (answer, true, request.asked_head),
                Err(error) => {
                    let ended = matches!(error, UpstreamError::Closed | UpstreamError::Io(_));
                    let unanswered = (ended && request.replayable).then_some(request);
                    return Err(ExchangeFailed { error, unanswered });
                }
            }
        } else {
            written.map_err(UpstreamError::from)?;
            let Outgoing {
                head,
                body,
                chunked,
                asked_head,
                ..
            } = request;
            drop(head);
            // Boxed: a request with a body is the rarer case, and the future that sends one
            // would otherwise make every request's future (kept per client connection) larger.
            let (answer, upload_done) = Box::pin(upload_while_waiting(
                &self.stream,
                &mut self.buf,
                body,
                chunked,
                read_timeout,
            ))
            .await?;
            (answer, upload_done, asked_head)
        };
        let kind = body_kind(asked_head, answer.status, &answer.headers)?;
        let reusable = upload_done && kind != BodyKind::UntilClose && keeps_alive(&answer);
        Ok(self.answer(answer, kind, reusable.then_some(give_back), read_timeout))
    }

    /// Sends a request that asks to upgrade the connection (it has no body; its head carries
    /// `Upgrade` and `Connection: upgrade`) and reads the answer's head: the connection itself
    /// when the origin switched protocols, else the answer as [`Self::exchange`] gives it, the
    /// connection not kept after it.
    pub async fn upgrade(
        mut self,
        request: Outgoing,
        read_timeout: Duration,
    ) -> Result<UpgradeAnswer, UpstreamError> {
        write_all(&self.stream, &[&request.head]).await?;
        let answer = read_head(&self.stream, &mut self.buf, read_timeout, true).await?;
        if answer.status == StatusCode::SWITCHING_PROTOCOLS {
            return Ok(UpgradeAnswer::Switched {
                headers: answer.headers,
                stream: self.stream,
                already_read: self.buf,
            });
        }
        let kind = body_kind(request.asked_head, answer.status, &answer.headers)?;
        Ok(UpgradeAnswer::Declined(self.answer(
            answer,
            kind,
            None,
            read_timeout,
        )))
    }

    /// The answer whose head is `answer`, its body read from this connection as the client
    /// takes it; the connection goes to `give_back` after a body read whole, when given one.
    fn answer(
        self,
        answer: ResponseHead,
        kind: BodyKind,
        give_back: Option<GiveBack>,
        read_timeout: Duration,
    ) -> Response<UpstreamBody> {
        let mut response = Response::new(UpstreamBody {
            connection: Some(self),
            kind,
            chunks: ChunkedDecoder::default(),
            reusable: give_back.is_some(),
            give_back,
            handed_over: false,
            next_read: FIRST_READ,
            silence: None,
            read_timeout,
        });
        *response.status_mut() = answer.status;
        // The version stays HTTP/1.1: the answer is framed anew for the client, whatever the
        // origin spoke (hyper would close a kept-alive client connection after a 1.0 answer).
        *response.headers_mut() = answer.headers;
        response
    }
}

/// What an origin answered a request to upgrade the connection.
#[derive(Debug)]
pub enum UpgradeAnswer {
    /// `101 Switching Protocols`: from here on the connection carries the new protocol.
    Switched {
        headers: HeaderMap,
        stream: TcpStream,
        /// Bytes of the new protocol the origin sent right after its head.
        already_read: BytesMut,
    },
    /// Any other answer, to be passed on as it is.
    Declined(Response<UpstreamBody>),
}

/// A request in the form it goes to an origin: its head written out (origin form, hop-by-hop
/// fields already removed by the caller) and its body.
pub struct Outgoing {
    head: Vec<u8>,
    body: ProxyBody,
    /// The body is sent chunked (its length is not known).
    chunked: bool,
    asked_head: bool,
    /// It may be sent again after a connection failed under it: see [`replayable`].
    replayable: bool,
}

impl Outgoing {
    pub fn new(request: Request<ProxyBody>) -> Outgoing {
        let (parts, body) = request.into_parts();
        let bodiless = body.is_end_stream();
        let chunked = !bodiless && !parts.headers.contains_key(header::CONTENT_LENGTH);
        Outgoing {
            head: request_head(&parts.method, &parts.uri, &parts.headers, chunked),
            asked_head: parts.method == Method::HEAD,
            replayable: replayable(&parts.method, bodiless),
            body,
            chunked,
        }
    }
}

/// Whether a request may be sent a second time when the connection it went out on ended before
/// any answer: only an idempotent one (RFC 9110 section 9.2.2), which the origin may safely
/// receive twice (RFC 9112 section 9.3.1), and only without a body, whose bytes were streamed
/// from the client and are gone.
pub fn replayable(method: &Method, bodiless: bool) -> bool {
    bodiless && method.is_idempotent()
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("head", &String::from_utf8_lossy(&self.head))
            .field("chunked", &self.chunked)
            .field("replayable", &self.replayable)
            .finish_non_exhaustive()
    }
}

/// An exchange that failed, with the request when it can be sent again on another connection.
#[derive(Debug)]
pub struct ExchangeFailed {
    pub error: UpstreamError,
    /// The request, when the connection ended (closed or failed) before any answer and the
    /// request is [`replayable`].
    pub unanswered: Option<Outgoing>,
}

impl From<UpstreamError> for ExchangeFailed {
    fn from(error: UpstreamError) -> Self {
        ExchangeFailed {
            error,
            unanswered: None,
        }
    }
}

/// A request head in origin form, with `transfer-encoding: chunked` when the body is sent so.
fn request_head(method: &Method, uri: &http::Uri, headers: &HeaderMap, chunked: bool) -> Vec<u8> {
    let target = uri.path_and_query().map_or("/", |pq| pq.as_str());
    let mut head = Vec::with_capacity(64 + headers.len() * 32);
    head.extend_from_slice(method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Sends the request body while waiting for the answer's head; whether the body was all sent.
/// The origin may answer before it has read the whole body (a refusal, say); then the rest is
/// not sent and the connection is not reused. The origin's silence is counted from when the body
/// has gone (or could not be sent): while it is still arriving from the client, the origin is
/// not the one keeping the answer back.
async fn upload_while_waiting(
    stream: &TcpStream,
    buf: &mut BytesMut,
    body: ProxyBody,
    chunked: bool,
    read_timeout: Duration,
) -> Result<(ResponseHead, bool), UpstreamError> {
    let upload = send_body(stream, body, chunked);
    let answer = read_head_untimed(stream, buf, false);
    let silence = tokio::time::sleep(read_timeout);
    tokio::pin!(upload, answer, silence);
    let mut uploaded = None;
    loop {
        tokio::select! {
            biased;
            sent = &mut upload, if uploaded.is_none() => {
                uploaded = match sent {
                    Err(Upload::Client(err)) => return Err(UpstreamError::RequestBody(err)),
                    Err(Upload::Origin(err)) => Some(Err(err)),
                    Ok(()) => Some(Ok(())),
                };
                silence.as_mut().reset(tokio::time::Instant::now() + read_timeout);
            }
            answer = &mut answer => return Ok((answer?, matches!(uploaded, Some(Ok(()))))),
            () = &mut silence, if uploaded.is_some() => {
                return Err(UpstreamError::Silent(read_timeout));
            }
        }
    }
}

/// Why a request body stopped before its end.
enum Upload {
    /// The client's side failed: the exchange fails.
    Client(BoxError),
    /// Writing to the origin failed: its answer may still come.
    Origin(io::Error),
}

async fn send_body(stream: &TcpStream, mut body: ProxyBody, chunked: bool) -> Result<(), Upload> {
    use http_body_util::BodyExt;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Upload::Client)?;
        match frame.into_data() {
            Ok(data) if data.is_empty() => {}
            Ok(data) if chunked => {
                let head = chunked::chunk_head(data.len());
                write_all(stream, &[&head, &data, b"\r\n"])
                    .await
                    .map_err(Upload::Origin)?;
            }
            Ok(data) => write_all(stream, &[&data]).await.map_err(Upload::Origin)?,
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    if chunked {
        let end = chunked::last_chunk(trailers.as_ref());
        write_all(stream, &[&end]).await.map_err(Upload::Origin)?;
    }
    Ok(())
}

/// Writes every byte of `pieces`, in order, with as few system calls as the socket allows.
async fn write_all(stream: &TcpStream, pieces: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
    let mut slices = &mut slices[..];
    // Drops empty pieces from the front, so that nothing left to write means no slices.
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        stream.writable().await?;
        match stream.try_write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// A response's status line and header fields.
#[derive(Debug)]
struct ResponseHead {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
}

/// Reads until `buf` holds a final response head and takes it off; informational answers
/// (100 Continue, 103 Early Hints) are passed over. An origin that has not sent a whole head
/// within `read_timeout` is given up on.
async fn read_head(
    stream: &TcpStream,
    buf: &mut BytesMut,
    read_timeout: Duration,
    upgrade_asked: bool,
) -> Result<ResponseHead, UpstreamError> {
    tokio::time::timeout(read_timeout, read_head_untimed(stream, buf, upgrade_asked))
        .await
        .unwrap_or(Err(UpstreamError::Silent(read_timeout)))
}

/// As [`read_head`], without the timeout; a `101 Switching Protocols` is a final answer when the
/// request asked for an upgrade, and a protocol error otherwise.
async fn read_head_untimed(
    stream: &TcpStream,
    buf: &mut BytesMut,
    upgrade_asked: bool,
) -> Result<ResponseHead, UpstreamError> {
    loop {
        if let Some((len, head)) = parse_head(buf)? {
            buf.advance(len);
            if head.status == StatusCode::SWITCHING_PROTOCOLS && upgrade_asked {
                return Ok(head);
            }
            if head.status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(UpstreamError::Protocol(
                    "the origin switched protocols, which a forwarded request never asks for",
                ));
            }
            if head.status.is_informational() {
                continue;
            }
            return Ok(head);
        }
        if buf.len() >= MAX_HEAD {
            return Err(UpstreamError::Protocol("the response head is too large"));
        }
        buf.reserve(FIRST_READ);
        stream.readable().await?;
        match stream.try_read_buf(buf) {
            Ok(0) => return Err(UpstreamError::Closed),
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err.into()),
        }
    }
}

/// A whole response head at the start of `bytes`, and its length; `None` while incomplete.
fn parse_head(bytes: &[u8]) -> Result<Option<(usize, ResponseHead)>, UpstreamError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut parsed = httparse::Response::new(&mut fields);
    let len = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(UpstreamError::Protocol(
                "the response has too many header fields",
            ));
        }
        Err(_) => return Err(UpstreamError::Protocol("the response head is malformed")),
    };
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(UpstreamError::Protocol("the status code is invalid"))?;
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| UpstreamError::Protocol("a header field's name is invalid"))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| UpstreamError::Protocol("a header field's value is invalid"))?;
        headers.append(name, value);
    }
    Ok(Some((
        len,
        ResponseHead {
            status,
            version,
            headers,
        },
    )))
}

/// How a response's body is delimited (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// No body: the answer to HEAD, 1xx, 204, 304.
    Empty,
    /// This many bytes still to come.
    Length(u64),
    Chunked,
    /// Everything until the origin closes the connection.
    UntilClose,
}

fn body_kind(
    asked_head: bool,
    status: StatusCode,
    headers: &HeaderMap,
) -> Result<BodyKind, UpstreamError> {
    if asked_head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(BodyKind::Empty);
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        // With a Content-Length beside it the connection cannot be trusted afterwards either.
        let last_coding = headers
            .get_all(header::TRANSFER_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|c| !c.is_empty());
        let chunked = last_coding.is_some_and(|c| c.eq_ignore_ascii_case("chunked"));
        return Ok(
            if chunked && !headers.contains_key(header::CONTENT_LENGTH) {
                BodyKind::Chunked
            } else if chunked {
                return Err(UpstreamError::Protocol(
                    "the response has both Transfer-Encoding and Content-Length",
                ));
            } else {
                BodyKind::UntilClose
            },
        );
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for item in value.to_str().unwrap_or("x").split(',') {
            let item = item.trim();
            let parsed = (!item.is_empty() && item.bytes().all(|b| b.is_ascii_digit()))
                .then(|| item.parse::<u64>().ok())
                .flatten()
                .ok_or(UpstreamError::Protocol("the Content-Length is invalid"))?;
            if length.is_some_and(|seen| seen != parsed) {
                return Err(UpstreamError::Protocol(
                    "the response has differing Content-Lengths",
                ));
            }
            length = Some(parsed);
        }
    }
    Ok(length.map_or(BodyKind::UntilClose, BodyKind::Length))
}

/// Whether the origin keeps the connection open after this answer.
fn keeps_alive(head: &ResponseHead) -> bool {
    let says = |token: &str| {
        head.headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    match head.version {
        Version::HTTP_10 => says("keep-alive") && !says("close"),
        _ => !says("close"),
    }
}

/// A response body read off its origin connection as the client takes it.
pub struct UpstreamBody {
    /// Until the body has ended.
    connection: Option<UpstreamConnection>,
    kind: BodyKind,
    chunks: ChunkedDecoder,
    reusable: bool,
    give_back: Option<GiveBack>,
    /// A piece of the body was handed to the client's side and not yet written to the client.
    handed_over: bool,
    next_read: usize,
    /// While the origin is awaited: since when, and the timer that ends the wait. The timer is
    /// made when a body first waits (most small bodies arrive with their head and never do) and
    /// moved only when it fires early, not at every read.
    silence: Option<Silence>,
    read_timeout: Duration,
}

/// An origin's silence while a body is read.
#[derive(Debug)]
struct Silence {
    since: Option<Instant>,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("kind", &self.kind)
            .field("reusable", &self.reusable)
            .finish_non_exhaustive()
    }
}

impl UpstreamBody {
    /// The body is over: the connection goes back if it can carry another exchange, else closes.
    fn finish(&mut self) -> FramePoll {
        self.kind = BodyKind::Empty;
        self.release();
        Poll::Ready(None)
    }

    /// Gives the connection back if its answer has been read whole and it stays open; else
    /// closes it. (hyper drops a body whose end it knows from its length without asking for
    /// more, so this runs on drop too.)
    fn release(&mut self) {
        let whole = matches!(self.kind, BodyKind::Empty | BodyKind::Length(0));
        if let Some(mut connection) = self.connection.take()
            && whole
            && self.reusable
            && connection.buf.is_empty()
            && let Some(give_back) = self.give_back.take()
        {
            connection.buf = BytesMut::new();
            give_back(connection);
        }
    }

    fn hand_over(&mut self, data: Bytes) -> FramePoll {
        self.handed_over = true;
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn failed(&mut self, err: UpstreamError) -> FramePoll {
        self.connection = None;
        self.kind = BodyKind::Empty;
        Poll::Ready(Some(Err(Box::new(err))))
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        self.release();
    }
}

/// Ready when the origin has been silent for `read_timeout` since it was first awaited; else
/// arranges to be woken then. A timer that fires early (set for an earlier wait) is moved on.
fn watch_silence(
    silence: &mut Option<Silence>,
    read_timeout: Duration,
    cx: &mut Context<'_>,
) -> Poll<()> {
    let now = Instant::now();
    let silence = silence.get_or_insert_with(|| Silence {
        since: None,
        timer: Box::pin(tokio::time::sleep(read_timeout)),
    });
    let deadline = *silence.since.get_or_insert(now) + read_timeout;
    loop {
        ready!(silence.timer.as_mut().poll(cx));
        if Instant::now() >= deadline {
            return Poll::Ready(());
        }
        silence.timer.as_mut().reset(deadline.into());
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let this = self.get_mut();
        loop {
            let Some(connection) = this.connection.as_mut() else {
                return Poll::Ready(None);
            };
            let buf = &mut connection.buf;
            let want = match this.kind {
                BodyKind::Empty | BodyKind::Length(0) => return this.finish(),
                BodyKind::Length(left) if !buf.is_empty() => {
                    let take = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
                    this.kind = BodyKind::Length(left - take as u64);
                    let data = buf.split_to(take).freeze();
                    return this.hand_over(data);
                }
                BodyKind::Length(left) => {
                    usize::try_from(left).map_or(this.next_read, |l| l.min(this.next_read))
                }
                BodyKind::Chunked => match this.chunks.decode(buf) {
                    Ok(Decoded::Data(data)) => return this.hand_over(data),
                    Ok(Decoded::Trailers(trailers)) => {
                        // The last frame: hyper asks for nothing after it.
                        this.kind = BodyKind::Empty;
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    Ok(Decoded::End) => return this.finish(),
                    Ok(Decoded::NeedMore) => this.next_read,
                    Err(what) => return this.failed(UpstreamError::Protocol(what)),
                },
                BodyKind::UntilClose if !buf.is_empty() => {
                    let data = buf.split().freeze();
                    return this.hand_over(data);
                }
                BodyKind::UntilClose => this.next_read,
            };
            if std::mem::take(&mut this.handed_over) {
                // hyper asks for the next piece as soon as it has one, before writing it; a read
                // now would take the few bytes that arrived since — many small reads, each
                // opening the TCP window a little. Let it write first, then read what came in
                // meanwhile (one read per write, as with a connection task of its own).
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            buf.reserve(want);
            let room = buf.capacity() - buf.len();
            let read = loop {
                match connection.stream.poll_read_ready(cx) {
                    Poll::Ready(Err(err)) => break Err(err),
                    Poll::Ready(Ok(())) => {}
                    Poll::Pending => {
                        return match watch_silence(&mut this.silence, this.read_timeout, cx) {
                            Poll::Ready(()) => {
                                this.failed(UpstreamError::Silent(this.read_timeout))
                            }
                            Poll::Pending => Poll::Pending,
                        };
                    }
                }
                match connection.stream.try_read_buf(&mut connection.buf) {
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                    other => break other,
                }
            };
            if let Some(silence) = this.silence.as_mut() {
                silence.since = None;
            }
            match read {
                Ok(0) if this.kind == BodyKind::UntilClose => return this.finish(),
                Ok(0) => return this.failed(UpstreamError::Closed),
                Ok(n) if n >= room => this.next_read = (this.next_read * 2).min(MAX_READ),
                Ok(_) => {}
                Err(err) => return this.failed(UpstreamError::Io(err)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.connection.is_none() || matches!(self.kind, BodyKind::Empty | BodyKind::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.kind {
            BodyKind::Empty => SizeHint::with_exact(0),
            BodyKind::Length(left) => SizeHint::with_exact(left),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(wire: &str) -> ResponseHead {
        parse_head(wire.as_bytes()).unwrap().unwrap().1
    }

    fn kind(asked_head: bool, wire: &str) -> Result<BodyKind, String> {
        let head = head(wire);
        body_kind(asked_head, head.status, &head.headers).map_err(|e| e.to_string())
    }

    /// Header fields an origin may send that decide the framing, with values near the edges.
    fn framing_field() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            prop::sample::select(vec![
                "content-length",
                "transfer-encoding",
                "connection",
                "keep-alive",
                "x-other",
            ]),
            prop::sample::select(vec![
                "0",
                "5",
                " 5 ",
                "5, 5",
                "5,6",
                "-1",
                "",
                "chunked",
                "gzip, chunked",
                "chunked, gzip",
                "close",
                "keep-alive",
                "18446744073709551616",
            ]),
        )
            .prop_map(|(name, value)| format!("{name}: {value}\r\n"))
    }

    proptest::proptest! {
        /// Whatever an origin sends as its head: parsed or refused, never a panic; a parsed
        /// head's length is within what was read, and its framing is decided or refused.
        #[test]
        fn any_response_head_is_parsed_or_refused(
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            status_line in proptest::prelude::any::<bool>(),
        ) {
            let mut wire = if status_line { b"HTTP/1.1 200 OK\r\n".to_vec() } else { Vec::new() };
            wire.extend(tail);
            if let Ok(Some((len, head))) = parse_head(&wire) {
                proptest::prop_assert!(len <= wire.len());
                let _ = body_kind(false, head.status, &head.headers);
                let _ = keeps_alive(&head);
            }
        }

        /// Any mix of framing fields: a length is only ever one that every Content-Length
        /// agrees on, and chunked is never trusted beside a Content-Length.
        #[test]
        fn framing_fields_are_read_strictly(
            fields in proptest::collection::vec(framing_field(), 0..5),
        ) {
            let wire = format!("HTTP/1.1 200 OK\r\n{}\r\n", fields.concat());
            let head = head(&wire);
            let lengths: Vec<&str> = fields
                .iter()
                .filter_map(|f| f.strip_prefix("content-length: "))
                .collect();
            match body_kind(false, head.status, &head.headers) {
                Ok(BodyKind::Length(n)) => {
                    for value in &lengths {
                        for item in value.trim_end().split(',') {
                            proptest::prop_assert_eq!(item.trim().parse::<u64>().ok(), Some(n));
                        }
                    }
                }
                Ok(BodyKind::Chunked) => proptest::prop_assert!(lengths.is_empty()),
                _ => {}
            }
        }
    }

    #[test]
    fn a_response_body_is_delimited_as_rfc_9112_says() {
        use BodyKind::*;
        let rows: [(bool, &str, Result<BodyKind, &str>); 12] = [
            (
                false,
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
                Ok(Length(5)),
            ),
            (
                true,
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
                Ok(Empty),
            ),
            (false, "HTTP/1.1 204 No Content\r\n\r\n", Ok(Empty)),
            (
                false,
                "HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n",
                Ok(Empty),
            ),
            (
                false,
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                Ok(Chunked),
            ),
            (
                false,
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\r\n",
                Ok(Chunked),
            ),
            (
                false,
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
                Ok(UntilClose),
            ),
            (false, "HTTP/1.1 200 OK\r\n\r\n", Ok(UntilClose)),
            (
                false,
                "HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\n",
                Ok(Length(5)),
            ),
            (
                false,
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
                Err("differing"),
            ),
            (
                false,
                "HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n",
                Err("invalid"),
            ),
            (
                false,
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n",
                Err("both"),
            ),
        ];
        for (asked_head, wire, expected) in rows {
            match (kind(asked_head, wire), expected) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{wire:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{wire:?}: {got}"),
                (got, want) => panic!("{wire:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn whether_the_origin_keeps_the_connection() {
        for (wire, keeps) in [
            ("HTTP/1.1 200 OK\r\n\r\n", true),
            ("HTTP/1.1 200 OK\r\nconnection: Close\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nconnection: x-hop, close\r\n\r\n", false),
            ("HTTP/1.0 200 OK\r\n\r\n", false),
            ("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\n\r\n", true),
        ] {
            assert_eq!(keeps_alive(&head(wire)), keeps, "{wire:?}");
        }
    }

    #[test]
    fn response_heads_parse_or_are_refused() {
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-le")
                .unwrap()
                .is_none()
        );
        let (len, parsed) = parse_head(b"HTTP/1.1 404 Gone\r\nx-a: 1\r\nx-a: 2\r\n\r\nbody")
            .unwrap()
            .unwrap();
        assert_eq!(len, 37);
        assert_eq!(parsed.status, StatusCode::NOT_FOUND);
        assert_eq!(parsed.headers.get_all("x-a").iter().count(), 2);
        assert!(parse_head(b"HTTP/1.1 2000 OK\r\n\r\n").is_err());
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        let many: String = (0..=MAX_FIELDS).map(|i| format!("x-{i}: 1\r\n")).collect();
        assert!(parse_head(format!("HTTP/1.1 200 OK\r\n{many}\r\n").as_bytes()).is_err());
    }

    #[test]
    fn only_an_idempotent_request_without_a_body_is_sent_twice() {
        for (method, bodiless, expected) in [
            (Method::GET, true, true),
            (Method::HEAD, true, true),
            (Method::OPTIONS, true, true),
            (Method::TRACE, true, true),
            (Method::PUT, true, true),
            (Method::DELETE, true, true),
            (Method::POST, true, false),
            (Method::PATCH, true, false),
            (Method::CONNECT, true, false),
            (Method::GET, false, false),
            (Method::PUT, false, false),
        ] {
            assert_eq!(
                replayable(&method, bodiless),
                expected,
                "{method} {bodiless}"
            );
        }
    }

    #[test]
    fn a_request_head_is_origin_form_with_its_framing() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("api.example.com"));
        let uri: http::Uri = "/v1/items?x=1".parse().unwrap();
        assert_eq!(
            request_head(&Method::POST, &uri, &headers, true),
            b"POST /v1/items?x=1 HTTP/1.1\r\nhost: api.example.com\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        assert_eq!(
            request_head(
                &Method::GET,
                &"/".parse().unwrap(),
                &HeaderMap::new(),
                false
            ),
            b"GET / HTTP/1.1\r\n\r\n"
        );
    }
}
