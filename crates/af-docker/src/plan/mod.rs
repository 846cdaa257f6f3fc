//! The local runtime's objects as data: what `up` asks the daemon to create for a manifest and an
//! environment — the two networks, the volumes, and the create body of every container (holders,
//! applications, the sidecar, the probe's holder, migrations, ingresses, scheduled services) —
//! from pure functions, with golden files (`tests/golden/`) and a test per hardening guarantee.
//!
//! - [`hardening`]: what every container gives up, written once.
//! - [`containers`]: one builder per kind of container; the runtime sends exactly these.
//! - [`networks`]: the two networks' create requests, and the layout the refusal rules read.
//! - [`service`], [`sidecar`], [`ingress`], [`schedule`], [`trust`]: the decisions behind each
//!   kind's body — names, a service's environment, specification digests, the sidecar's typed
//!   configuration, the scheduler's entrypoint, the capture CA's mounts and variables.
//! - [`plan`]: the whole environment from the builders, given what the platform decides (the
//!   subnet, the instances' addresses, the scheduled images' commands).
//!
//! `up` sends the builders' bodies one at a time, because it learns part of their input from the
//! daemon between the steps (the subnet it could take, each instance's address, an image's own
//! command) and keeps what already runs as specified; [`plan`] assembles the same bodies from the
//! same inputs given all at once.

pub mod containers;
pub mod database;
pub mod external_database;
pub mod hardening;
pub mod ingress;
pub mod networks;
pub mod schedule;
pub mod service;
pub mod sidecar;
pub mod trust;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use af_manifest::{EgressPolicy, Manifest};
use bollard::models::{ContainerCreateBody, NetworkCreateRequest};
use service::Placement;

use crate::error::DockerError;
use crate::names;

/// Everything of an environment that the manifest does not say and the platform decides.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    pub at: Placement<'a>,
    /// The egress network's name.
    pub egress: &'a str,
    /// The third octet of the services' network's subnet (`10.213.N.0/24`).
    pub subnet_third: u8,
    /// Each service's image reference (as named, or as built from its context).
    pub images: &'a BTreeMap<String, String>,
    /// The command each scheduled service runs (its own, or its image's).
    pub cron_commands: &'a BTreeMap<String, Vec<String>>,
    /// Each instance's address on the services' network, by service, in instance order.
    pub instance_addresses: &'a BTreeMap<String, Vec<Ipv4Addr>>,
    pub control_token: &'a str,
    /// af's own environment, for the manifest's `from_env` values.
    pub lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl std::fmt::Debug for Inputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token, nor what `lookup` would read.
        f.debug_struct("Inputs")
            .field("at", &self.at)
            .field("egress", &self.egress)
            .field("subnet_third", &self.subnet_third)
            .field("images", &self.images)
            .field("cron_commands", &self.cron_commands)
            .field("instance_addresses", &self.instance_addresses)
            .finish_non_exhaustive()
    }
}

/// Everything `up` creates for an environment.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Plan {
    pub networks: Vec<NetworkCreateRequest>,
    /// Volumes by name: the engine's (scheduled services) and the capture CA's.
    pub volumes: Vec<String>,
    /// Every container's create body, by container name.
    pub containers: BTreeMap<String, ContainerCreateBody>,
}

