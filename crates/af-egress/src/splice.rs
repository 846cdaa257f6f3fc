//! Relaying a tunnel between two TCP sockets. A tunnel's bytes are opaque to the sidecar once its
//! decision is made, so bulk data need not cross into the process at all: while a direction moves
//! bulk, its bytes go socket → pipe → socket with splice(2), the pages passed by reference instead
//! of copied out and back in (as HAProxy does); that halved the sidecar's CPU per MiB. Small
//! messages are copied through a buffer instead, where splice's pipe handling costs more than
//! copying a few hundred bytes: each direction switches by the size of its last move, and gets its
//! pipe only when it first carries bulk, so a tunnel of small messages holds no pipe at all. A pipe
//! that cannot be had leaves the direction copying, which is always correct.
//!
//! The copy buffer is the worker thread's, not the tunnel's: a message is read and written in one
//! poll, so a tunnel holds no buffer between messages, and only the rare message its receiver
//! does not take at once is kept (in a buffer of its size) until it is written. A buffer per
//! direction was 32 KiB per tunnel: 2 MiB of the sidecar's resident memory at 64 tunnels.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Poll, ready};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use tokio::io::{AsyncRead, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};

/// Bytes asked for per splice, and the pipe size asked for: four times the default pipe (16
/// pages), which took 1 MiB tunnels at 64 clients from about 1.5k to 2k responses/s here (fewer
/// splices and wake-ups per MiB). The kernel may refuse the size (a user over its pipe budget);
/// the pipe then keeps its default and splices move less each.
const CHUNK: usize = 256 << 10;

/// A direction copying small messages reads this much at most; one read that fills it says bulk
/// is flowing, and the next move is spliced.
const COPY_BUFFER: usize = 16 << 10;

/// A splice that moved less than this says the bulk has ended: back to copying.
const BULK: usize = COPY_BUFFER;

thread_local! {
    /// The copy buffer of every tunnel this thread runs (see the module's comment).
    static COPY_SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; COPY_BUFFER].into_boxed_slice());
}

/// One direction's pipe.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) =
            nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        let _ = fcntl(&write, FcntlArg::F_SETPIPE_SZ(CHUNK as i32));
        Ok(Pipe { read, write })
    }
}

/// A direction's pipe, made when the direction first carries bulk.
enum PipeState {
    NotYet,
    Ready(Pipe),
    /// Could not be made (out of descriptors, say): this direction copies.
    Unavailable,
}

/// Relays `a` ⇄ `b` until both directions end; returns the bytes moved a → b and b → a. When one
/// side stops sending, the other is told so (its write half is shut) and the other direction goes
/// on, as `tokio::io::copy_bidirectional` does. A direction that fails (a peer that resets, as a
/// TLS client may once it has said goodbye) ends as if its sender had stopped: what it moved
/// still counts, for the decision log's bytes each way.
pub async fn relay(a: &mut TcpStream, b: &mut TcpStream) -> (u64, u64) {
    let (a_read, a_write) = a.split();
    let (b_read, b_write) = b.split();
    tokio::join!(pump(a_read, b_write), pump(b_read, a_write))
}

/// Moves everything `from` sends to `to`, then shuts `to`'s write half; the bytes moved.
async fn pump(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>) -> u64 {
    let mut total = 0u64;
    if let Err(err) = pump_until_end(&mut from, &mut to, &mut total).await {
        tracing::debug!(error = %err, "a relayed direction ended with an error");
    }
    let _ = to.shutdown().await;
    total
}

/// [`pump`]'s loop: until `from` ends (`Ok`) or a read or write fails, adding to `total` as it
/// goes.
async fn pump_until_end(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    total: &mut u64,
) -> io::Result<()> {
    let mut pipe = PipeState::NotYet;
    let mut bulk = false;
    loop {
        let moved = match (&pipe, bulk) {
            (PipeState::Ready(pipe), true) => {
                let moved = splice_once(from.as_ref(), to.as_ref(), pipe).await?;
                bulk = moved >= BULK;
                moved
            }
            _ => {
                let (moved, unwritten) = copy_once(from, to).await?;
                to.write_all(&unwritten).await?;
                bulk = moved == COPY_BUFFER;
                if bulk && matches!(pipe, PipeState::NotYet) {
                    pipe = Pipe::new().map_or(PipeState::Unavailable, PipeState::Ready);
                }
                moved
            }
        };
        if moved == 0 {
            return Ok(());
        }
        *total += moved as u64;
    }
}

/// Reads what `from` has (up to [`COPY_BUFFER`]) into the thread's copy buffer and writes what
/// `to` takes of it at once, all in one poll; returns the bytes read and, copied out of the
/// thread's buffer, those `to` did not take, for the caller to write.
async fn copy_once(from: &mut ReadHalf<'_>, to: &WriteHalf<'_>) -> io::Result<(usize, Vec<u8>)> {
    std::future::poll_fn(|cx| {
        COPY_SCRATCH.with_borrow_mut(|scratch| {
            let mut read = ReadBuf::new(scratch);
            // Through the stream's own read, which marks the socket drained after a short read
            // instead of asking the kernel once more to learn it.
            ready!(Pin::new(&mut *from).poll_read(cx, &mut read))?;
            let message = read.filled();
            if message.is_empty() {
                return Poll::Ready(Ok((0, Vec::new())));
            }
            let written = match to.try_write(message) {
                Ok(written) => written,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => 0,
                Err(err) => return Poll::Ready(Err(err)),
            };
            Poll::Ready(Ok((message.len(), message[written..].to_vec())))
        })
    })
    .await
}

