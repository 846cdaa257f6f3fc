//! What the local runtime calls things, and the labels that make them af's. Pure: every name is
//! derived from the environment id, so `down` finds by label exactly what `up` made.

use std::collections::HashMap;

use af_manifest::EnvironmentId;
use af_runtime::{ENVIRONMENT_LABEL, MANAGED_LABEL};

/// The label naming an object's role in its environment (`sidecar`, `probe`, `holder`, ...).
pub const ROLE_LABEL: &str = "dev.antifailure.role";

/// On application containers: the service they run, and how many instances it wants, so `status`
/// can read the environment back without the manifest.
pub const SERVICE_LABEL: &str = "dev.antifailure.service";
pub const REPLICAS_LABEL: &str = "dev.antifailure.replicas";
/// On application containers: which instance of its service it is.
pub const INSTANCE_LABEL: &str = "dev.antifailure.instance";
/// On ingress containers: the web service whose port they publish.
pub const INGRESS_LABEL: &str = "dev.antifailure.ingress";
/// On long-lived containers: a digest of everything they were created from, so a second `up`
/// keeps what has not changed and replaces what has.
pub const SPEC_LABEL: &str = "dev.antifailure.spec";

/// The digest of a container's specification parts.
pub fn spec_digest(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The services' network: `internal`, so it has no route off the host.
pub fn internal_network(env: &EnvironmentId) -> String {
    format!("af-{env}-internal")
}

/// The sidecar's way out: the only network with a route off the host, and only the sidecar is on
/// it.
pub fn egress_network(env: &EnvironmentId) -> String {
    format!("af-{env}-egress")
}

/// A container of the environment: `af-<env>-<role>`.
pub fn container(env: &EnvironmentId, role: &str) -> String {
    format!("af-{env}-{role}")
}

/// The labels of every object of `env`, set in the call that creates it.
pub fn labels(env: &EnvironmentId, role: &str) -> HashMap<String, String> {
    HashMap::from([
        (MANAGED_LABEL.to_string(), "true".to_string()),
        (ENVIRONMENT_LABEL.to_string(), env.to_string()),
        (ROLE_LABEL.to_string(), role.to_string()),
    ])
}

/// The label filter that finds every object of `env`.
pub fn environment_filter(env: &EnvironmentId) -> HashMap<String, Vec<String>> {
    HashMap::from([(
        "label".to_string(),
        vec![
            format!("{MANAGED_LABEL}=true"),
            format!("{ENVIRONMENT_LABEL}={env}"),
        ],
    )])
}

/// Whether an object carrying `labels` is af's object of `env`.
pub fn is_ours(labels: Option<&HashMap<String, String>>, env: &EnvironmentId) -> bool {
    labels.is_some_and(|l| {
        l.get(MANAGED_LABEL).map(String::as_str) == Some("true")
            && l.get(ENVIRONMENT_LABEL).map(String::as_str) == Some(env.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels() {
        let env = EnvironmentId::derive("shop", "main");
        assert_eq!(internal_network(&env), "af-shop-main-internal");
        assert_eq!(container(&env, "probe"), "af-shop-main-probe");
        let labels = labels(&env, "sidecar");
        assert!(is_ours(Some(&labels), &env));
        assert!(
            !is_ours(Some(&labels), &EnvironmentId::derive("shop", "other")),
            "another environment's"
        );
        assert!(!is_ours(None, &env), "no labels: someone else's");
        let mut forged = labels.clone();
        forged.remove(MANAGED_LABEL);
        assert!(!is_ours(Some(&forged), &env));
    }
}
