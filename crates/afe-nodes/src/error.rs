//! Why a node of the sandbox's kinds failed, each cause with its code (docs/errors.md): the
//! workspace's and the sandbox's own (`AFE-GIT-*`, `AFE-SBX-*`), or the node's (`AFE-NODE-*`).

use afe_workspace::WorkspaceError;

#[derive(Debug, thiserror::Error)]
pub enum NodeFailure {
    /// The workspace or its sandbox failed under the node.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// An `exec` node's command exited non-zero: its own output says why.
    #[error("AFE-NODE-001 {0}")]
    CommandFailed(String),
    /// A node of a kind this afe does not run yet.
    #[error(
        "AFE-NODE-002 `{0}` nodes are not built yet (they come with the model calls); this afe runs git and exec nodes"
    )]
    NotBuilt(&'static str),
}

impl NodeFailure {
    pub fn code(&self) -> &'static str {
        match self {
            NodeFailure::Workspace(err) => err.code(),
            NodeFailure::CommandFailed(_) => "AFE-NODE-001",
            NodeFailure::NotBuilt(_) => "AFE-NODE-002",
        }
    }

    pub fn help(&self) -> &'static str {
        match self {
            NodeFailure::Workspace(err) => err.help(),
            NodeFailure::CommandFailed(_) => {
                "the command's last lines say why; fix the code it checks, or the node's command, and start a new ticket"
            }
            NodeFailure::NotBuilt(_) => {
                "run the flow's git and exec nodes with this afe, or wait for the release that brings agent, deep and acp nodes"
            }
        }
    }

    /// Whether the sandbox went away under the node: the ticket is restored elsewhere.
    pub fn is_gone(&self) -> bool {
        matches!(self, NodeFailure::Workspace(err) if err.is_gone())
    }

    /// Every code of its own, for docs/errors.md.
    pub const CODES: [&'static str; 2] = ["AFE-NODE-001", "AFE-NODE-002"];
}

impl From<afe_sandbox::SandboxError> for NodeFailure {
    fn from(err: afe_sandbox::SandboxError) -> NodeFailure {
        NodeFailure::Workspace(err.into())
    }
}
