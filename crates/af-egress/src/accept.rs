//! The accept loops of the sidecar's TCP listeners: the control API's, and the workloads', which
//! admit at most `limits.max_connections` connections at once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;

use crate::context::Shared;
use crate::metrics::OpenConnection;

/// Accepts connections for ever, handing each to `handle` on a task of its own. An accept error
/// (out of file descriptors, say) is logged and waited out briefly rather than spun on.
pub async fn accept_forever<F, Fut>(listener: TcpListener, what: &'static str, handle: F)
where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(handle(stream, peer));
            }
            Err(err) => {
                tracing::warn!(error = %err, listener = what, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A workload's connection, admitted under `limits.max_connections`: counted as open and holding
/// one of the sidecar's admissions until dropped — by the connection's task, or by the tunnel or
/// upgraded connection it became, which outlives that task.
#[derive(Debug)]
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    _open: OpenConnection,
}

/// Accepts workloads' connections for ever, each on a task of its own, while fewer than
/// `limits.max_connections` are open; at the limit the next is not served until one closes (it
/// waits unread, and those after it in the kernel's backlog). Whatever a workload opens, the
/// sidecar's memory for connections stays bounded.
pub async fn accept_workloads<F, Fut>(
    listener: TcpListener,
    what: &'static str,
    shared: Arc<Shared>,
    handle: F,
) where
    F: Fn(TcpStream, SocketAddr, Admitted) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // Taken after the accept, so that a listener waiting for a client holds none: at
                // the limit this connection waits here, and the next ones in the backlog.
                let Ok(permit) = shared.admissions.clone().acquire_owned().await else {
                    return; // never closed
                };
                let admitted = Admitted {
                    _permit: permit,
                    _open: shared.metrics.connection_opened(),
                };
                tokio::spawn(handle(stream, peer, admitted));
            }
            Err(err) => {
                tracing::warn!(error = %err, listener = what, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
