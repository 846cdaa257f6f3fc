//! A ticket's git workspace through bundles (seed 003, "Git tramite bundle"). The sandbox never
//! gets the repository's token and never needs a network for git:
//!
//! ```text
//!  clone    worker: git clone with the token (a temporary folder) ─▶ git bundle ─▶ sandbox: fetch
//!  save     sandbox: WIP commit ─▶ incremental bundle of the work branch ─▶ worker ─▶ store
//!  restore  worker: bundles from the store ─▶ new sandbox: verify, fetch, check out
//!  push     sandbox: bundle of afe/<ticket>/* ─▶ worker: git push with the token, with a lease
//! ```
//!
//! - [`remote`]: the worker's side (the token's only place).
//! - [`lease`]: what a push does to each branch, decided first.
//! - [`scripts`]: the commands run in the sandbox, values as arguments.
//! - [`workspace`]: those commands over the Sandbox port.

pub mod error;
pub mod lease;
pub mod remote;
pub mod scripts;
pub mod workspace;

pub use error::WorkspaceError;
pub use remote::{Cloned, Credentials, Pushed, clone_to_bundle, push_bundle};
pub use workspace::{Bundle, Checkpointed, Workspace};
