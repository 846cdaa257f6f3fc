//! A TCP connection made inside a Pod's network namespace, as the kubelet's port-forward makes
//! one: to `localhost:PORT` of the Pod, so a server that listens on the Pod's loopback only (the
//! sidecar's control API) is reached, and nothing outside the Pod is. A thread of its own enters
//! the namespace, makes the socket there (a socket stays in the namespace it was made in) and ends.

use std::fs::File;

use nix::sched::{CloneFlags, setns};

/// Connects to `127.0.0.1:port` in the network namespace of process `pid` (the Pod's holder).
pub async fn connect(pid: i64, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let stream = tokio::task::spawn_blocking(move || {
        let namespace = File::open(format!("/proc/{pid}/ns/net"))?;
        // The thread is this call's alone: blocking-pool threads are reused, so it is moved
        // into the namespace on a thread made for it.
        std::thread::spawn(move || -> std::io::Result<std::net::TcpStream> {
            setns(&namespace, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
            let stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
            stream.set_nonblocking(true)?;
            Ok(stream)
        })
        .join()
        .map_err(|_| std::io::Error::other("the namespace thread panicked"))?
    })
    .await
    .map_err(std::io::Error::other)??;
    tokio::net::TcpStream::from_std(stream)
}
