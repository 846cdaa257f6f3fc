//! What runs a node. The real node kinds (git, agent, deep, acp, exec) come with the sandbox; the
//! worker only needs this contract, and its tests a scripted executor.

use std::sync::Arc;

use afe_config::kinds::FlowNode;
use afe_store::{Lease, NewCheckpoint, Reservation, Settlement, Store, StoreError, Ticket};
use async_trait::async_trait;
use serde_json::Value;

/// One execution of one node.
pub struct NodeCall {
    pub ticket: Ticket,
    pub node: FlowNode,
    /// 1 the first time; more when an earlier attempt was interrupted (a crash, a lost lease)
    /// before it completed. A node with outside effects reconciles instead of repeating them.
    pub attempt: i32,
    /// The input and the outputs of completed nodes (see `flow::context`).
    pub context: Value,
    pub wallet: Wallet,
}

impl std::fmt::Debug for NodeCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCall")
            .field("ticket", &self.ticket.id)
            .field("node", &self.node.id)
            .field("attempt", &self.attempt)
            .finish()
    }
}

/// The node's access to the ticket's budget: every paid call is reserved here first.
#[derive(Clone)]
pub struct Wallet {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) lease: Lease,
    pub(crate) node: String,
}

impl std::fmt::Debug for Wallet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wallet").field("node", &self.node).finish()
    }
}

impl Wallet {
    /// Sets money aside before a paid call; `BudgetExceeded` stops the ticket.
    pub async fn reserve(
        &self,
        provider: &str,
        usd_micros: i64,
    ) -> Result<Reservation, StoreError> {
        self.store
            .reserve(&self.lease, &self.node, provider, usd_micros)
            .await
    }
}

/// What a node produced, committed with its completion.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeResult {
    pub output: Value,
    /// What each reservation really cost.
    pub settlements: Vec<Settlement>,
    /// The workspace after the node, when it wrote files.
    pub checkpoint: Option<NewCheckpoint>,
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node itself failed (a command exited non-zero, a model refused): the ticket fails.
    #[error("{0}")]
    Failed(String),
    /// The store refused (budget exceeded, lease lost) or is unreachable.
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[async_trait]
pub trait NodeExecutor: Send + Sync {
    async fn execute(&self, call: NodeCall) -> Result<NodeResult, NodeError>;
}
