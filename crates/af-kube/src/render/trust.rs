//! HTTPS capture on Kubernetes: the ConfigMap the services read the environment's capture CA
//! from, mounted read-only at `/etc/af` in every workload container (services, cron services,
//! migrations), and the variables that point their TLS stacks there (af-runtime's
//! `capture_trust`). The CA's key is in the sidecar's Secret only.

use std::collections::BTreeMap;

use af_manifest::Service;
use af_runtime::capture_trust::{self, BUNDLE_FILE_NAME, CA_FILE_NAME, TRUST_DIR};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, EnvVar, PodSpec, Volume, VolumeMount,
};

use super::RenderInput;
use super::names::CAPTURE_TRUST;

/// On the ConfigMap when the bundle (the machine's trust store and the CA) is added as it is
/// applied: it is the trust store of the machine `af up` runs on, not something to print.
pub const BUNDLE_FILLED_ANNOTATION: &str = "dev.antifailure.filled-with-bundle";

/// The ConfigMap with the CA's certificate, when the environment captures anything.
pub fn config_map(input: &RenderInput<'_>, namespace: &str) -> Option<ConfigMap> {
    let capture = input.capture?;
    let mut metadata = super::meta(input, namespace, CAPTURE_TRUST);
    if capture.with_system_store {
        metadata.annotations = Some(BTreeMap::from([(
            BUNDLE_FILLED_ANNOTATION.to_string(),
            BUNDLE_FILE_NAME.to_string(),
        )]));
    }
    Some(ConfigMap {
        metadata,
        data: Some(BTreeMap::from([(
            CA_FILE_NAME.to_string(),
            capture.ca.cert.clone(),
        )])),
        ..Default::default()
    })
}

/// The ConfigMap as applied: with the bundle, when its annotation asks for one.
pub fn with_bundle(config_map: &ConfigMap, system_store: Option<&str>) -> ConfigMap {
    let mut filled = config_map.clone();
    let wants_bundle = config_map
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(BUNDLE_FILLED_ANNOTATION));
    let data = filled.data.get_or_insert_with(BTreeMap::new);
    if wants_bundle && let Some(cert) = data.get(CA_FILE_NAME).cloned() {
        data.insert(
            BUNDLE_FILE_NAME.to_string(),
            capture_trust::bundle(system_store, &cert),
        );
    }
    filled
}

/// Mounts the CA's files in every container of `spec` (not its init containers: the gate and the
/// engine's installer make no TLS calls).
pub fn mount_in(input: &RenderInput<'_>, spec: &mut PodSpec) {
    if input.capture.is_none() {
        return;
    }
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: CAPTURE_TRUST.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: CAPTURE_TRUST.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    });
    for container in &mut spec.containers {
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: CAPTURE_TRUST.to_string(),
                mount_path: TRUST_DIR.to_string(),
                read_only: Some(true),
                ..Default::default()
            });
    }
}

/// The variables that make `service` trust the CA, but those it sets itself.
pub fn variables(input: &RenderInput<'_>, service: &Service) -> Vec<EnvVar> {
    let Some(capture) = input.capture else {
        return Vec::new();
    };
    capture_trust::variables(capture.with_system_store, |name| {
        service.env.contains_key(name)
    })
    .into_iter()
    .map(|(name, value)| EnvVar {
        name: name.to_string(),
        value: Some(value),
        ..Default::default()
    })
    .collect()
}
