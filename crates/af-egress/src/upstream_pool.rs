//! Idle upstream HTTP connections, shared by every client of the sidecar and keyed by the address
//! they were dialled to. A client that opens a connection per request (many HTTP libraries do)
//! then costs the sidecar an accept, not an accept plus a dial, a handshake across the network
//! and a teardown. Reuse keeps the guarantee that the sidecar only talks to addresses it checked:
//! a request is decided and its address classified first, and only a connection dialled to
//! exactly that address is taken.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::client::conn::http1::SendRequest;

use crate::body::ProxyBody;

/// Idle connections kept per address; beyond it the oldest is closed. As many as the requests a
/// busy environment has in flight to one address at once: with fewer, every burst wider than
/// the pool dials the difference anew and closes it again after (64 clients opening a connection
/// per request dialled upstream for a third of their requests with 16 here). An idle connection
/// costs a descriptor and a few KiB, for at most [`IDLE_FOR`].
const IDLE_PER_ADDRESS: usize = 64;

/// An idle connection older than this is closed instead of reused: origins close idle
/// connections after a few seconds to a minute, and a request sent on one just closed is wasted.
const IDLE_FOR: Duration = Duration::from_secs(4);

struct Idle {
    sender: SendRequest<ProxyBody>,
    since: Instant,
}

impl Idle {
    /// Open, and not idle for too long at `now` (read once per pass over a list, not per entry).
    fn usable_at(&self, now: Instant) -> bool {
        !self.sender.is_closed() && now.duration_since(self.since) < IDLE_FOR
    }
}

#[derive(Default)]
pub struct UpstreamPool {
    idle: Mutex<HashMap<SocketAddr, Vec<Idle>>>,
}

impl std::fmt::Debug for UpstreamPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamPool").finish_non_exhaustive()
    }
}

impl UpstreamPool {
    /// The most recently returned connection to `addr` still open; closed and stale ones are
    /// dropped on the way. (Only connections whose last exchange is over are given back, and
    /// nobody uses one while it is here, so an open one is ready.)
    pub fn take(&self, addr: SocketAddr) -> Option<SendRequest<ProxyBody>> {
        let mut idle = self.lock();
        let kept = idle.get_mut(&addr)?;
        let now = Instant::now();
        kept.retain(|i| i.usable_at(now));
        let found = kept.pop().map(|idle| idle.sender);
        if kept.is_empty() {
            idle.remove(&addr);
        }
        found
    }

    /// Keeps `sender`, a connection whose client connection has ended and whose last exchange
    /// is over, for the next request to `addr`. That address's closed and stale connections are
    /// dropped on the way; other addresses' are left to [`sweep_forever`], so giving one back
    /// costs the same however many addresses the pool holds.
    pub fn give_back(&self, addr: SocketAddr, sender: SendRequest<ProxyBody>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.lock();
        let kept = idle.entry(addr).or_default();
        let now = Instant::now();
        kept.retain(|i| i.usable_at(now));
        if kept.len() >= IDLE_PER_ADDRESS {
            kept.remove(0);
        }
        kept.push(Idle { sender, since: now });
    }

    /// Closes every stale connection (dropping the last handle on a connection closes it).
    pub fn sweep(&self) {
        prune(&mut self.lock());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Vec<Idle>>> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn prune(idle: &mut HashMap<SocketAddr, Vec<Idle>>) {
    let now = Instant::now();
    idle.retain(|_, kept| {
        kept.retain(|i| i.usable_at(now));
        !kept.is_empty()
    });
}

/// Sweeps the sidecar's pool for ever, so that connections left idle when traffic stops are closed too.
pub async fn sweep_forever(shared: std::sync::Arc<crate::context::Shared>) {
    loop {
        tokio::time::sleep(IDLE_FOR).await;
        shared.upstreams.sweep();
    }
}

#[cfg(test)]
mod tests {
    use hyper_util::rt::TokioIo;

    use super::*;

    /// An open client connection over an in-memory pipe whose far end is kept (so it stays open).
    async fn open_sender(far_ends: &mut Vec<tokio::io::DuplexStream>) -> SendRequest<ProxyBody> {
        let (near, far) = tokio::io::duplex(1024);
        far_ends.push(far);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(near))
            .await
            .unwrap();
        tokio::spawn(connection);
        sender
    }

    /// 64 clients each opening a connection per request to one origin give back 64 upstream
    /// connections at once; all of them are kept for the next 64 requests, and no more than the
    /// cap.
    #[tokio::test]
    async fn a_burst_of_64_connections_is_kept_whole_and_the_cap_holds() {
        let pool = UpstreamPool::default();
        let addr: SocketAddr = "203.0.113.10:80".parse().unwrap();
        let other: SocketAddr = "203.0.113.11:80".parse().unwrap();
        let mut far_ends = Vec::new();
        for _ in 0..IDLE_PER_ADDRESS + 3 {
            let sender = open_sender(&mut far_ends).await;
            pool.give_back(addr, sender);
        }
        pool.give_back(other, open_sender(&mut far_ends).await);
        let mut taken = 0;
        while pool.take(addr).is_some() {
            taken += 1;
        }
        assert!(
            (64..=IDLE_PER_ADDRESS).contains(&taken),
            "{taken} connections kept"
        );
        assert!(pool.take(other).is_some(), "another address keeps its own");
    }

    #[tokio::test]
    async fn closed_connections_are_not_handed_out() {
        let pool = UpstreamPool::default();
        let addr: SocketAddr = "203.0.113.10:80".parse().unwrap();
        let mut far_ends = Vec::new();
        let sender = open_sender(&mut far_ends).await;
        pool.give_back(addr, sender);
        // The origin closes its end; the connection task sees it and the sender reports closed.
        far_ends.clear();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(pool.take(addr).is_none());
    }
}
