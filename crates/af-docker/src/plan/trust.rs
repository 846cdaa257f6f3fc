//! The environment's capture CA as the services see it: a volume of its files, mounted read-only,
//! and the variables that point their TLS stacks at them.

use af_runtime::capture_trust::{self, CaptureCaPem, TRUST_DIR};
use bollard::models::HostConfig;

/// The environment's capture CA and where services find it.
#[derive(Clone, Debug)]
pub struct CaptureCa {
    pub volume: String,
    pub pem: CaptureCaPem,
    pub with_system_store: bool,
}

impl CaptureCa {
    /// The variables a service gets, `NAME=value`, but those its manifest sets itself.
    pub fn variables(&self, manifest_sets: impl Fn(&str) -> bool) -> Vec<String> {
        capture_trust::variables(self.with_system_store, manifest_sets)
            .into_iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }

    /// The read-only mount of the CA's files, as a bind.
    pub fn bind(&self) -> String {
        format!("{}:{TRUST_DIR}:ro", self.volume)
    }

    /// Adds [`CaptureCa::bind`] to a container's host configuration.
    pub fn mount(&self, host_config: &mut HostConfig) {
        host_config
            .binds
            .get_or_insert_with(Vec::new)
            .push(self.bind());
    }
}
