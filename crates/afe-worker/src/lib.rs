//! The afe worker: claims tickets from the queue, runs their flows' nodes through a
//! [`NodeExecutor`], and keeps AFE.md's promise — a completed node is never executed again, a
//! dead worker's ticket is taken over, a worker whose lease was taken over writes nothing more.
//! See docs/afe-store.md.

pub mod executor;
pub mod flow;
pub mod scripted;
mod worker;

pub use executor::{Journal, NodeCall, NodeError, NodeExecutor, NodeResult, Wallet};
pub use flow::{FrozenFlow, FrozenSandbox};
pub use scripted::{Script, ScriptedExecutor, Step};
pub use worker::{Worker, WorkerSettings};
