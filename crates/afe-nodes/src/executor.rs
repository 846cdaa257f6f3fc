//! The executor of the node kinds that work in a ticket's sandbox. Each node: the ticket's sandbox
//! opened (reused while its signature holds; a fresh one restored from the ticket's checkpoints),
//! the node run, the workspace checkpointed when the node may have written it, the proxy's
//! decisions recorded as the ticket's events. A node that was interrupted before (a later
//! attempt) gets a new sandbox: the old one may hold half of what it did, and its processes.

use std::sync::Arc;
use std::time::SystemTime;

use afe_sandbox::{ExecRequest, Lifecycle, Marker, Opened, Sandbox, SandboxError};
use afe_store::{Checkpoint, NewCheckpoint, Store};
use afe_worker::{NodeCall, NodeError, NodeExecutor, NodeResult};
use afe_workspace::{Bundle, Checkpointed, Credentials, Workspace, WorkspaceError};
use async_trait::async_trait;
use serde_json::json;

use crate::error::NodeFailure;
use crate::plan::{self, Kind};
use crate::{acp, agent, deep};
use afe_model::ModelClient;

/// How often a running node's sandbox says it is still worked on (a reaper's grace is minutes).
const HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The workspace committed after a node that may have written it: the checkpoint to save with its
/// completion, or none when nothing changed.
async fn checkpoint(
    workspace: &Workspace<'_>,
    call: &NodeCall,
    last: Option<&Checkpoint>,
) -> Result<Option<NewCheckpoint>, NodeFailure> {
    Ok(
        match workspace
            .checkpoint(last.map(|c| c.head.as_str()), &call.node.id)
            .await?
        {
            Checkpointed::Unchanged => None,
            Checkpointed::Saved(bundle) => Some(NewCheckpoint {
                git_ref: bundle.git_ref,
                head: bundle.head,
                parent: last.map(|c| c.id),
                bundle: bundle.bytes,
            }),
        },
    )
}

/// Runs a flow's nodes: `git`, `exec` and `deep` in sandboxes of one adapter, `agent` calls from
/// the worker itself.
pub struct SandboxExecutor {
    sandbox: Arc<dyn Sandbox>,
    store: Arc<dyn Store>,
    credentials: Credentials,
    models: ModelClient,
    /// This worker's name, in the sandboxes' lifecycle markers.
    worker: String,
    /// Where the variables a flow names come from ([`Variables`]).
    variables: Variables,
}

/// Where the variables a flow names reach its sandbox from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Variables {
    /// The worker's own environment, value by value (Docker: the sandbox gets them at creation,
    /// an acp agent with its command).
    #[default]
    FromWorker,
    /// The platform, by name (Kubernetes: the Pod reads them from a Secret by `secretKeyRef`):
    /// the worker never reads a value, and an acp agent's variables must be among the flow's
    /// `sandbox.env`, which the Pod has.
    ByReference,
}

impl std::fmt::Debug for SandboxExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxExecutor")
            .field("worker", &self.worker)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// A node's failure, sorted by what the worker does about it.
pub(crate) fn node_error(err: NodeFailure) -> NodeError {
    let said = format!("{err}\n  help: {}", err.help());
    match err {
        NodeFailure::Store(err) => NodeError::Store(err),
        _ if err.is_gone() => NodeError::SandboxGone(said),
        NodeFailure::Workspace(WorkspaceError::Sandbox(SandboxError::Platform { .. })) => {
            NodeError::Unavailable(said)
        }
        _ => NodeError::Failed(said),
    }
}

impl SandboxExecutor {
    pub fn new(
        sandbox: Arc<dyn Sandbox>,
        store: Arc<dyn Store>,
        credentials: Credentials,
        models: ModelClient,
        worker: &str,
    ) -> SandboxExecutor {
        SandboxExecutor {
            sandbox,
            store,
            credentials,
            models,
            worker: worker.to_string(),
            variables: Variables::FromWorker,
        }
    }

    /// The same executor, its variables coming from `variables`.
    pub fn with_variables(mut self, variables: Variables) -> SandboxExecutor {
        self.variables = variables;
        self
    }