/// The whole environment of `manifest`.
pub fn plan(manifest: &Manifest, inputs: &Inputs<'_>) -> Result<Plan, DockerError> {
    let at = inputs.at;
    let env = at.env;
    let mut containers = BTreeMap::new();
    let mut volumes = Vec::new();
    let engine_volume = schedule_volume(manifest, env);
    volumes.extend(engine_volume.clone());
    volumes.extend(at.capture_ca.map(|ca| ca.volume.clone()));

    let webhooks = webhook_targets(manifest);
    let (name, body) = sidecar_body(
        &manifest.egress,
        at,
        inputs.control_token,
        &webhooks,
        inputs.egress,
    )?;
    containers.insert(name, body);
    containers.insert(
        probe_holder(env),
        containers::holder(containers::Holder {
            env,
            role: PROBE_HOLDER_ROLE,
            engine_image: at.engine_image,
            network: at.internal,
            dns: None,
            alias: None,
            spec: None,
        }),
    );
    for service in manifest.services_in_start_order() {
        let image = inputs.images.get(&service.name).ok_or_else(|| {
            crate::error::internal(
                format!("planning {}", service.name),
                "it has no image reference",
            )
        })?;
        let environment = service::environment_with(at, service, inputs.lookup)?;
        if let Some(command) = &service.migrate {
            let holder_role = service::migration_holder_role(&service.name);
            containers.insert(
                names::container(env, &holder_role),
                containers::pod_holder(at, &holder_role, None, service::MIGRATION_SPEC),
            );
            let spec = service::migration(at, service, image, command, environment.clone());
            containers.insert(
                names::container(env, &spec.role),
                containers::one_shot(env, &spec),
            );
        }
        let spec = service::instance_spec(at, service, image, &environment);
        let (entrypoint, cmd) =
            service::entry(service, inputs.cron_commands.get(&service.name).cloned());
        for index in 0..service.replicas {
            let (holder_role, app_role) = service::roles(&service.name, index);
            let holder = names::container(env, &holder_role);
            containers.insert(
                holder.clone(),
                containers::pod_holder(at, &holder_role, Some(&service.name), &spec),
            );
            containers.insert(
                names::container(env, &app_role),
                containers::application(containers::Application {
                    at,
                    service,
                    image,
                    index,
                    joined: format!("container:{holder}"),
                    spec: &spec,
                    environment: environment.clone(),
                    entrypoint: entrypoint.clone(),
                    cmd: cmd.clone(),
                    engine_volume: service.cron.as_ref().and(engine_volume.as_deref()),
                }),
            );
        }
        if let (true, Some(port)) = (service.web, service.port) {
            let addresses: Vec<String> = inputs
                .instance_addresses
                .get(&service.name)
                .into_iter()
                .flatten()
                .map(|ip| ip.to_string())
                .collect();
            let (name, body) =
                crate::plan::ingress::body(at, inputs.egress, &service.name, port, &addresses);
            containers.insert(name, body);
        }
    }
    if let Some(volume) = &engine_volume {
        let install = crate::plan::schedule::install(at.engine_image, volume);
        containers.insert(
            names::container(env, &install.role),
            containers::one_shot(env, &install),
        );
    }
    Ok(Plan {
        networks: vec![
            networks::internal(&names::internal_network(env), env, inputs.subnet_third),
            networks::egress(&names::egress_network(env), env),
        ],
        volumes,
        containers,
    })
}

/// The role of the probe's holder: where the probe runs when every instance already runs (else it
/// runs in the first fresh instance holder).
pub const PROBE_HOLDER_ROLE: &str = "probe-holder";

/// The probe's holder container of `env`.
pub fn probe_holder(env: &af_manifest::EnvironmentId) -> String {
    names::container(env, PROBE_HOLDER_ROLE)
}

/// The engine volume, when a service is scheduled.
fn schedule_volume(manifest: &Manifest, env: &af_manifest::EnvironmentId) -> Option<String> {
    manifest
        .services
        .values()
        .any(|s| s.cron.is_some())
        .then(|| crate::plan::schedule::volume_name(env))
}

/// Each service that takes webhooks, and its port.
pub fn webhook_targets(manifest: &Manifest) -> Vec<(String, u16)> {
    manifest
        .services
        .values()
        .filter_map(|s| s.port.map(|port| (s.name.clone(), port)))
        .collect()
}

/// The sidecar's name and create body.
fn sidecar_body(
    policy: &EgressPolicy,
    at: Placement<'_>,
    token: &str,
    webhooks: &[(String, u16)],
    egress: &str,
) -> Result<(String, ContainerCreateBody), DockerError> {
    let spec = sidecar::SidecarSpec {
        image: at.engine_image,
        internal: at.internal,
        egress,
        policy,
        webhooks,
        capture_ca: at.capture_ca,
        relay: at.relay,
    };
    Ok((
        names::container(at.env, "sidecar"),
        sidecar::body(at.env, spec, at.sidecar_ip, token)?,
    ))
}
