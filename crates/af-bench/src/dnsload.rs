//! The DNS load generator: a fixed number of queries in flight over UDP, each socket waiting for
//! its answer before asking again.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use af_wire::dns_wire::{TYPE_A, build_query, read_response_addresses};
use tokio::net::UdpSocket;

/// Which names the queries ask for.
#[derive(Clone, Copy)]
pub enum Names {
    /// Every query the same name: many clients looking up one service at once, which a forwarder
    /// may answer with one upstream query.
    Same,
    /// Every query a name of its own under the given one (`q<socket>-<n>.<name>`): nothing can be
    /// shared, every query costs a full forward.
    Distinct,
}

/// Queries answered per second, and how many went unanswered (a query unanswered for 200 ms is
/// counted lost and the socket asks again).
pub async fn run(
    server: SocketAddr,
    name: &str,
    names: Names,
    in_flight: usize,
    duration: Duration,
) -> (f64, u64) {
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..in_flight {
        let name = name.to_string();
        tasks.spawn(async move {
            let socket = UdpSocket::bind("127.0.0.1:0").await.expect("a UDP socket");
            socket.connect(server).await.expect("connect");
            let mut answered = 0u64;
            let mut lost = 0u64;
            let mut id = (worker as u16).wrapping_mul(977);
            let mut buf = vec![0u8; 1500];
            let mut asked = 0u64;
            while Instant::now() < deadline {
                id = id.wrapping_add(1);
                asked += 1;
                let query = match names {
                    Names::Same => build_query(id, &name, TYPE_A),
                    Names::Distinct => {
                        build_query(id, &format!("q{worker}-{asked}.{name}"), TYPE_A)
                    }
                };
                if socket.send(&query).await.is_err() {
                    lost += 1;
                    continue;
                }
                loop {
                    match tokio::time::timeout(Duration::from_millis(200), socket.recv(&mut buf))
                        .await
                    {
                        Ok(Ok(n)) if n >= 2 && buf[..2] == id.to_be_bytes() => {
                            match read_response_addresses(&buf[..n]) {
                                Some((0, addresses)) if !addresses.is_empty() => answered += 1,
                                _ => lost += 1,
                            }
                            break;
                        }
                        // A late answer to an earlier, timed-out query: keep waiting for ours.
                        Ok(Ok(_)) => continue,
                        _ => {
                            lost += 1;
                            break;
                        }
                    }
                }
            }
            (answered, lost)
        });
    }
    let (mut answered, mut lost) = (0, 0);
    while let Some(Ok((a, l))) = tasks.join_next().await {
        answered += a;
        lost += l;
    }
    (answered as f64 / started.elapsed().as_secs_f64(), lost)
}
