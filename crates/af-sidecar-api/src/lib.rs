//! The contract between the sidecar and everything that runs it or reads it — the runtimes, the
//! CLI and the afe worker — without the sidecar's server: what its configuration file says
//! ([`SidecarConfig`], the one definition the runtimes write and `af-proxy serve` reads), what it
//! records ([`records`]), the secrets it is given (a control token, an environment's capture CA),
//! and a client of its control API.
//!
//! Linking this crate links no proxy, no TLS server and no certificate library: `af` itself stays
//! small, and what the sidecar accepts is decided in one place (af-egress, which checks the file).

pub mod capture_ca;
pub mod config;
pub mod control_client;
pub mod records;
mod token;

pub use capture_ca::{CaptureCaPem, new_ca};
pub use config::SidecarConfig;
pub use token::new_control_token;

/// The environment every sidecar process starts with, set by the engine image (and so in every
/// container of it, on Docker and on Kubernetes) and by the benchmark that measures it: one
/// malloc arena. glibc gives each thread that allocates an arena of its own, and with two tokio
/// workers the heap grows in two; one arena took 0.6 MiB (a fifteenth) off the peak of 64
/// keep-alive clients with no loss of requests/s (docs/performance.md). A container that sets
/// the variable itself overrides it.
pub const PROCESS_ENVIRONMENT: &[(&str, &str)] = &[("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")];
