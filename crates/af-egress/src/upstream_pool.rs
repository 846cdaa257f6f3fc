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

use crate::upstream_http::UpstreamConnection;

/// Idle connections kept per address; beyond it the oldest is closed. As many as the requests a
/// busy environment has in flight to one address at once: with fewer, every burst wider than
/// the pool dials the difference anew and closes it again after (64 clients opening a connection
/// per request dialled upstream for a third of their requests with 16 here). An idle connection
/// costs a descriptor and under a KiB, for at most [`IDLE_FOR`].
const IDLE_PER_ADDRESS: usize = 64;

/// Idle connections kept across all addresses: beyond it a connection given back is closed, until
/// the sweep or the next requests make room. Bounds the descriptors a burst to many addresses can
/// hold idle, which the per-address cap alone does not.
const IDLE_IN_ALL: usize = 512;

/// An idle connection older than this is closed instead of reused: origins close idle
/// connections after a few seconds to a minute, and a request sent on one just closed is wasted.
const IDLE_FOR: Duration = Duration::from_secs(4);

struct Idle {
    connection: UpstreamConnection,
    since: Instant,
}

impl Idle {
    /// Open and quiet, and not idle for too long at `now` (read once per pass over a list, not
    /// per entry).
    fn usable_at(&self, now: Instant) -> bool {
        now.duration_since(self.since) < IDLE_FOR && self.connection.is_usable()
    }
}

/// The idle connections by address, and how many there are in all.
#[derive(Default)]
struct Kept {
    by_address: HashMap<SocketAddr, Vec<Idle>>,
    total: usize,
}

impl Kept {
    /// Drops `addr`'s closed and stale connections; its list, if it has one.
    fn usable(&mut self, addr: SocketAddr, now: Instant) -> Option<&mut Vec<Idle>> {
        let list = self.by_address.get_mut(&addr)?;
        let before = list.len();
        list.retain(|i| i.usable_at(now));
        self.total -= before - list.len();
        Some(list)
    }
}

#[derive(Default)]
pub struct UpstreamPool {
    idle: Mutex<Kept>,
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
    pub fn take(&self, addr: SocketAddr) -> Option<UpstreamConnection> {
        let mut kept = self.lock();
        let list = kept.usable(addr, Instant::now())?;
        let found = list.pop().map(|idle| idle.connection);
        let emptied = list.is_empty();
        if found.is_some() {
            kept.total -= 1;
        }
        if emptied {
            kept.by_address.remove(&addr);
        }
        found
    }

    /// Keeps `connection`, whose client connection has ended and whose last exchange is over,
    /// for the next request to its address. That address's closed and stale connections are
    /// dropped on the way; other addresses' are left to [`sweep_forever`], so giving one back
    /// costs the same however many addresses the pool holds.
    pub fn give_back(&self, connection: UpstreamConnection) {
        if !connection.is_usable() {
            return;
        }
        let addr = connection.addr();
        let now = Instant::now();
        let mut kept = self.lock();
        let has = kept.usable(addr, now).map_or(0, |list| list.len());
        if has < IDLE_PER_ADDRESS && kept.total >= IDLE_IN_ALL {
            // Full everywhere: this one is closed (dropped) rather than kept.
            return;
        }
        let Kept { by_address, total } = &mut *kept;
        let list = by_address.entry(addr).or_default();
        if list.len() >= IDLE_PER_ADDRESS {
            // The address's oldest makes room; the count stays.
            list.remove(0);
        } else {
            *total += 1;
        }
        list.push(Idle {
            connection,
            since: now,
        });
    }

