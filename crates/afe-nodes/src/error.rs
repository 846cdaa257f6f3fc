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
    /// A node of no kind this afe runs (a revision written by a newer afe).
    #[error("AFE-NODE-002 node {0} is of no kind this afe runs (git, exec, agent, deep, acp)")]
    NotBuilt(String),
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
    /// An ACP agent broke the protocol, or exited before it answered.
    #[error("AFE-NODE-007 {0}")]
    AcpProtocol(String),
    /// An ACP agent's turn ran past the node's timeout.
    #[error("AFE-NODE-008 {0}")]
    AcpTimeout(String),
    /// An ACP agent refused the prompt or answered a request with an error.
    #[error("AFE-NODE-009 {0}")]
    AcpRefused(String),
    /// A plugin an agent uses could not be started, reached or listed.
    #[error("AFE-NODE-010 {0}")]
    Plugin(String),
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
            NodeFailure::AcpProtocol(_) => "AFE-NODE-007",
            NodeFailure::AcpTimeout(_) => "AFE-NODE-008",
            NodeFailure::AcpRefused(_) => "AFE-NODE-009",
            NodeFailure::Plugin(_) => "AFE-NODE-010",
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
                "run the ticket with the afe that wrote its revision, or upgrade this worker"
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
            NodeFailure::AcpProtocol(_) => {
                "run the agent's command in the sandbox image by hand to see it start; check that it speaks ACP on stdio (version 1) and has what it needs (its key in the node's env)"
            }
            NodeFailure::AcpTimeout(_) => {
                "raise the node's acp.timeoutSeconds, or give the agent a smaller task"
            }
            NodeFailure::AcpRefused(_) => {
                "read the agent's words in the error; give it what it asks for (a key, a login) through the node's env, or change the prompt"
            }
            NodeFailure::Plugin(_) => {
                "check the Plugin: its command on the worker's PATH (stdio) or its url reachable from the worker (http), the variables it names set in the worker's environment, and the tools the agent names among those it lists"
            }
        }
    }

    /// Whether the sandbox went away under the node: the ticket is restored elsewhere.
    pub fn is_gone(&self) -> bool {
        matches!(self, NodeFailure::Workspace(err) if err.is_gone())
    }

    /// Every code of its own, for docs/errors.md.
    pub const CODES: [&'static str; 10] = [
        "AFE-NODE-001",
        "AFE-NODE-002",
        "AFE-NODE-003",
        "AFE-NODE-004",
        "AFE-NODE-005",
        "AFE-NODE-006",
        "AFE-NODE-007",
        "AFE-NODE-008",
        "AFE-NODE-009",
        "AFE-NODE-010",
    ];
}

impl From<afe_sandbox::SandboxError> for NodeFailure {
    fn from(err: afe_sandbox::SandboxError) -> NodeFailure {
        NodeFailure::Workspace(err.into())
    }
}
