//! The egress sidecar: the only way out of an environment, so it decides and records everything
//! that leaves.
//!
//! - [`policy::decide`]: allow, capture or deny, by host; [`address::classify`]: which addresses
//!   may ever be dialled.
//! - listeners: the forward proxy (absolute-form HTTP and CONNECT, with the ClientHello's server
//!   name checked against the CONNECT host), transparent HTTP and TLS for clients that ignore proxy
//!   settings, the DNS responder, the SMTP sink, and TCP relays to fixed destinations (an
//!   external database).
//! - capture: captured hosts are answered by the sidecar over plain HTTP, SMTP, and — with the
//!   environment's capture CA ([`tls_capture`]) — over TLS.
//! - records: the decision log (a bounded on-disk ring of JSON lines) and the capture inbox, read
//!   through the control API.
//!
//! The same code serves an `af` environment's sidecar and, with only the proxy listener on
//! 127.0.0.1:3128, an `afe` ticket pod's allowlist proxy.

pub use af_sidecar_api::PROCESS_ENVIRONMENT;
/// The wire formats the sidecar serves, shared with the probe (af-guard) through af-wire.
pub use af_wire::{client_hello, dns_wire};

mod accept;
pub mod address;
mod answer_cache;
mod body;
mod budget;
mod chunked;
pub mod config;
mod context;
mod control;
pub mod decision_log;
mod dial;
mod dns;
mod dns_forward;
mod http_proxy;
pub mod inbox;
mod metrics;
pub mod policy;
pub mod refusal;
mod relay;
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
