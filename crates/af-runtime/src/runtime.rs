//! The one interface every runtime implements, and what it reports.

use std::path::PathBuf;
use std::pin::Pin;

use af_manifest::{EnvironmentId, Manifest};
use async_trait::async_trait;
use futures_core::Stream;
use serde::Serialize;

use crate::capability::{Capabilities, Capability};
use crate::error::RuntimeError;
use crate::progress::ProgressSink;
use af_sidecar_api::records::{
    DecisionQuery, DecisionRecord, InboxEntry, WebhookDelivery, WebhookRequest,
};

/// An environment to bring up: a validated manifest under a derived id.
#[derive(Clone, Debug)]
pub struct Environment {
    pub id: EnvironmentId,
    pub manifest: Manifest,
    /// The manifest's folder; `build` contexts and seeds are relative to it.
    pub manifest_dir: PathBuf,
}

/// What `up` leaves behind for the person who ran it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UpReport {
    /// True when the environment was already as the manifest says and nothing was changed.
    pub unchanged: bool,
    pub status: EnvironmentStatus,
}

/// The environment as the platform reports it, read off what is running rather than echoed from
/// the manifest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EnvironmentStatus {
    pub id: EnvironmentId,
    pub services: Vec<ServiceStatus>,
    /// The last containment probe's verdict, if one ran.
    pub containment: Option<ContainmentSummary>,
    /// The environment's database branch, when it has one.
    pub database: Option<DatabaseStatus>,
    /// The external database the sidecar relays to, when the environment has one.
    pub external_database: Option<ExternalDatabaseStatus>,
}

/// An external database as the environment's sidecar relays to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExternalDatabaseStatus {
    /// The database's host and port, as its URL names them.
    pub host: String,
    pub port: u16,
    /// Where the services reach it: the sidecar's relay (`ip:port`).
    pub relay: String,
    /// `database.host` when the manifest names the host; absent when the egress policy allows it.
    pub named_by: Option<String>,
}

/// An environment's database branch, as its server reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DatabaseStatus {
    /// The branch: the database the services' connection string names.
    pub branch: String,
    /// The image its server runs.
    pub image: String,
    pub running: bool,
    /// `pg_database_size` of the branch; absent while the server is not running.
    pub size_bytes: Option<u64>,
}

/// What a command run on the database (`af db psql` without a terminal) printed, and its status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServiceStatus {
    pub name: String,
    pub ready: u32,
    pub wanted: u32,
    /// Millicores applied to each instance, as the platform reports them.
    pub applied_cpu_millis: Option<u64>,
    /// Bytes of memory applied to each instance, as the platform reports them.
    pub applied_memory_bytes: Option<u64>,
    pub urls: Vec<String>,
}

/// The containment probe's last verdict, in brief.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct ContainmentSummary {
    /// True only when every route was observed denied.
    pub contained: bool,
    /// RFC 3339 time of the probe.
    pub checked_at: String,
    /// `route: outcome` for every route tried.
    pub routes: Vec<(String, String)>,
    /// How long the platform let a new pod out before every route was denied (the startup
    /// window the gates close), in milliseconds; 0 when the first attempt was already denied.
    #[serde(default)]
    pub window_ms: u64,
}

/// One line a service wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// Which instance wrote it.
    pub instance: String,
    pub line: String,
}

pub type LogStream = Pin<Box<dyn Stream<Item = Result<LogLine, RuntimeError>> + Send>>;

/// A place environments run: Docker on this machine, or a Kubernetes cluster.
///
/// The sidecar reads (`net_log`, `inbox`, `trigger_webhook`) default to the AF-RUN-044 error that
/// names the runtime; a runtime that can reach its sidecar overrides them and declares the
/// capability. One that cannot says so instead of answering from somewhere else.
#[async_trait]
pub trait Runtime: Send + Sync {
    /// What this runtime supports; its name is the one errors carry.
    fn capabilities(&self) -> &Capabilities;

    /// Brings the environment to what its manifest says: idempotent, and refusing (AF-RUN-043)
    /// before any service image runs when containment cannot be shown.
    async fn up(
        &self,
        environment: &Environment,
        progress: &dyn ProgressSink,
    ) -> Result<UpReport, RuntimeError>;

    /// Removes everything that carries the environment's label, and waits until it is gone.
    async fn down(
        &self,
        id: &EnvironmentId,
        progress: &dyn ProgressSink,
    ) -> Result<(), RuntimeError>;

    async fn status(&self, id: &EnvironmentId) -> Result<EnvironmentStatus, RuntimeError>;

    /// A service's log lines; with `follow`, the stream continues as lines are written.
    async fn logs(
        &self,
        id: &EnvironmentId,
        service: &str,
        follow: bool,
    ) -> Result<LogStream, RuntimeError>;

    async fn net_log(
        &self,
        _id: &EnvironmentId,
        _query: &DecisionQuery,
    ) -> Result<Vec<DecisionRecord>, RuntimeError> {
        Err(self.capabilities().unsupported(Capability::NetLog))
    }

    async fn inbox(&self, _id: &EnvironmentId) -> Result<Vec<InboxEntry>, RuntimeError> {
        Err(self.capabilities().unsupported(Capability::Inbox))
    }

    async fn trigger_webhook(
        &self,
        _id: &EnvironmentId,
        _request: &WebhookRequest,
    ) -> Result<WebhookDelivery, RuntimeError> {
        Err(self.capabilities().unsupported(Capability::WebhookTrigger))
    }

    /// Makes the environment's branch fresh from its template again: what the seed made, nothing
    /// written since.
    async fn reset_database(&self, _id: &EnvironmentId) -> Result<DatabaseStatus, RuntimeError> {
        Err(self
            .capabilities()
            .unsupported(Capability::ContainerDatabase))
    }

    /// Runs psql with `args` on the environment's branch, through its database container, with
    /// `input` on its standard input.
    async fn database_shell(
        &self,
        _id: &EnvironmentId,
        _args: &[String],
        _input: Vec<u8>,
    ) -> Result<ShellOutput, RuntimeError> {
        Err(self
            .capabilities()
            .unsupported(Capability::ContainerDatabase))
    }

    /// The command that opens an interactive psql on the environment's branch from a terminal
    /// (`docker exec -it ...`), for the CLI to run in the user's terminal.
    async fn interactive_database_shell(
        &self,
        _id: &EnvironmentId,
        _args: &[String],
    ) -> Result<Vec<String>, RuntimeError> {
        Err(self
            .capabilities()
            .unsupported(Capability::ContainerDatabase))
    }
}
