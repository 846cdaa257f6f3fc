//! Starting a sidecar: bind every configured listener first (so a port that cannot be had fails
//! the start, before anything is served), then serve them all.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinSet;

use crate::budget::ByteBudget;
use crate::config::LoadedConfig;
use crate::context::Shared;
use crate::decision_log::DecisionLog;
use crate::http_proxy::{self, HttpMode};
use crate::inbox::Inbox;
use crate::metrics::Metrics;
use crate::resolve::Resolver;
use crate::{control, dns, relay, smtp, tunnel, upstream_pool};

/// The addresses a started sidecar actually listens on (port 0 in the configuration becomes the
/// port the kernel chose).
#[derive(Debug, Clone, Default)]
pub struct BoundAddresses {
    pub proxy: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    pub tls: Option<SocketAddr>,
    pub dns: Option<SocketAddr>,
    pub smtp: Vec<SocketAddr>,
    pub smtps: Vec<SocketAddr>,
    /// Each relay's listener, in the configuration's order.
    pub relays: Vec<SocketAddr>,
    pub control: Option<SocketAddr>,
}

/// A running sidecar. Dropping it stops every listener.
#[derive(Debug)]
pub struct RunningSidecar {
    pub addresses: BoundAddresses,
    tasks: JoinSet<()>,
    log: DecisionLog,
}

impl RunningSidecar {
    /// Waits until a listener stops, which only happens when it fails for good.
    pub async fn wait(&mut self) {
        self.tasks.join_next().await;
    }

    /// Writes the decisions still waiting to be written ([`crate::decision_log`]): the last
    /// thing a stopping sidecar does.
    pub fn flush_log(&self) -> io::Result<()> {
        self.log.flush()
    }
}

async fn bind(addr: SocketAddr, what: &str) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|err| {
        io::Error::new(
            err.kind(),
            format!("cannot listen for {what} on {addr}: {err}"),
        )
    })
}

/// Binds and serves everything the configuration names.
pub async fn start(loaded: LoadedConfig) -> io::Result<RunningSidecar> {
    let LoadedConfig {
        config,
        control_token,
        capture_ca,
    } = loaded;
    let shared = Arc::new(Shared {
        environment: config.environment.clone(),
        policy: config.policy.clone(),
        resolver: Resolver::new(&config.resolver),
        log: DecisionLog::open(&config.log)?,
        inbox: Inbox::new(config.inbox.clone()),
        metrics: Metrics::default(),
        limits: config.limits.clone(),
        capture_ca,
        upstreams: Default::default(),
        mail_budget: ByteBudget::new(config.limits.max_mail_bytes_in_flight),
        capture_budget: ByteBudget::new(config.limits.max_capture_bytes_in_flight),
        admissions: Arc::new(tokio::sync::Semaphore::new(config.limits.max_connections)),
    });
    let mut addresses = BoundAddresses::default();
    let mut tasks = JoinSet::new();
    tasks.spawn(upstream_pool::sweep_forever(shared.clone()));
    tasks.spawn(shared.log.clone().write_every_interval());

    if let Some(addr) = config.listen.proxy {
        let listener = bind(addr, "the forward proxy").await?;
        addresses.proxy = Some(listener.local_addr()?);
        tasks.spawn(http_proxy::serve(
            listener,
            shared.clone(),
            HttpMode::Forward,
        ));
    }
    if let Some(addr) = config.listen.http {
        let listener = bind(addr, "transparent HTTP").await?;
        addresses.http = Some(listener.local_addr()?);
        tasks.spawn(http_proxy::serve(
            listener,
            shared.clone(),
            HttpMode::Transparent,
        ));
    }
    if let Some(addr) = config.listen.tls {
        let listener = bind(addr, "transparent TLS").await?;
        addresses.tls = Some(listener.local_addr()?);
        tasks.spawn(tunnel::serve_transparent_tls(listener, shared.clone()));
    }
    if let (Some(addr), Some(dns_config)) = (config.listen.dns, config.dns.clone()) {
        let udp = UdpSocket::bind(addr).await.map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("cannot listen for DNS on {addr}/udp: {err}"),
            )
        })?;
        let bound = udp.local_addr()?;
        // TCP on the same port as UDP, as clients expect.
        let tcp = bind(bound, "DNS over TCP").await?;
        addresses.dns = Some(bound);
        let dns_config = Arc::new(dns_config);
        tasks.spawn(dns::serve_udp(udp, shared.clone(), dns_config.clone()));
        tasks.spawn(dns::serve_tcp(tcp, shared.clone(), dns_config));
    }
    for addr in &config.listen.smtp {
        let listener = bind(*addr, "SMTP").await?;
        addresses.smtp.push(listener.local_addr()?);
        tasks.spawn(smtp::serve(listener, shared.clone()));
    }
    for addr in &config.listen.smtps {
        let listener = bind(*addr, "SMTPS").await?;
        addresses.smtps.push(listener.local_addr()?);
        tasks.spawn(smtp::serve_implicit_tls(listener, shared.clone()));
    }
    for relay_config in &config.relays {
        let listener = bind(relay_config.listen, "a relay").await?;
        addresses.relays.push(listener.local_addr()?);
        tasks.spawn(relay::serve(listener, relay_config.clone(), shared.clone()));
    }
    let listener = bind(config.control.listen, "the control API").await?;
    addresses.control = Some(listener.local_addr()?);
    let log = shared.log.clone();
    tasks.spawn(control::serve(
        listener,
        shared,
        control_token,
        config.webhooks.clone(),
        config.control.workload_addresses.clone(),
    ));
    Ok(RunningSidecar {
        addresses,
        tasks,
        log,
    })
}