    /// Closes every stale connection (dropping the last handle on a connection closes it).
    pub fn sweep(&self) {
        prune(&mut self.lock());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn prune(kept: &mut Kept) {
    let now = Instant::now();
    kept.by_address.retain(|_, list| {
        list.retain(|i| i.usable_at(now));
        !list.is_empty()
    });
    kept.total = kept.by_address.values().map(Vec::len).sum();
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
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// Loopback connections standing in for connections to origins, their far ends kept open.
    struct Origins {
        listener: TcpListener,
        far_ends: Vec<TcpStream>,
    }

    impl Origins {
        async fn new() -> Self {
            // The biggest test holds over 1,000 sockets open at once.
            use nix::sys::resource::{Resource, getrlimit, setrlimit};
            let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
            setrlimit(Resource::RLIMIT_NOFILE, soft.max(hard.min(4096)), hard).unwrap();
            Origins {
                listener: TcpListener::bind("127.0.0.1:0").await.unwrap(),
                far_ends: Vec::new(),
            }
        }

        /// An open connection, as if dialled to `addr`.
        async fn open(&mut self, addr: SocketAddr) -> UpstreamConnection {
            let near = TcpStream::connect(self.listener.local_addr().unwrap())
                .await
                .unwrap();
            self.far_ends.push(self.listener.accept().await.unwrap().0);
            UpstreamConnection::over(addr, near)
        }
    }

    /// 64 clients each opening a connection per request to one origin give back 64 upstream
    /// connections at once; all of them are kept for the next 64 requests, and no more than the
    /// cap.
    #[tokio::test]
    async fn a_burst_of_64_connections_is_kept_whole_and_the_cap_holds() {
        let pool = UpstreamPool::default();
        let addr: SocketAddr = "203.0.113.10:80".parse().unwrap();
        let other: SocketAddr = "203.0.113.11:80".parse().unwrap();
        let mut origins = Origins::new().await;
        for _ in 0..IDLE_PER_ADDRESS + 3 {
            pool.give_back(origins.open(addr).await);
        }
        pool.give_back(origins.open(other).await);
        let mut taken = 0;
        while pool.take(addr).is_some() {
            taken += 1;
        }
        assert!(
            (64..=IDLE_PER_ADDRESS).contains(&taken),
            "{taken} connections kept"
        );
        assert!(pool.take(other).is_some(), "another address keeps its own");
        assert_eq!(pool.lock().total, 0, "the count follows what is kept");
    }

    /// A burst to many addresses holds at most the pool's total; a connection taken makes room.
    #[tokio::test]
    async fn the_pool_holds_no_more_than_its_total_across_addresses() {
        let pool = UpstreamPool::default();
        let address =
            |i: usize| SocketAddr::from(([203, 0, 113, (i % 250) as u8], 1000 + i as u16));
        let mut origins = Origins::new().await;
        for i in 0..IDLE_IN_ALL + 10 {
            pool.give_back(origins.open(address(i)).await);
        }
        assert_eq!(pool.lock().total, IDLE_IN_ALL);
        let kept = (0..IDLE_IN_ALL + 10)
            .filter(|&i| pool.take(address(i)).is_some())
            .count();
        assert_eq!(
            kept, IDLE_IN_ALL,
            "the first ones were kept, the last ten closed"
        );
        assert_eq!(pool.lock().total, 0);
        pool.give_back(origins.open(address(0)).await);
        assert!(pool.take(address(0)).is_some(), "room again once taken");
    }

    /// A connection the origin has closed, or on which it sent something nobody asked for, is
    /// not kept; an open, quiet one is.
    #[tokio::test]
    async fn closed_and_chattering_connections_are_not_kept() {
        use tokio::io::AsyncWriteExt;
        let pool = UpstreamPool::default();
        let addr: SocketAddr = "203.0.113.10:80".parse().unwrap();
        let mut origins = Origins::new().await;
        let quiet = origins.open(addr).await;
        let chattering = origins.open(addr).await;
        let closed = origins.open(addr).await;
        origins.far_ends[1]
            .write_all(b"HTTP/1.1 200 OK\r\n")
            .await
            .unwrap();
        origins.far_ends.remove(2);
        // Once the reactor has seen both (the sidecar's reactor runs between requests).
        chattering.readable().await;
        closed.readable().await;
        for connection in [quiet, chattering, closed] {
            pool.give_back(connection);
        }
        assert_eq!(pool.lock().total, 1);
        assert!(pool.take(addr).is_some(), "the quiet one");
        assert!(pool.take(addr).is_none());
    }
}
