//! The egress sidecar: the only way out of an environment, so it decides and records everything
//! that leaves.
//!
//! - [`policy::decide`]: allow, capture or deny, by host; [`address::classify`]: which addresses
//!   may ever be dialled.
//! - listeners: the forward proxy (absolute-form HTTP and CONNECT, with the ClientHello's server
//!   name checked against the CONNECT host), transparent HTTP and TLS for clients that ignore proxy
//!   settings, the DNS responder, the SMTP sink.
//! - capture: captured hosts are answered by the sidecar over plain HTTP, SMTP, and — with the
//!   environment's capture CA ([`tls_capture`]) — over TLS.
//! - records: the decision log (a bounded on-disk ring of JSON lines) and the capture inbox, read
//!   through the control API.
//!
//! The same code serves an `af` environment's sidecar and, with only the proxy listener on
//! 127.0.0.1:3128, an `afe` ticket pod's allowlist proxy.

/// The environment every sidecar process starts with, set by the engine image (and so in every
/// container of it, on Docker and on Kubernetes) and by the benchmark that measures it: one
/// malloc arena. glibc gives each thread that allocates an arena of its own, and with two tokio
/// workers the heap grows in two; one arena took 0.6 MiB (a fifteenth) off the peak of 64
/// keep-alive clients with no loss of requests/s (docs/performance.md). A container that sets
/// the variable itself overrides it.
pub const PROCESS_ENVIRONMENT: &[(&str, &str)] = &[("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")];

mod accept;
pub mod address;
mod answer_cache;
mod body;
mod budget;
mod chunked;
pub mod client_hello;
pub mod config;
mod context;
mod control;
pub mod control_client;
pub mod decision_log;
mod dial;
mod dns;
mod dns_forward;
pub mod dns_wire;
mod http_proxy;
pub mod inbox;
mod metrics;
pub mod policy;
pub mod refusal;
mod request_host;
mod resolve;
mod server;
mod smtp;
mod splice;
pub mod tls_capture;
mod tunnel;
mod udp_batch;
mod upgrade;
mod upstream_http;
mod upstream_pool;
mod webhook;

pub use config::{LoadedConfig, SidecarConfig, load_config, parse_config};
pub use server::{BoundAddresses, RunningSidecar, start};
