//! What a sandbox adapter can fail with, by cause, each with an `AFE-SBX-0xx` code (docs/errors.md)
//! and what to do: the engine acts on the kind (a sandbox that is gone is removed and the ticket
//! restored from its last checkpoint; a refused path is the flow's fault; a platform failure is
//! retried or reported).

/// A sandbox operation that did not happen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The ticket's sandbox disappeared or never became ready: remove what is left of it and
    /// requeue the ticket, which restores from its last checkpoint (seed 003, "Risoluzione dei
    /// problemi").
    #[error("AFE-SBX-001 the sandbox of ticket {ticket} is gone: {why}")]
    Gone { ticket: String, why: String },
    /// A path outside the workspace, or not a path a sandbox file can have, or one the sandbox's
    /// user cannot write or read.
    #[error("AFE-SBX-002 {path:?} is not a path inside the workspace: {why}")]
    PathRefused { path: String, why: String },
    /// An environment variable name the flow does not name, or not a name at all, or one the
    /// worker does not have.
    #[error("AFE-SBX-003 environment variable {name:?}: {why}")]
    VariableRefused { name: String, why: String },
    /// The platform (the Docker daemon, the API server) failed `operation`.
    #[error("AFE-SBX-004 {operation} failed: {detail}")]
    Platform { operation: String, detail: String },
    /// An object with the name the ticket's sandbox needs exists and is not afe's (it lacks the
    /// labels afe sets when it creates one); it was left alone.
    #[error(
        "AFE-SBX-005 {kind} {name} exists and is not afe's (no afe.ticket and managed-by labels); it was left alone"
    )]
    NotOurs { kind: String, name: String },
    /// The sandbox image is not on the platform (no registry is asked: nothing is pulled).
    #[error("AFE-SBX-006 the sandbox image {image} is not available: {detail}")]
    Image { image: String, detail: String },
    /// The sandbox's network could not be locked, or its proxy would not start: nothing of the
    /// ticket ran, and the sandbox was removed.
    #[error("AFE-SBX-007 the sandbox of ticket {ticket} could not be contained: {why}")]
    Containment { ticket: String, why: String },
    /// The engine image (netlock, the proxy) could not be had: its static binary is missing, or
    /// the image named instead is not on the platform.
    #[error("AFE-SBX-008 the engine image is not available: {detail}")]
    EngineImage { detail: String },
    /// The Kubernetes API server does not speak the v5 exec stream protocol, the only one that can
    /// close a command's stdin without closing its stream: on v4, a bundle sent on stdin would
    /// lose the command's trailing output.
    #[error(
        "AFE-SBX-009 the API server cannot close a command's stdin (it offers only the v4 exec stream protocol): {detail}"
    )]
    ExecProtocol { detail: String },
}

impl SandboxError {
    /// Whether the engine should drop this sandbox and restore the ticket into a new one.
    pub fn is_gone(&self) -> bool {
        matches!(self, SandboxError::Gone { .. })
    }

    pub fn code(&self) -> &'static str {
        match self {
            SandboxError::Gone { .. } => "AFE-SBX-001",
            SandboxError::PathRefused { .. } => "AFE-SBX-002",
            SandboxError::VariableRefused { .. } => "AFE-SBX-003",
            SandboxError::Platform { .. } => "AFE-SBX-004",
            SandboxError::NotOurs { .. } => "AFE-SBX-005",
            SandboxError::Image { .. } => "AFE-SBX-006",
            SandboxError::Containment { .. } => "AFE-SBX-007",
            SandboxError::EngineImage { .. } => "AFE-SBX-008",
            SandboxError::ExecProtocol { .. } => "AFE-SBX-009",
        }
    }

    /// What a person does next.
    pub fn help(&self) -> &'static str {
        match self {
            SandboxError::Gone { .. } => {
                "nothing, usually: the worker removes what is left and restores the ticket from its last checkpoint into a new sandbox; if it keeps happening, check the machine's memory (the sandbox's limit) and that nothing else removes afe's containers"
            }
            SandboxError::PathRefused { .. } => {
                "name a path inside /workspace (relative paths start at /workspace/repo) that the sandbox's user (uid 1000) may write"
            }
            SandboxError::VariableRefused { .. } => {
                "name the variable in the flow's spec.sandbox.env and set it in the worker's environment"
            }
            SandboxError::Platform { .. } => {
                "check that the Docker daemon (or the API server) runs and this user may use it; the worker retries the ticket"
            }
            SandboxError::NotOurs { .. } => {
                "remove or rename the object if it is a leftover of yours; afe never touches what it did not create"
            }
            SandboxError::Image { .. } => {
                "build the image on this machine (scripts/build-sandbox-image makes afe-sandbox) or name one that is there in spec.sandbox.image; see docs/afe-sandbox.md for what an image must have"
            }
            SandboxError::Containment { .. } => {
                "check that the machine has iptables with the owner match (netlock) and that the engine image is af's; the message says which step failed"
            }
            SandboxError::EngineImage { .. } => {
                "build the static af-proxy with scripts/build-engine and pass its path as AF_PROXY_BINARY, or name an engine image that is on the platform (AF_PROXY_IMAGE, --engine-image)"
            }
            SandboxError::ExecProtocol { .. } => {
                "run afe against Kubernetes 1.30 or newer (v5.channel.k8s.io is on by default there; on 1.29 enable the TranslateStreamCloseWebsocketRequests feature gate), and check that no proxy in front of the API server strips the WebSocket subprotocol"
            }
        }
    }

    /// Every code, for docs/errors.md.
    pub const CODES: [&'static str; 9] = [
        "AFE-SBX-001",
        "AFE-SBX-002",
        "AFE-SBX-003",
        "AFE-SBX-004",
        "AFE-SBX-005",
        "AFE-SBX-006",
        "AFE-SBX-007",
        "AFE-SBX-008",
        "AFE-SBX-009",
    ];
}
