//! The node kinds a worker runs in a ticket's sandbox (AFE.md): `git` — clone and push through
//! bundles, the token only in the worker — and `exec`, a command in the sandbox. After a node that
//! may have written the workspace, a checkpoint: a WIP commit on the ticket's branch and the
//! incremental bundle, saved with the node's completion. Resume rules: a clone or an exec
//! interrupted is run again from the last checkpoint in a new sandbox; a push interrupted is
//! reconciled (the lease finds what already arrived).
//!
//! - [`error`]: why a node failed, by cause, with its code.
//! - [`plan`]: the pure decisions (kind, sandbox, repository, an exec's variables and output).
//! - [`executor`]: [`SandboxExecutor`], the worker's `NodeExecutor` over the Sandbox port.

pub mod acp;
pub mod agent;
pub mod call;
pub mod deep;
pub mod error;
pub mod executor;
pub mod money;
pub mod plan;
pub mod plugins;
pub mod prompt;

pub use error::NodeFailure;
pub use executor::{SandboxExecutor, Variables};