    /// The ticket's sandbox, ready, with its workspace as the last checkpoint left it.
    async fn sandbox_for(
        &self,
        call: &NodeCall,
        checkpoints: &[Checkpoint],
    ) -> Result<Opened, WorkspaceError> {
        let by_reference = self.variables == Variables::ByReference;
        let spec = plan::sandbox_spec(&call.ticket.id, &call.flow.sandbox, |name| {
            // By reference, the value is the platform's to fill; the worker does not read it.
            if by_reference {
                Some(String::new())
            } else {
                std::env::var(name).ok()
            }
        })?;
        if call.attempt > 1 {
            self.sandbox.remove(&call.ticket.id).await?;
        }
        let opened = self.sandbox.open(&spec).await?;
        self.sandbox.wait_ready(&opened).await?;
        if opened.fresh && !checkpoints.is_empty() {
            let bundles = self.bundles(checkpoints).await?;
            Workspace::new(self.sandbox.as_ref(), &opened)
                .restore(&bundles)
                .await?;
        }
        Ok(opened)
    }

    /// The ticket's checkpoints' bundles, from the store (each checked against its digest there).
    async fn bundles(&self, checkpoints: &[Checkpoint]) -> Result<Vec<Bundle>, WorkspaceError> {
        let mut bundles = Vec::with_capacity(checkpoints.len());
        for checkpoint in checkpoints {
            if checkpoint.head.is_empty() {
                return Err(WorkspaceError::Bundle {
                    what: format!("checkpoint {}", checkpoint.id),
                    detail: "it was saved without its head commit (an older afe)".to_string(),
                });
            }
            let bytes =
                self.store
                    .bundle(checkpoint.id)
                    .await
                    .map_err(|e| WorkspaceError::Bundle {
                        what: format!("checkpoint {}", checkpoint.id),
                        detail: e.to_string(),
                    })?;
            bundles.push(Bundle {
                git_ref: checkpoint.git_ref.clone(),
                head: checkpoint.head.clone(),
                bytes,
            });
        }
        Ok(bundles)
    }

    async fn run(
        &self,
        call: &NodeCall,
        kind: &Kind,
        opened: &Opened,
        last: Option<&Checkpoint>,
    ) -> Result<NodeResult, NodeFailure> {
        let workspace = Workspace::new(self.sandbox.as_ref(), opened);
        match kind {
            Kind::Clone => {
                let (url, branch) = plan::repository_of(&call.ticket.input)?;
                let cloned =
                    afe_workspace::clone_to_bundle(&url, branch.as_deref(), &self.credentials)
                        .await?;
                let bundle = Bundle {
                    git_ref: cloned.git_ref.clone(),
                    head: cloned.head.clone(),
                    bytes: cloned.bundle,
                };
                workspace.restore(std::slice::from_ref(&bundle)).await?;
                Ok(NodeResult {
                    output: json!({
                        "repository": url,
                        "branch": cloned.branch,
                        "head": cloned.head,
                        "work_branch": workspace.work_branch(),
                    }),
                    settlements: Vec::new(),
                    checkpoint: Some(NewCheckpoint {
                        git_ref: bundle.git_ref,
                        head: bundle.head,
                        parent: None,
                        bundle: bundle.bytes,
                    }),
                })
            }
            Kind::Exec(argv) => {
                let mut request = ExecRequest::new(argv.clone());
                request.env = plan::exec_env(&call.ticket.id, &call.node.id, call.attempt);
                request.output_limit = plan::OUTPUT_KEPT;
                let node = call.node.id.clone();
                let ran = self
                    .sandbox
                    .exec(opened, &request, &mut |chunk| {
                        tracing::debug!(%node, ?chunk, "output");
                    })
                    .await?;
                if !ran.succeeded() {
                    return Err(NodeFailure::CommandFailed(plan::exec_failure(
                        argv,
                        ran.status,
                        &ran.stdout,
                        &ran.stderr,
                    )));
                }
                Ok(NodeResult {
                    output: plan::exec_output(ran.status, &ran.stdout, &ran.stderr),
                    settlements: Vec::new(),
                    checkpoint: checkpoint(&workspace, call, last).await?,
                })
            }
            Kind::Deep(agent) => {
                let env = plan::exec_env(&call.ticket.id, &call.node.id, call.attempt);
                let output = deep::run(
                    &self.models,
                    call,
                    agent,
                    self.sandbox.as_ref(),
                    opened,
                    &env,
                )
                .await?;
                Ok(NodeResult {
                    output,
                    settlements: Vec::new(),
                    checkpoint: checkpoint(&workspace, call, last).await?,
                })
            }
            Kind::Acp(spec) => {
                let env = plan::exec_env(&call.ticket.id, &call.node.id, call.attempt);
                let output = acp::run(
                    call,
                    spec,
                    self.sandbox.clone(),
                    opened,
                    &env,
                    self.variables,
                )
                .await?;
                Ok(NodeResult {
                    output,
                    settlements: Vec::new(),
                    checkpoint: checkpoint(&workspace, call, last).await?,
                })
            }
            Kind::Agent(_) => unreachable!("an agent node runs without a sandbox"),
            Kind::Push => {
                let (url, _) = plan::repository_of(&call.ticket.input)?;
                let bundle = workspace.branches_bundle().await?;
                let pushed = afe_workspace::push_bundle(&url, &bundle, &self.credentials).await?;
                Ok(NodeResult {
                    output: json!({
                        "repository": url,
                        "pushed": pushed.moved,
                        // Already on the remote as they are: an earlier attempt's push arrived.
                        "already": pushed.already,
                    }),
                    settlements: Vec::new(),
                    checkpoint: None,
                })
            }
        }
    }

