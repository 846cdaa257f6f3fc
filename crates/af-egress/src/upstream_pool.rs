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

/// Idle connections kept per address; beyond it the oldest is closed.
const IDLE_PER_ADDRESS: usize = 16;

/// An idle connection older than this is closed instead of reused: origins close idle
/// connections after a few seconds to a minute, and a request sent on one just closed is wasted.
const IDLE_FOR: Duration = Duration::from_secs(4);

struct Idle {
    sender: SendRequest<ProxyBody>,
    since: Instant,
}

impl Idle {
    fn usable(&self) -> bool {
        !self.sender.is_closed() && self.since.elapsed() < IDLE_FOR
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
        kept.retain(Idle::usable);
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
        kept.retain(Idle::usable);
        if kept.len() >= IDLE_PER_ADDRESS {
            kept.remove(0);
        }
        kept.push(Idle {
            sender,
            since: Instant::now(),
        });
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
    idle.retain(|_, kept| {
        kept.retain(Idle::usable);
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
