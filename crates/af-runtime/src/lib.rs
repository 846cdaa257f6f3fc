//! The contract between the `af` CLI and the places environments run.
//!
//! - [`Runtime`]: `up`, `down`, `status`, `logs`, and the sidecar reads, implemented once per
//!   platform (Docker, Kubernetes).
//! - [`Capabilities`]: what a runtime supports; a missing one is AF-RUN-044, never a fallback.
//! - [`ProgressEvent`]: how a runtime reports what it is doing; the CLI renders it.
//! - [`RuntimeError`]: AF-RUN-* errors, with the specification's fixed numbers (043 containment,
//!   044 unsupported, 045 not ours, 047 does not fit).

mod capability;
pub mod capture_trust;
mod env_values;
mod error;
mod progress;
mod runtime;
mod verdict;

pub use af_sidecar_api::records::{
    CapturedItem, DecisionQuery, DecisionRecord, InboxEntry, Verdict, WebhookDelivery,
    WebhookRequest,
};
pub use capability::{Capabilities, Capability};
pub use env_values::{missing_env_values, require_env_values, require_env_values_in};
pub use error::{
    Category, FindingKind, NETLOCK_CAUSE_FOLLOWS, PodFailureKind, RouteFinding, RunCode,
    RuntimeError, RuntimeErrorKind,
};
pub use progress::{ProgressEvent, ProgressSink, Step, run_step};
pub use runtime::{
    ContainmentSummary, DatabaseStatus, Environment, EnvironmentStatus, ExternalDatabaseStatus,
    LogLine, LogStream, Runtime, ServiceStatus, ShellOutput, UpReport,
};
pub use verdict::{gate_refusal, judge_probe};

/// The label every object af creates carries, set in the creating call. Teardown deletes only what
/// carries it; an object with our name and without it is someone else's (AF-RUN-045).
pub const MANAGED_LABEL: &str = "dev.antifailure.managed";

/// The proxy variables every service gets, pointing at its sidecar on every runtime; a manifest's
/// own values for these names are dropped (the sidecar is the only way out, whatever a service
/// is told).
pub const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// What clients that honour the proxy variables must reach directly: loopback, and the other
/// services by name (`http://worker:9090` through the sidecar would be denied as an outside host):
/// the `NO_PROXY` value of every service, on every runtime.
pub fn no_proxy<'a>(service_names: impl IntoIterator<Item = &'a str>) -> String {
    let mut hosts = vec!["localhost", "127.0.0.1"];
    hosts.extend(service_names);
    hosts.join(",")
}

/// The label carrying the environment id, beside [`MANAGED_LABEL`].
pub const ENVIRONMENT_LABEL: &str = "dev.antifailure.environment";
