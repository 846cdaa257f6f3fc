//! Names and labels of the objects of an environment: always valid DNS-1123 labels of at most 63
//! characters, deterministic, and never colliding with a service's (service names cannot start
//! with `af-`, AF-MAN-026; every object af adds beside them does).

use std::collections::BTreeMap;

use af_manifest::EnvironmentId;
use sha2::{Digest, Sha256};

pub const MANAGED_LABEL: &str = af_runtime::MANAGED_LABEL;
pub const ENVIRONMENT_LABEL: &str = af_runtime::ENVIRONMENT_LABEL;
/// What a pod is: `service`, `migration`, `probe`, `sidecar`.
pub const ROLE_LABEL: &str = "dev.antifailure.role";
/// The manifest service a pod belongs to.
pub const SERVICE_LABEL: &str = "dev.antifailure.service";
/// Every pod that runs customer code (services, migrations) or stands in for it (the probe): the
/// pods the policies contain.
pub const WORKLOAD_LABEL: &str = "dev.antifailure.workload";
/// The pods of `web` services, which the ingress controller may reach when a domain is set.
pub const WEB_LABEL: &str = "dev.antifailure.web";

pub const SIDECAR: &str = "af-sidecar";
pub const SIDECAR_CONFIG: &str = "af-sidecar-config";
pub const SERVICE_ENV: &str = "af-service-env";
pub const PROBE: &str = "af-probe";
/// The netlock step's init container (`runtime.netlock`), and its scratch volume.
pub const NETLOCK: &str = "af-netlock";
/// The ConfigMap with the environment's capture CA (HTTPS capture).
pub const CAPTURE_TRUST: &str = "af-capture-trust";

const MAX_LABEL: usize = 63;

/// A DNS label of at most 63 characters: `text` itself when it fits, otherwise cut and given the
/// first 8 hex digits of its SHA-256, so two long names never end up the same.
pub fn fitted(text: &str) -> String {
    if text.len() <= MAX_LABEL {
        return text.to_string();
    }
    let digest = Sha256::digest(text.as_bytes());
    let suffix: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let kept = text[..MAX_LABEL - suffix.len() - 1].trim_end_matches('-');
    format!("{kept}-{suffix}")
}

/// The environment's namespace: `<namespace_prefix><environment id>` (at most 23 + 40 = 63).
pub fn namespace(prefix: &str, env: &EnvironmentId) -> String {
    fitted(&format!("{prefix}{env}"))
}

/// The Job that runs `service`'s migration.
pub fn migration_job(service: &str) -> String {
    fitted(&format!("af-migrate-{service}"))
}

/// The labels every object of the environment carries.
pub fn ownership(env: &EnvironmentId) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_LABEL.to_string(), "true".to_string()),
        (ENVIRONMENT_LABEL.to_string(), env.to_string()),
    ])
}

/// A pod's selecting labels: its role, and its service when it has one.
pub fn pod_selector(role: &str, service: Option<&str>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([(ROLE_LABEL.to_string(), role.to_string())]);
    if let Some(service) = service {
        labels.insert(SERVICE_LABEL.to_string(), service.to_string());
    }
    labels
}

/// A pod's labels: ownership, its selector, and whether it runs customer code (the pods the
/// policies contain).
pub fn pod_labels(
    env: &EnvironmentId,
    role: &str,
    service: Option<&str>,
    workload: bool,
) -> BTreeMap<String, String> {
    let mut labels = ownership(env);
    labels.extend(pod_selector(role, service));
    if workload {
        labels.insert(WORKLOAD_LABEL.to_string(), "true".to_string());
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_to_63_with_a_digest_and_stay_distinct() {
        let a = migration_job(&"a".repeat(63));
        let b = migration_job(&format!("{}b", "a".repeat(62)));
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(a, migration_job(&"a".repeat(63)), "deterministic");
        assert_eq!(migration_job("web"), "af-migrate-web");
        assert!(
            !a.ends_with('-')
                && a.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }

    #[test]
    fn the_namespace_is_the_prefix_and_the_id() {
        let env = EnvironmentId::derive("shop", "main");
        assert_eq!(namespace("af-", &env), "af-shop-main");
        let long = namespace(
            &"p".repeat(23),
            &EnvironmentId::derive(&"s".repeat(30), &"e".repeat(40)),
        );
        assert!(long.len() <= 63, "{long}");
    }
}
