//! What the git workspace can fail with, by cause, each with an `AFE-GIT-0xx` code (docs/errors.md)
//! and what to do. None of them carries the token: git's own messages name the repository's URL,
//! which holds no credential (the token is offered by a credential helper, never in a URL).

use afe_sandbox::SandboxError;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The repository could not be fetched or pushed: a wrong URL, a host that does not answer,
    /// a branch that does not exist.
    #[error("AFE-GIT-001 {operation} {url}: {detail}")]
    Remote {
        operation: &'static str,
        url: String,
        detail: String,
    },
    /// The forge refused the worker's token, or asked for one and there is none.
    #[error("AFE-GIT-002 {url} refused the worker's credentials for {operation}: {detail}")]
    Refused {
        operation: &'static str,
        url: String,
        detail: String,
    },
    /// The ticket's input names no repository to clone.
    #[error("AFE-GIT-003 {0}")]
    NoRepository(String),
    /// A branch afe would push already holds commits afe did not make; nothing was pushed.
    #[error(
        "AFE-GIT-004 {url}: {branch} holds {found}, which is not a commit of this ticket; nothing was pushed"
    )]
    Diverged {
        url: String,
        branch: String,
        found: String,
    },
    /// A bundle of the workspace did not verify: a stored checkpoint is damaged, or was made from
    /// commits the workspace does not have.
    #[error("AFE-GIT-005 {what} does not verify: {detail}")]
    Bundle { what: String, detail: String },
    /// git failed inside the sandbox.
    #[error("AFE-GIT-006 git in the sandbox failed to {operation}: {detail}")]
    InSandbox {
        operation: &'static str,
        detail: String,
    },
    /// git cannot run on the worker.
    #[error("AFE-GIT-007 git cannot run on the worker: {0}")]
    NoGit(String),
    /// The sandbox failed under the workspace (gone, refused a path, ...).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

impl WorkspaceError {
    pub fn code(&self) -> &'static str {
        match self {
            WorkspaceError::Remote { .. } => "AFE-GIT-001",
            WorkspaceError::Refused { .. } => "AFE-GIT-002",
            WorkspaceError::NoRepository(_) => "AFE-GIT-003",
            WorkspaceError::Diverged { .. } => "AFE-GIT-004",
            WorkspaceError::Bundle { .. } => "AFE-GIT-005",
            WorkspaceError::InSandbox { .. } => "AFE-GIT-006",
            WorkspaceError::NoGit(_) => "AFE-GIT-007",
            WorkspaceError::Sandbox(err) => err.code(),
        }
    }

    /// What a person does next.
    pub fn help(&self) -> &'static str {
        match self {
            WorkspaceError::Remote { .. } => {
                "check the repository's URL and branch in the ticket's input, and that the worker reaches its host"
            }
            WorkspaceError::Refused { .. } => {
                "give the worker a token the forge accepts for this repository (read to clone, write to push) in AFE_GIT_TOKEN, or the variable --git-token-env names"
            }
            WorkspaceError::NoRepository(_) => {
                "start the ticket with an input whose `repository` field is the repository's URL (and `branch`, when not its default)"
            }
            WorkspaceError::Diverged { .. } => {
                "someone else wrote the ticket's branch: look at it, delete it on the remote if it may go, and rerun the push"
            }
            WorkspaceError::Bundle { .. } => {
                "restore the store from a backup; the ticket cannot resume from this checkpoint"
            }
            WorkspaceError::InSandbox { .. } => {
                "check that the sandbox image has git and a POSIX shell (docs/afe-sandbox.md); the message has git's own words"
            }
            WorkspaceError::NoGit(_) => "install git on the worker's machine (its image)",
            WorkspaceError::Sandbox(err) => err.help(),
        }
    }

    /// Whether the sandbox went away under the workspace: the ticket is restored elsewhere.
    pub fn is_gone(&self) -> bool {
        matches!(self, WorkspaceError::Sandbox(err) if err.is_gone())
    }

    /// Every code of its own, for docs/errors.md.
    pub const CODES: [&'static str; 7] = [
        "AFE-GIT-001",
        "AFE-GIT-002",
        "AFE-GIT-003",
        "AFE-GIT-004",
        "AFE-GIT-005",
        "AFE-GIT-006",
        "AFE-GIT-007",
    ];
}
