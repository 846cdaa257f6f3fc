//! The port every sandbox adapter implements. It names no platform: the Docker adapter (a
//! container and a volume per ticket) and the Kubernetes one (a Pod and a PVC) both fit it.

use af_sidecar_api::records::DecisionRecord;
use async_trait::async_trait;

use crate::{Attached, ExecOutput, ExecRequest, Marker, OutputChunk, SandboxError, SandboxSpec};

/// A ticket's sandbox, once open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub ticket: String,
    /// The adapter's own name for it (a container's, a pod's).
    pub id: String,
    /// Whether it was made by this open (its workspace is empty) or reused (it holds what the
    /// ticket's earlier nodes left).
    pub fresh: bool,
}

/// What goes into or comes out of a sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// One file's bytes.
    File(Vec<u8>),
    /// A tar stream, unpacked at (or packed from) the path.
    Tar(Vec<u8>),
}

#[async_trait]
pub trait Sandbox: Send + Sync {
    /// The ticket's sandbox as `spec` describes it: reused while its signature is unchanged and it
    /// runs ([`crate::decide`]), else (re)created. Idempotent.
    async fn open(&self, spec: &SandboxSpec) -> Result<Opened, SandboxError>;

    /// Returns once the sandbox can run commands (its network locked, its proxy answering when it
    /// has one); [`SandboxError::Gone`] when it will not.
    async fn wait_ready(&self, sandbox: &Opened) -> Result<(), SandboxError>;

    /// Runs a command to its end, handing each piece of output to `on_output` as it comes, and
    /// returns its status and its output kept up to `request.output_limit`.
    async fn exec(
        &self,
        sandbox: &Opened,
        request: &ExecRequest,
        // Named for every chunk's lifetime: async_trait would otherwise tie it to the call's.
        on_output: &mut (dyn for<'c> FnMut(&'c OutputChunk) + Send),
    ) -> Result<ExecOutput, SandboxError>;

    /// Starts a command as [`exec`](Sandbox::exec) does (`request.stdin` is ignored) and returns at
    /// once, attached: the caller writes its stdin and reads its output while it runs. Output not
    /// read holds the command back (the channel is bounded); it is never buffered without end.
    async fn attach(
        &self,
        sandbox: &Opened,
        request: &ExecRequest,
    ) -> Result<Attached, SandboxError>;

    /// Writes `payload` at `path` (confined to the workspace), as the sandbox's user.
    async fn put(&self, sandbox: &Opened, path: &str, payload: Payload)
    -> Result<(), SandboxError>;

    /// Reads `path` (confined to the workspace): a file's bytes, or a tar of a directory.
    async fn get(&self, sandbox: &Opened, path: &str, tar: bool) -> Result<Payload, SandboxError>;

    /// Records where the sandbox is in its life ([`crate::Lifecycle`]) for a reaper that reads the
    /// platform, not the store; the ticket's own commands cannot change it.
    async fn mark(&self, sandbox: &Opened, marker: &Marker) -> Result<(), SandboxError>;

    /// What the sandbox's proxy decided at or after `since` (RFC 3339; none: everything it
    /// kept), oldest first. A sandbox without egress has no proxy and decided nothing.
    async fn egress_decisions(
        &self,
        sandbox: &Opened,
        since: Option<&str>,
    ) -> Result<Vec<DecisionRecord>, SandboxError>;

    /// The ticket's sandbox as it is now, if one runs (not reopened, not waited on): for marking a
    /// sandbox whose ticket is not being worked on.
    async fn opened(&self, ticket: &str) -> Result<Option<Opened>, SandboxError>;

    /// Removes everything of `ticket` (its sandbox, its workspace), found by its label. Idempotent:
    /// nothing left is not an error.
    async fn remove(&self, ticket: &str) -> Result<(), SandboxError>;
}
