//! The example environment, rendered with fixed stand-ins for what only a cluster knows (the
//! sidecar's ClusterIP, the images' digests, the control token), so the output is reviewable.
#![allow(dead_code)] // each test binary uses its own part

use std::collections::BTreeMap;
use std::path::Path;

use af_kube::render::{CaptureInput, Cluster, RenderInput, Rendered, render};
use af_manifest::{EnvironmentId, Manifest};
use af_runtime::capture_trust::CaptureCaPem;

pub const SIDECAR_IP: &str = "10.43.0.53";
pub const ENGINE_IMAGE: &str = "antifailure/proxy:0123456789abcdef";
pub const TOKEN: &str = "golden-control-token";

/// A fixed capture CA, so the rendering is the same every run: made once for these tests, trusted
/// by nothing, its key in the repository on purpose.
pub fn capture_ca() -> CaptureCaPem {
    CaptureCaPem {
        cert: include_str!("capture-ca.pem").to_string(),
        key: include_str!("capture-ca.key").to_string(),
    }
}

/// The shop example, read as `af` reads it, with the provider set to Kubernetes and without its
/// database: a branch in a container is the local runtime's (AF-RUN-044 here, which
/// `a_container_database_or_a_build_context_is_af_run_044` asks for on purpose).
pub fn shop() -> Manifest {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop/af.yaml");
    let mut manifest = af_manifest::load(&path).unwrap();
    manifest.runtime.provider = af_manifest::Provider::Kubernetes;
    manifest.database = None;
    manifest
}

pub fn without_domain(mut manifest: Manifest) -> Manifest {
    manifest.runtime.domain = None;
    manifest
}

/// With `runtime.netlock`: a netlock step first in every customer pod.
pub fn with_netlock(mut manifest: Manifest) -> Manifest {
    manifest.runtime.netlock = true;
    manifest
}

pub fn without_resources(mut manifest: Manifest) -> Manifest {
    for service in manifest.services.values_mut() {
        service.resources = Default::default();
    }
    manifest
}

pub fn targets() -> Vec<String> {
    [
        ("--public-tcp", "203.0.113.10:443"),
        ("--public-dns", "203.0.113.10:53"),
        ("--metadata", "169.254.169.254:80"),
        ("--metadata-v6", "[fd00:ec2::254]:80"),
    ]
    .into_iter()
    .flat_map(|(f, v)| [f.to_string(), v.to_string()])
    .collect()
}

/// `manifest` rendered as environment `main`.
pub fn rendered(manifest: &Manifest) -> Rendered {
    let images: BTreeMap<String, String> = manifest
        .services
        .keys()
        .map(|name| {
            (
                name.clone(),
                format!("af-{}-{name}:0123456789abcdef", manifest.name),
            )
        })
        .collect();
    let env = EnvironmentId::derive(&manifest.name, "main");
    let targets = targets();
    let cluster = Cluster::default();
    let commands = BTreeMap::new();
    let ca = capture_ca();
    let service_ips = af_kube::render::stand_in_service_ips(manifest);
    render(&RenderInput {
        manifest,
        env: &env,
        sidecar_ip: SIDECAR_IP.parse().unwrap(),
        service_ips: &service_ips,
        engine_image: ENGINE_IMAGE,
        images: &images,
        image_commands: &commands,
        probe_targets: &targets,
        control_token: TOKEN,
        cluster: &cluster,
        capture: manifest.egress.needs_capture_ca().then_some(CaptureInput {
            ca: &ca,
            with_system_store: true,
        }),
    })
    .unwrap()
}

/// A manifest from text, for Kubernetes.
pub fn manifest(text: &str) -> Manifest {
    af_manifest::parse(text, "af.yaml").unwrap()
}
