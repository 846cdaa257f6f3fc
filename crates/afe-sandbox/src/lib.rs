//! The Sandbox port: a ticket's workspace — one container (Docker) or pod (Kubernetes) per ticket,
//! not per node — as the engine sees it, with no platform in it. Adapters implement [`Sandbox`];
//! what decides (is the sandbox the one this ticket wants, is a path inside the workspace, how much
//! output is kept) is pure and lives here, once for every adapter.
//!
//! - [`spec`]: what a ticket's sandbox is made from, and its signature (reused while unchanged).
//! - [`open`]: the decision between reusing, recreating and creating a sandbox.
//! - [`exec`]: a command's request, its output as it streams, bounded.
//! - [`inside`]: the adapter's own commands in a sandbox (its idle process, its readiness check).
//! - [`workspace`]: the paths a sandbox has (`/workspace/repo`, `/workspace/worktrees/<scope>`).
//! - [`labels`]: what marks a sandbox as a ticket's, readable without the store.
//! - [`lifecycle`]: where a sandbox is in its life, marked for a reaper.
//! - [`error`]: typed errors, [`SandboxError::Gone`] among them.

pub mod error;
pub mod exec;
pub mod inside;
pub mod labels;
pub mod lifecycle;
pub mod open;
pub mod port;
pub mod spec;
pub mod workspace;

pub use error::SandboxError;
pub use exec::{Attached, Bounded, ExecOutput, ExecRequest, OutputChunk};
pub use lifecycle::{Lifecycle, Marker};
pub use open::{Existing, OpenAction, decide};
pub use port::{Opened, Payload, Sandbox};
pub use spec::SandboxSpec;
