//! Datagrams in batches: `recvmmsg` takes every datagram waiting (up to [`BATCH`]) in one system
//! call and `sendmmsg` sends a batch in one, so under load the DNS responder pays a few system
//! calls per batch instead of two per query. With one query waiting it costs what
//! `recv_from`/`send_to` cost.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Datagrams moved per system call at most.
pub const BATCH: usize = 32;
/// The largest datagram read; a DNS message over UDP is far smaller.
const DATAGRAM: usize = 4096;

fn to_std(address: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = address.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    address
        .as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

/// A datagram and where it goes (`None` on a connected socket).
pub type Datagram = (Vec<u8>, Option<SocketAddr>);

/// Buffers for one batch of received datagrams, reused from batch to batch.
#[derive(Debug)]
pub struct Inbound {
    buffers: Vec<Vec<u8>>,
    received: Vec<(usize, Option<SocketAddr>)>,
}

impl Default for Inbound {
    fn default() -> Inbound {
        Inbound {
            buffers: vec![vec![0; DATAGRAM]; BATCH],
            received: Vec::with_capacity(BATCH),
        }
    }
}

impl Inbound {
    /// Waits for at least one datagram and takes every one waiting, up to [`BATCH`].
    pub async fn receive(&mut self, socket: &UdpSocket) -> io::Result<()> {
        let fd = socket.as_raw_fd();
        loop {
            socket.readable().await?;
            let (buffers, received) = (&mut self.buffers, &mut self.received);
            let taken = socket.try_io(Interest::READABLE, || {
                received.clear();
                let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(buffers.len(), None);
                let mut slices: Vec<[IoSliceMut<'_>; 1]> = buffers
                    .iter_mut()
                    .map(|b| [IoSliceMut::new(&mut b[..])])
                    .collect();
                let results = recvmmsg(
                    fd,
                    &mut headers,
                    slices.iter_mut(),
                    MsgFlags::MSG_DONTWAIT,
                    None,
                )
                .map_err(io::Error::from)?;
                for message in results {
                    received.push((message.bytes, message.address.as_ref().and_then(to_std)));
                }
                // Fewer than a full batch: the socket is drained. Saying so clears its readiness
                // now, instead of after one more call that would only find nothing (tokio keeps
                // the readiness if a datagram arrived meanwhile).
                if received.len() < buffers.len() {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(())
            });
            match taken {
                Ok(()) => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock && !received.is_empty() => {
                    return Ok(());
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// The datagrams of the last batch: their bytes and senders.
    pub fn datagrams(&mut self) -> impl Iterator<Item = (&mut [u8], Option<SocketAddr>)> {
        self.buffers
            .iter_mut()
            .zip(self.received.iter())
            .map(|(buffer, (len, from))| (&mut buffer[..*len], *from))
    }
}

/// Sends every datagram, in as few system calls as the kernel allows. A datagram the kernel
/// refuses is dropped, as UDP would; the positions of the dropped ones are returned, so a
/// forwarder can answer for them.
pub async fn send_all(socket: &UdpSocket, datagrams: &[Datagram]) -> Vec<usize> {
    let fd = socket.as_raw_fd();
    let mut sent = 0;
    let mut dropped = Vec::new();
    while sent < datagrams.len() {
        if socket.writable().await.is_err() {
            dropped.extend(sent..datagrams.len());
            return dropped;
        }
        let batch = &datagrams[sent..datagrams.len().min(sent + BATCH)];
        let result = socket.try_io(Interest::WRITABLE, || {
            let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(batch.len(), None);
            let slices: Vec<[IoSlice<'_>; 1]> = batch
                .iter()
                .map(|(bytes, _)| [IoSlice::new(bytes)])
                .collect();
            let addresses: Vec<Option<SockaddrStorage>> = batch
                .iter()
                .map(|(_, to)| to.map(<SockaddrStorage as From<SocketAddr>>::from))
                .collect();
            let no_control: [ControlMessage<'_>; 0] = [];
            let results = sendmmsg(
                fd,
                &mut headers,
                slices.iter(),
                &addresses,
                no_control,
                MsgFlags::MSG_DONTWAIT,
            )
            .map_err(io::Error::from)?;
            Ok(results.count())
        });
        match result {
            Ok(count @ 1..) => sent += count,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            // Nothing went, or the first datagram was refused (a bad address, or an error the
            // peer reported earlier): drop that one and go on, or this would spin.
            Ok(0) | Err(_) => {
                dropped.push(sent);
                sent += 1;
            }
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_goes_and_comes_back_whole() {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let to = Some(b.local_addr().unwrap());
        let datagrams: Vec<Datagram> = (0..40u8)
            .map(|i| (vec![i; usize::from(i) + 1], to))
            .collect();
        send_all(&a, &datagrams).await;
        let mut inbound = Inbound::default();
        let mut seen = Vec::new();
        while seen.len() < 40 {
            inbound.receive(&b).await.unwrap();
            for (bytes, from) in inbound.datagrams() {
                assert_eq!(from, Some(a.local_addr().unwrap()));
                seen.push(bytes.to_vec());
            }
        }
        assert_eq!(
            seen,
            datagrams.into_iter().map(|(d, _)| d).collect::<Vec<_>>()
        );
    }
}
