//! The accept loop every TCP listener of the sidecar shares.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

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