    /// What the sandbox's proxy decided since `since`, as the ticket's `egress.decision` events.
    async fn record_decisions(&self, call: &NodeCall, opened: &Opened, since: &str) {
        let decisions = match self.sandbox.egress_decisions(opened, Some(since)).await {
            Ok(decisions) => decisions,
            Err(err) => {
                tracing::warn!(ticket = %call.ticket.id, error = %err, "cannot read the proxy's decisions");
                return;
            }
        };
        for decision in decisions {
            let payload = json!({
                "node": call.node.id,
                "time": decision.time,
                "protocol": decision.protocol,
                "method": decision.method,
                "host": decision.host,
                "port": decision.port,
                "verdict": decision.verdict_text(),
                "rule": decision.rule,
                "bytes_up": decision.bytes_up,
                "bytes_down": decision.bytes_down,
            });
            if let Err(err) = call.journal.record("egress.decision", payload).await {
                tracing::warn!(ticket = %call.ticket.id, error = %err, "cannot record a decision");
            }
        }
    }

    async fn mark(&self, opened: &Opened, state: Lifecycle) {
        if let Err(err) = self
            .sandbox
            .mark(opened, &Marker::now(state, &self.worker))
            .await
        {
            tracing::debug!(sandbox = %opened.id, error = %err, "cannot mark the sandbox");
        }
    }
}

#[async_trait]
impl NodeExecutor for SandboxExecutor {
    async fn execute(&self, call: NodeCall) -> Result<NodeResult, NodeError> {
        let Some(kind) = plan::kind_of(&call.node) else {
            return Err(node_error(NodeFailure::NotBuilt(call.node.id.clone())));
        };
        // One model call needs no sandbox: it is made from the worker.
        if let Kind::Agent(agent) = &kind {
            return agent::run(&self.models, &call, agent)
                .await
                .map_err(node_error);
        }
        let checkpoints = self.store.checkpoints(&call.ticket.id).await?;
        let since = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let opened = match self.sandbox_for(&call, &checkpoints).await {
            Ok(opened) => opened,
            Err(err) => {
                if err.is_gone() {
                    let _ = self.sandbox.remove(&call.ticket.id).await;
                }
                return Err(node_error(err.into()));
            }
        };
        self.mark(&opened, Lifecycle::Working).await;
        let result = {
            let running = self.run(&call, &kind, &opened, checkpoints.last());
            tokio::pin!(running);
            // The heartbeat a reaper reads goes on while a long node runs.
            let mut beat = tokio::time::interval(HEARTBEAT_EVERY);
            beat.tick().await;
            loop {
                tokio::select! {
                    result = &mut running => break result,
                    _ = beat.tick() => self.mark(&opened, Lifecycle::Working).await,
                }
            }
        };
        self.record_decisions(&call, &opened, &since).await;
        match result {
            Ok(result) => {
                self.mark(&opened, Lifecycle::Open).await;
                Ok(result)
            }
            Err(err) => {
                if err.is_gone() {
                    let _ = self.sandbox.remove(&call.ticket.id).await;
                }
                Err(node_error(err))
            }
        }
    }

    async fn ticket_ended(&self, ticket: &str) {
        if let Err(err) = self.sandbox.remove(ticket).await {
            tracing::warn!(%ticket, error = %err, "cannot remove the ended ticket's sandbox; the reaper will");
        }
    }

    async fn ticket_paused(&self, ticket: &str) {
        match self.sandbox.opened(ticket).await {
            Ok(Some(opened)) => self.mark(&opened, Lifecycle::Paused).await,
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(%ticket, error = %err, "cannot find the paused ticket's sandbox to mark it")
            }
        }
    }
}
