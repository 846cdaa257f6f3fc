//! What a sandbox adapter can fail with, by cause: the engine acts on the kind (a sandbox that is
//! gone is removed and the ticket restored from its last checkpoint; a refused path is the flow's
//! fault; a platform failure is retried or reported).

/// A sandbox operation that did not happen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The ticket's sandbox disappeared or never became ready: remove what is left of it and
    /// requeue the ticket, which restores from its last checkpoint (seed 003, "Risoluzione dei
    /// problemi").
    #[error("the sandbox of ticket {ticket} is gone: {why}")]
    Gone { ticket: String, why: String },
    /// A path outside the workspace, or not a path a sandbox file can have.
    #[error("{path:?} is not a path inside the workspace: {why}")]
    PathRefused { path: String, why: String },
    /// An environment variable name the flow does not name, or not a name at all.
    #[error("environment variable {name:?}: {why}")]
    VariableRefused { name: String, why: String },
    /// The platform (the Docker daemon, the API server) failed `operation`.
    #[error("{operation} failed: {detail}")]
    Platform { operation: String, detail: String },
}

impl SandboxError {
    /// Whether the engine should drop this sandbox and restore the ticket into a new one.
    pub fn is_gone(&self) -> bool {
        matches!(self, SandboxError::Gone { .. })
    }
}
