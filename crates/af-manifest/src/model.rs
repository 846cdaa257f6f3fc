//! The validated, normalized manifest: what every runtime reads. Building one is only possible
//! through [`crate::parse`], so a value of these types has passed every check.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cron::CronSchedule;
use crate::egress_rule::HostRule;
use crate::quantity::Quantity;

/// A whole environment: its services, what it may reach outside, and its database.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Manifest {
    /// The application's name; the first half of every environment id.
    pub name: String,
    pub runtime: RuntimeSettings,
    /// By service name, sorted.
    pub services: BTreeMap<String, Service>,
    pub egress: EgressPolicy,
    pub database: Option<Database>,
}

impl Manifest {
    /// The services in an order in which each comes after everything it depends on (ties by name),
    /// so starting them in this order respects `depends_on`.
    pub fn services_in_start_order(&self) -> Vec<&Service> {
        crate::dependencies::start_order(&self.services)
            .into_iter()
            .filter_map(|name| self.services.get(name))
            .collect()
    }

    /// Services in waves that can each start at once: a wave's services depend only on services
    /// of earlier waves.
    pub fn services_in_start_waves(&self) -> Vec<Vec<&Service>> {
        crate::dependencies::start_waves(&self.services)
            .into_iter()
            .map(|wave| {
                wave.into_iter()
                    .filter_map(|name| self.services.get(name))
                    .collect()
            })
            .collect()
    }
}

/// Where and how environments of this manifest run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuntimeSettings {
    pub provider: Provider,
    /// The kubeconfig context to use; `None` means the current one.
    pub kubeconfig_context: Option<String>,
    /// Prepended to the environment id to name its namespace. Default `af-`.
    pub namespace_prefix: String,
    /// With a domain, each web service gets a preview URL `<environment>-<service>.<domain>`.
    pub domain: Option<String>,
    /// Kubernetes: a netlock init container in every customer pod (the probe's too), so the
    /// environment stays contained where the cluster's network enforces nothing. Default false.
    pub netlock: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Docker on this machine.
    Local,
    /// A Kubernetes cluster, one namespace per environment.
    Kubernetes,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Local => "local",
            Provider::Kubernetes => "kubernetes",
        }
    }
}

/// One service of the environment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Service {
    pub name: String,
    pub source: ImageSource,
    /// Replaces the image's entrypoint.
    pub command: Option<Vec<String>>,
    /// Replaces the image's arguments.
    pub args: Option<Vec<String>>,
    pub env: BTreeMap<String, EnvValue>,
    /// The port the service listens on; other services reach it as `http://<name>:<port>`.
    pub port: Option<u16>,
    /// Gets a preview URL.
    pub web: bool,
    /// Polled for readiness; without it a service is ready when its port accepts a connection.
    pub health_path: Option<String>,
    pub replicas: u32,
    pub resources: Resources,
    /// Run once, to completion, before the service starts; never retried.
    pub migrate: Option<Vec<String>>,
    /// Run on this schedule instead of continuously.
    pub cron: Option<CronSchedule>,
    /// Services that must be ready before this one starts. Sorted, without repeats.
    pub depends_on: Vec<String>,
}

/// Where a service's image comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageSource {
    /// An image reference the runtime already has or can pull.
    Image(String),
    /// Built from a folder, relative to the manifest's folder.
    Build {
        context: PathBuf,
        dockerfile: PathBuf,
    },
}

/// An environment variable's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvValue {
    /// Written in the manifest.
    Literal(String),
    /// Taken from this variable of the environment `af` itself runs in, when the environment starts.
    /// Secrets are passed this way so that they never enter the manifest.
    FromEnv(String),
}

/// CPU and memory for each instance. A dimension left out is left out everywhere: "a zero request
/// is a request for nothing", so an unnamed figure is never turned into zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Resources {
    pub cpu: Option<Quantity>,
    pub memory: Option<Quantity>,
}

/// What the environment may do outside itself. Anything neither allowed nor captured is denied.
///
/// It also deserializes (with the manifest's spelling), because the runtimes hand it to the sidecar
/// in the sidecar's configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressPolicy {
    /// Reached for real.
    pub allow: Vec<HostRule>,
    /// Answered by the sidecar itself and recorded in the inbox.
    pub capture: Vec<CaptureRule>,
    pub mail: MailPolicy,
}

impl EgressPolicy {
    /// Whether the environment needs a capture CA: something it captures may arrive over TLS — a
    /// captured host over HTTPS, or mail over STARTTLS. Where nothing is captured, no service is
    /// told to trust a CA that would sign nothing.
    pub fn needs_capture_ca(&self) -> bool {
        !self.capture.is_empty() || self.mail == MailPolicy::Capture
    }
}

/// A host whose requests the sidecar answers itself, and with what. Reads as the manifest writes
/// it: a bare host (default response) or `{host, response}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "CaptureRuleSpelling")]
pub struct CaptureRule {
    pub host: HostRule,
    pub response: CannedResponse,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CaptureRuleSpelling {
    Host(HostRule),
    Full {
        host: HostRule,
        #[serde(default)]
        response: CannedResponse,
    },
}

impl From<CaptureRuleSpelling> for CaptureRule {
    fn from(spelling: CaptureRuleSpelling) -> Self {
        match spelling {
            CaptureRuleSpelling::Host(host) => CaptureRule {
                host,
                response: CannedResponse::default(),
            },
            CaptureRuleSpelling::Full { host, response } => CaptureRule { host, response },
        }
    }
}

/// The response a captured request gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CannedResponse {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Default for CannedResponse {
    /// 202 with an empty JSON object: "accepted", which most webhook and API clients take as success
    /// without expecting a particular body.
    fn default() -> Self {
        CannedResponse {
            status: 202,
            content_type: "application/json".to_string(),
            body: "{}".to_string(),
        }
    }
}

/// Outbound mail (SMTP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MailPolicy {
    /// Refused, like any other unlisted destination.
    #[default]
    Deny,
    /// Accepted by the sidecar's SMTP sink and put in the inbox; never delivered.
    Capture,
}

/// The environment's database.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Database {
    pub engine: DatabaseEngine,
    pub provider: DatabaseProvider,
    /// The variable every service receives the connection string in.
    pub env: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DatabaseEngine {
    Postgres,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DatabaseProvider {
    /// A branch that runs beside the environment, as a container of its own.
    Container {
        image: String,
        /// SQL run once into a new branch, relative to the manifest's folder.
        seed: Option<PathBuf>,
    },
    /// An existing database; the connection string is read from this variable of the environment
    /// `af` runs in, never from the manifest. The services reach it only through the sidecar.
    External {
        url_from_env: String,
        /// The database's host (the one in the URL), named here so the sidecar may relay to it
        /// without an egress rule, at a private address too. Unset, `egress.allow` must allow it.
        host: Option<String>,
    },
}
