//! afe's Kubernetes sandbox (seed 003, "Il Pod del ticket"): the Sandbox port as one Pod and one
//! ReadWriteOnce PVC per ticket in the sandbox namespace, on kube-rs — no `kubectl` in the
//! worker's image, and testable against an API server it does not own.
//!
//! - [`render`]: the Pod and the PVC, from pure functions (goldens in `tests/golden/`).
//! - [`status`]: what a Pod's status means for the engine (ready, starting, gone, uncontained).
//! - [`channel`]: the v5 remote-command stream protocol, as data.
//! - [`command`]: a request's command as `pods/exec` takes it (directory and variables).
//! - [`exec`]: a command over `pods/exec`, v5 only.
//! - [`sandbox`]: the adapter.
//! - [`connect`]: the client, in cluster or from a kubeconfig context, said at start.

pub mod channel;
pub mod command;
pub mod connect;
pub mod exec;
pub mod render;
pub mod sandbox;
pub mod settings;
pub mod status;

pub use connect::{Connected, connect};
pub use sandbox::{KubeSandbox, Suffixes, random_suffix};
pub use settings::KubeSandboxSettings;
