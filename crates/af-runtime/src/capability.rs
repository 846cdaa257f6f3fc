//! What a runtime can do. A runtime declares its capabilities; asking for one it lacks is an
//! AF-RUN-044 error naming the runtime, never a quiet fallback to another runtime.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::error::{RuntimeError, RuntimeErrorKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// `af net log`: the sidecar's decision log.
    NetLog,
    /// `af inbox`: captured requests and mail.
    Inbox,
    /// `af webhook trigger`: the sidecar delivering a request to a service.
    WebhookTrigger,
    /// Preview URLs for web services.
    PreviewUrls,
    /// `database.provider: container`: a database branch running beside the environment.
    ContainerDatabase,
    /// `database.provider: external`: services handed a connection string to a database outside
    /// the environment, and a route to it.
    ExternalDatabase,
    /// `migrate`: a command run once before a service starts.
    Migrations,
    /// `cron`: services run on a schedule.
    CronSchedules,
    /// A cron service without `command:`, run with its image's own command (which a scheduler
    /// inside a pod cannot read).
    CronWithoutCommand,
    /// `health_path`: readiness polled over HTTP.
    HealthPaths,
    /// Running environments at all (`af up`): a runtime that is not built yet lacks it.
    Environments,
    /// Readiness counts any HTTP answer on `health_path` (the local runtime); without it, only
    /// 2xx/3xx count (Kubernetes decides readiness itself).
    AnyStatusIsReady,
    /// Building `build:` contexts into images a cluster's nodes can run.
    ClusterImageBuilds,
    /// Readiness counts only 2xx/3xx answers on `health_path` (Kubernetes, which decides
    /// readiness itself); the other half of the documented local/Kubernetes difference.
    HealthMustSucceed,
    /// Captured hosts answered over HTTPS too: the environment's capture CA signs the sidecar's
    /// certificates and the services are told to trust it.
    HttpsCapture,
}

impl Capability {
    /// The capability in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Capability::NetLog => "reading the sidecar's decision log (af net log)",
            Capability::Inbox => "reading the capture inbox (af inbox)",
            Capability::WebhookTrigger => {
                "delivering webhooks through the sidecar (af webhook trigger)"
            }
            Capability::PreviewUrls => "preview URLs for web services",
            Capability::ContainerDatabase => {
                "a database branch in a container (database.provider: container)"
            }
            Capability::ExternalDatabase => {
                "an external database (database.provider: external): this runtime's sidecar has no relay to it yet, and its services reach nothing outside but through the sidecar, so the connection string would never connect"
            }
            Capability::AnyStatusIsReady => "treating any HTTP status on health_path as ready",
            Capability::ClusterImageBuilds => {
                "building services' images for the cluster's nodes yet (build:); name an image the nodes can pull with image:"
            }
            Capability::HealthMustSucceed => {
                "counting only 2xx/3xx on health_path as ready (it treats any status as ready)"
            }
            Capability::HttpsCapture => {
                "answering captured hosts over https:// (no capture CA yet); call them over http://"
            }
            Capability::Migrations => "migrations (services.<name>.migrate) yet",
            Capability::CronSchedules => "cron schedules (services.<name>.cron) yet",
            Capability::CronWithoutCommand => {
                "a cron service without `command:` (the scheduler in its pod cannot read the image's own command); write `command:` in the manifest"
            }
            Capability::HealthPaths => "readiness over health_path yet",
            Capability::Environments => {
                "running environments yet (this build of af has only the local runtime)"
            }
        }
    }
}

/// The capabilities one runtime declares.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    runtime: String,
    supported: BTreeSet<Capability>,
}

impl Capabilities {
    pub fn new(
        runtime: impl Into<String>,
        supported: impl IntoIterator<Item = Capability>,
    ) -> Self {
        Capabilities {
            runtime: runtime.into(),
            supported: supported.into_iter().collect(),
        }
    }

    /// The runtime's name, as errors carry it.
    pub fn runtime(&self) -> &str {
        &self.runtime
    }

    pub fn supports(&self, capability: Capability) -> bool {
        self.supported.contains(&capability)
    }

    /// `Ok` when supported; otherwise the AF-RUN-044 error that names this runtime.
    pub fn require(&self, capability: Capability) -> Result<(), RuntimeError> {
        if self.supports(capability) {
            Ok(())
        } else {
            Err(self.unsupported(capability))
        }
    }

    /// The AF-RUN-044 error saying this runtime does not support `capability`.
    pub fn unsupported(&self, capability: Capability) -> RuntimeError {
        RuntimeErrorKind::Unsupported {
            runtime: self.runtime.clone(),
            capability,
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::RunCode;

    #[test]
    fn a_missing_capability_is_af_run_044_naming_the_runtime() {
        let caps = Capabilities::new("kubernetes", [Capability::PreviewUrls]);
        assert!(caps.require(Capability::PreviewUrls).is_ok());
        let err = caps.require(Capability::NetLog).unwrap_err();
        assert_eq!(err.code(), RunCode::Unsupported);
        assert!(
            err.to_string().contains(
                "the kubernetes runtime does not support reading the sidecar's decision log"
            ),
            "{err}"
        );
    }
}