/// Whatever `from` has (up to [`CHUNK`]) into the pipe, and all of it on to `to`.
async fn splice_once(from: &TcpStream, to: &TcpStream, pipe: &Pipe) -> io::Result<usize> {
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
    let filled = from
        .async_io(Interest::READABLE, || {
            splice(from.as_fd(), None, pipe.write.as_fd(), None, CHUNK, flags)
                .map_err(io::Error::from)
        })
        .await?;
    let mut left = filled;
    while left > 0 {
        left -= to
            .async_io(Interest::WRITABLE, || {
                splice(pipe.read.as_fd(), None, to.as_fd(), None, left, flags)
                    .map_err(io::Error::from)
            })
            .await?;
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A connected pair of loopback sockets.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (far, _) = listener.accept().await.unwrap();
        (near, far)
    }

    /// client ⇄ [a relay b] ⇄ server, the relay running; returns the client and server ends and
    /// the relay's outcome.
    async fn relayed() -> (TcpStream, TcpStream, tokio::task::JoinHandle<(u64, u64)>) {
        let (client, mut a) = pair().await;
        let (mut b, server) = pair().await;
        let relay = tokio::spawn(async move { relay(&mut a, &mut b).await });
        (client, server, relay)
    }

    #[tokio::test]
    async fn small_messages_go_back_and_forth_in_order() {
        let (mut client, mut server, relay) = relayed().await;
        let mut buffer = [0u8; 64];
        for round in 0..200u32 {
            let message = format!("ping {round}");
            client.write_all(message.as_bytes()).await.unwrap();
            let n = server.read(&mut buffer).await.unwrap();
            assert_eq!(&buffer[..n], message.as_bytes());
            server.write_all(&round.to_be_bytes()).await.unwrap();
            client.read_exact(&mut buffer[..4]).await.unwrap();
            assert_eq!(buffer[..4], round.to_be_bytes());
        }
        drop(client);
        drop(server);
        let (up, down) = relay.await.unwrap();
        assert_eq!(down, 800);
        assert!(up > 0);
    }

    /// Small messages towards a receiver that stops reading, with the relay's socket to it given
    /// a small send buffer so that it fills within a few messages: the relay keeps what the
    /// receiver did not take and writes it before reading more, so every byte arrives, in
    /// order, when the receiver reads again.
    #[tokio::test]
    async fn a_receiver_that_stops_reading_still_gets_every_byte_in_order() {
        use nix::sys::socket::{setsockopt, sockopt};
        let (mut client, mut a) = pair().await;
        let (mut b, mut server) = pair().await;
        setsockopt(&b, sockopt::SndBuf, &4096).unwrap();
        setsockopt(&server, sockopt::RcvBuf, &4096).unwrap();
        let relay = tokio::spawn(async move { relay(&mut a, &mut b).await });
        let sent: Vec<u8> = (0..60_000usize).map(|i| (i % 253) as u8).collect();
        let messages = sent.clone();
        let writer = tokio::spawn(async move {
            for message in messages.chunks(700) {
                client.write_all(message).await.unwrap();
                tokio::task::yield_now().await;
            }
            client.shutdown().await.unwrap();
            client
        });
        // Not reading until the writer is well ahead: the relay's writes to the server fill it.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let mut received = Vec::new();
        server.read_to_end(&mut received).await.unwrap();
        assert!(
            received == sent,
            "{} of {} bytes, or out of order",
            received.len(),
            sent.len()
        );
        drop(server);
        drop(writer.await.unwrap());
        assert_eq!(relay.await.unwrap().0, sent.len() as u64);
    }

    /// Bulk one way, then, after that side stops sending, bulk the other way: the half-close is
    /// passed on and the other direction keeps going. Each direction starts copying and switches
    /// to splicing once a read fills its buffer; the odd piece sizes end on short moves too.
    #[tokio::test]
    async fn bulk_crosses_whole_through_a_half_close() {
        let (mut client, mut server, relay) = relayed().await;
        let up: Vec<u8> = (0..5_000_000usize).map(|i| (i % 251) as u8).collect();
        let down: Vec<u8> = (0..3_000_000usize).map(|i| (i % 241) as u8).collect();
        let sent = up.clone();
        let writer = tokio::spawn(async move {
            for piece in sent.chunks(700_001) {
                client.write_all(piece).await.unwrap();
            }
            client.shutdown().await.unwrap();
            client
        });
        let mut received = Vec::new();
        // Bounded only so that a lost half-close fails instead of hanging.
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            server.read_to_end(&mut received),
        )
        .await
        .expect("the client's half-close reaches the server")
        .unwrap();
        assert!(
            received == up,
            "up: {} of {} bytes",
            received.len(),
            up.len()
        );
        for piece in down.chunks(99_991) {
            server.write_all(piece).await.unwrap();
        }
        drop(server);
        let mut client = writer.await.unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert!(back == down, "down: {} of {} bytes", back.len(), down.len());
        assert_eq!(relay.await.unwrap(), (up.len() as u64, down.len() as u64));
    }

    /// A peer that resets the connection ends its direction, and the bytes moved until then still
    /// count: a TLS client that closes abruptly after its last message must not make a relay's
    /// record say nothing moved.
    #[tokio::test]
    async fn what_moved_before_a_reset_still_counts() {
        let (mut client, mut server, relay) = relayed().await;
        client.write_all(b"hello").await.unwrap();
        let mut buffer = [0u8; 5];
        server.read_exact(&mut buffer).await.unwrap();
        server.write_all(b"welcome!").await.unwrap();
        let mut answer = [0u8; 8];
        client.read_exact(&mut answer).await.unwrap();
        // Pending bytes at close make the kernel send a reset instead of a FIN.
        server.write_all(b"unread").await.unwrap();
        client.set_zero_linger().unwrap();
        drop(client);
        let (up, down) = relay.await.unwrap();
        assert_eq!(up, 5);
        assert!(down >= 8, "{down}");
    }
}
