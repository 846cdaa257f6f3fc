//! What the tests of the Kubernetes sandbox share: a ticket's spec, the settings, the rendered
//! objects.
#![allow(dead_code)] // each test binary uses its own part

use std::collections::BTreeMap;

use afe_sandbox::SandboxSpec;
use afe_sandbox_kube::KubeSandboxSettings;

pub const TICKET: &str = "6f1c2d3e-0000-4000-8000-000000000001";

pub fn spec(egress: &[&str]) -> SandboxSpec {
    SandboxSpec {
        ticket: TICKET.into(),
        image: "afe-sandbox:latest".into(),
        cpus: Some(1.5),
        memory_bytes: Some(512 << 20),
        env: BTreeMap::from([("MODEL_KEY".to_string(), "never-rendered".to_string())]),
        egress: egress
            .iter()
            .map(|r| af_manifest::parse_host_rule(r).unwrap())
            .collect(),
        runtime_class: None,
    }
}

pub fn settings() -> KubeSandboxSettings {
    KubeSandboxSettings {
        namespace: "afe-sandbox".into(),
        engine_image: "af-engine:test".into(),
        env_secret: Some("afe-sandbox-env".into()),
        ..KubeSandboxSettings::default()
    }
}

/// The PVC and the Pod of `spec` as YAML, the proxy's configuration `config` when it has egress.
pub fn rendered(spec: &SandboxSpec, config: Option<&str>) -> String {
    let signature = spec.signature();
    let name = afe_sandbox_kube::render::name(&spec.ticket, "abcde");
    let claim = afe_sandbox_kube::render::claim(spec, &signature, &name, &settings());
    let pod = afe_sandbox_kube::render::pod(spec, &signature, &name, &settings(), config);
    afe_sandbox_kube::render::to_yaml(&claim, &pod)
}

/// A fixed proxy configuration (the real one carries a fresh token).
pub fn proxy_config(spec: &SandboxSpec) -> String {
    af_sidecar_api::SidecarConfig::allowlist_proxy(
        &spec.ticket,
        spec.egress.clone(),
        "0".repeat(32),
    )
    .to_text()
    .unwrap()
}
