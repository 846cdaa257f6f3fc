//! `af render --runtime kubernetes`: every object of the environment, as YAML documents in the
//! order they are applied (or a JSON array with `--json`), from the manifest alone. Nothing is
//! read from or written to a cluster; what only a cluster knows is a documented stand-in.

use std::collections::BTreeMap;
use std::path::Path;

use af_kube::render::{CaptureInput, Cluster, RenderInput, render, stand_in_service_ips, to_yaml};
use af_manifest::ImageSource;
use af_runtime::capture_trust::CaptureCaPem;

use crate::cli::RenderArgs;
use crate::environment_name::load_environment;
use crate::exit::Exit;

/// The control token is made when the environment is applied; rendering shows where it goes.
const TOKEN_STAND_IN: &str = "made-at-af-up";

pub fn run(args: &RenderArgs, manifest_path: &Path, json: bool) -> anyhow::Result<Exit> {
    let (manifest, dir, env) = match load_environment(manifest_path, args.env.as_deref()) {
        Ok(loaded) => loaded,
        Err(exit) => return Ok(exit),
    };
    let dir = dir.as_path();
    let runtime_error = |err: af_docker::DockerError| {
        let err = af_runtime::RuntimeError::from(err);
        eprintln!("af render: {err}\n  help: {}", err.help());
        Ok(Exit::Runtime(err.code()))
    };
    let engine_image = match af_docker::engine_image::expected() {
        Ok(image) => image,
        Err(err) => return runtime_error(err),
    };
    let mut images = BTreeMap::new();
    for service in manifest.services.values() {
        let image = match &service.source {
            ImageSource::Image(reference) => reference.clone(),
            ImageSource::Build { context, .. } => {
                match af_docker::build::tag_of(&manifest.name, &service.name, dir, context) {
                    Ok(tag) => tag,
                    Err(err) => return runtime_error(err),
                }
            }
        };
        images.insert(service.name.clone(), image);
    }
    let targets = af_docker::probe::target_args(None);
    let cluster = Cluster {
        domain: args.cluster_domain.clone(),
        dns: args.cluster_dns,
        ingress_namespace: args.ingress_namespace.clone(),
    };
    let no_commands = BTreeMap::new();
    // The CA is made at the environment's first `af up`, like the token.
    let ca_stand_in = CaptureCaPem {
        cert: TOKEN_STAND_IN.to_string(),
        key: TOKEN_STAND_IN.to_string(),
    };
    // The services' ClusterIPs are assigned when their Services are created, like the sidecar's.
    let service_ips = stand_in_service_ips(&manifest);
    let rendered = match render(&RenderInput {
        manifest: &manifest,
        env: &env,
        sidecar_ip: args.sidecar_ip,
        service_ips: &service_ips,
        engine_image: &engine_image,
        images: &images,
        image_commands: &no_commands,
        probe_targets: &targets,
        control_token: TOKEN_STAND_IN,
        cluster: &cluster,
        capture: manifest.egress.needs_capture_ca().then(|| CaptureInput {
            ca: &ca_stand_in,
            with_system_store: af_runtime::capture_trust::system_bundle().is_some(),
        }),
    }) {
        Ok(rendered) => rendered,
        Err(err) => {
            eprintln!("af render: {err}");
            return Ok(Exit::Usage);
        }
    };
    let objects = rendered.in_apply_order();
    if json {
        println!("{}", serde_json::to_string_pretty(&objects)?);
    } else {
        print!("{}", to_yaml(&objects).map_err(anyhow::Error::msg)?);
    }
    Ok(Exit::Success)
}
