//! Why a node failed, each cause with its code (docs/errors.md): the workspace's and the
//! sandbox's own (`AFE-GIT-*`, `AFE-SBX-*`), a model call's (`AFE-MOD-*`), the store's
//! (`AFE-STO-*`: a budget spent, a lease lost), or the node's (`AFE-NODE-*`).

use afe_model::ModelError;
use afe_store::StoreError;
use afe_workspace::WorkspaceError;

#[derive(Debug, thiserror::Error)]
pub enum NodeFailure {
    /// The workspace or its sandbox failed under the node.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// A model call failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The store refused: the budget is spent (the ticket stopped), the lease was lost.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An `exec` node's command exited non-zero: its own output says why.
    #[error("AFE-NODE-001 {0}")]
    CommandFailed(String),
    /// A node of a kind this afe does not run yet.
    #[error(
        "AFE-NODE-002 `{0}` nodes are not built yet; this afe runs git, exec, agent and deep nodes"
    )]
    NotBuilt(&'static str),
    /// The model's answers did not match the node's output Schema, however many times it was
    /// asked.
    #[error("AFE-NODE-003 {0}")]
    InvalidAnswer(String),
    /// The agent's prompt names values the node's context does not have.
    #[error(
        "AFE-NODE-004 the prompt of agent {agent} names {missing:?}, which the node's context does not have"
    )]
    PromptValues { agent: String, missing: Vec<String> },
    /// The agent's own budget for one node run (`budget.usd`, `budget.turns`) is spent.
    #[error("AFE-NODE-005 {0}")]
    AgentBudget(String),
    /// The revision does not say what the node names (an agent, a Schema): the config and the
    /// engine disagree.
    #[error("AFE-NODE-006 {0}")]
    Revision(String),
}

impl NodeFailure {
    pub fn code(&self) -> &'static str {
        match self {
            NodeFailure::Workspace(err) => err.code(),
            NodeFailure::Model(err) => err.code(),
            NodeFailure::Store(err) => err.code(),
            NodeFailure::CommandFailed(_) => "AFE-NODE-001",
            NodeFailure::NotBuilt(_) => "AFE-NODE-002",
            NodeFailure::InvalidAnswer(_) => "AFE-NODE-003",
            NodeFailure::PromptValues { .. } => "AFE-NODE-004",
            NodeFailure::AgentBudget(_) => "AFE-NODE-005",
            NodeFailure::Revision(_) => "AFE-NODE-006",
        }
    }

    pub fn help(&self) -> &'static str {
        match self {
            NodeFailure::Workspace(err) => err.help(),
            NodeFailure::Model(err) => err.help(),
            NodeFailure::Store(err) => err.help(),
            NodeFailure::CommandFailed(_) => {
                "the command's last lines say why; fix the code it checks, or the node's command, and start a new ticket"
            }
            NodeFailure::NotBuilt(_) => {
                "run the flow's git, exec, agent and deep nodes with this afe, or wait for the release that brings acp nodes"
            }
            NodeFailure::InvalidAnswer(_) => {
                "make the Schema easier to meet, or the prompt clearer about it, or the model a stronger one"
            }
            NodeFailure::PromptValues { .. } => {
                "name only the input's fields (by its Schema's name) and the outputs of nodes this one needs; write `-` as `_`"
            }
            NodeFailure::AgentBudget(_) => {
                "raise the agent's budget.usd or budget.turns, or make the task smaller"
            }
            NodeFailure::Revision(_) => {
                "this is a bug in afe (a revision that validated should name everything it uses): report it"
            }
        }
    }

    /// Whether the sandbox went away under the node: the ticket is restored elsewhere.
    pub fn is_gone(&self) -> bool {
        matches!(self, NodeFailure::Workspace(err) if err.is_gone())
    }

    /// Every code of its own, for docs/errors.md.
    pub const CODES: [&'static str; 6] = [
        "AFE-NODE-001",
        "AFE-NODE-002",
        "AFE-NODE-003",
        "AFE-NODE-004",
        "AFE-NODE-005",
        "AFE-NODE-006",
    ];
}

impl From<afe_sandbox::SandboxError> for NodeFailure {
    fn from(err: afe_sandbox::SandboxError) -> NodeFailure {
        NodeFailure::Workspace(err.into())
    }
}
