//! Every object of an environment on Kubernetes, from its manifest: pure functions from plain
//! data to typed k8s-openapi objects, one module per kind (Stackable's `build/`). Seed 000 is the
//! specification; the tests name the sentence each one checks.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use af_manifest::{EnvironmentId, Manifest};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

mod deployment;
mod ingress;
mod job;
pub mod names;
mod namespace;
mod network_policy;
mod pod;
mod probe_pod;
mod secret;
pub use secret::{CONFIG_KEY, FILLED_FROM_ANNOTATION};
mod service;
mod trust;
pub use trust::{BUNDLE_FILLED_ANNOTATION, with_bundle};

/// The sidecar's ports, as its configuration listens and its Service publishes them.
pub mod ports {
    pub const PROXY: u16 = 3128;
    pub const DNS: u16 = 53;
    /// Transparent clients: an outside name resolves to the sidecar, and a client that ignores
    /// its proxy settings connects here; the sidecar decides it by Host or SNI.
    pub const HTTP: u16 = 80;
    pub const TLS: u16 = 443;
    /// The SMTP sink.
    pub const SMTP: [u16; 2] = [25, 587];
    /// The SMTP sink over implicit TLS (SMTPS).
    pub const SMTPS: u16 = 465;
    /// The control API: never published to workloads, never allowed by a policy.
    pub const CONTROL: u16 = 9901;
}

/// What the cluster is, as far as rendering needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// The cluster's DNS domain (`cluster.local`).
    pub domain: String,
    /// The cluster's resolver (the kube-dns Service): names inside the environment are forwarded
    /// there by the sidecar.
    pub dns: SocketAddr,
    /// The namespace the ingress controller runs in, let in to web services when a domain is set.
    pub ingress_namespace: String,
}

impl Default for Cluster {
    fn default() -> Cluster {
        Cluster {
            domain: "cluster.local".into(),
            dns: SocketAddr::from(([10, 96, 0, 10], 53)),
            ingress_namespace: "ingress-nginx".into(),
        }
    }
}

/// Everything rendering reads.
#[derive(Clone, Debug)]
pub struct RenderInput<'a> {
    pub manifest: &'a Manifest,
    pub env: &'a EnvironmentId,
    /// The sidecar Service's ClusterIP: every workload pod's resolver and proxy.
    pub sidecar_ip: IpAddr,
    /// Each manifest service's Service ClusterIP, by service name: with `runtime.netlock`, the
    /// only addresses besides the sidecar's a pod may send to.
    pub service_ips: &'a BTreeMap<String, IpAddr>,
    /// The engine image (`af-proxy`): the gate, the probe, the sidecar.
    pub engine_image: &'a str,
    /// Each service's image reference (as named, or as built from its context).
    pub images: &'a BTreeMap<String, String>,
    /// The command each cron service's image runs, for services that name none in the manifest
    /// (the scheduler runs it; it cannot read the image's default from inside the pod).
    pub image_commands: &'a BTreeMap<String, Vec<String>>,
    /// The probe's and the gates' targets: `af-proxy probe` flags (`--public-tcp ADDR`, ...).
    pub probe_targets: &'a [String],
    /// The sidecar's control token.
    pub control_token: &'a str,
    pub cluster: &'a Cluster,
    /// HTTPS capture: the environment's capture CA, when its egress captures anything.
    pub capture: Option<CaptureInput<'a>>,
}

/// The capture CA as rendering needs it.
#[derive(Clone, Copy, Debug)]
pub struct CaptureInput<'a> {
    pub ca: &'a af_runtime::capture_trust::CaptureCaPem,
    /// Whether the machine `af up` runs on has a trust store for the bundle (see
    /// `capture_trust::variables`).
    pub with_system_store: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenderError {
    /// A service has no image reference in [`RenderInput::images`].
    NoImage(String),
    /// A cron service names no command and its image's is not known.
    CronCommandUnknown(String),
    /// Part of the manifest could not be written into an object: af's own fault.
    Unserializable(String),
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderError::NoImage(service) => write!(f, "service {service} has no image"),
            RenderError::CronCommandUnknown(service) => write!(
                f,
                "the cron service {service} names no command and its image's is unknown; write `command:` in the manifest"
            ),
            RenderError::Unserializable(what) => write!(f, "{what} could not be written out"),
        }
    }
}

/// One object, for printing and applying in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    Namespace(Namespace),
    NetworkPolicy(NetworkPolicy),
    Pod(Pod),
    Secret(Secret),
    Service(Service),
    Deployment(Deployment),
    Job(Job),
    Ingress(Ingress),
    ConfigMap(ConfigMap),
}

/// The environment's objects, by what they are for.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub namespace: Namespace,
    pub policies: Vec<NetworkPolicy>,
    pub probe: Pod,
    pub sidecar_service: Service,
    pub sidecar_config: Secret,
    pub sidecar: Deployment,
    /// The values services take from af's environment (`from_env`): filled when applied, never
    /// printed.
    pub service_env: Option<Secret>,
    /// The capture CA's certificate for the services (HTTPS capture); its bundle is added when
    /// applied.
    pub capture_trust: Option<ConfigMap>,
    pub migrations: Vec<Job>,
    pub services: Vec<Service>,
    pub deployments: Vec<Deployment>,
    pub ingresses: Vec<Ingress>,
    /// The services' names in start waves (`depends_on`): see [`Rendered::waves`].
    pub start_waves: Vec<Vec<String>>,
}

/// The services of one start wave: their migrations, then their Deployments.
#[derive(Clone, Debug, PartialEq)]
pub struct Wave<'a> {
    pub migrations: Vec<&'a Job>,
    pub deployments: Vec<&'a Deployment>,
}

impl Rendered {
    /// The migrations and Deployments in the manifest's start waves (`depends_on`): a wave's
    /// services depend only on earlier waves', so each wave's migrations run once the earlier
    /// waves are ready, and a migration can call the services its own depends on.
    pub fn waves(&self) -> Vec<Wave<'_>> {
        self.start_waves
            .iter()
            .map(|wave| Wave {
                migrations: wave
                    .iter()
                    .filter_map(|service| {
                        let name = names::migration_job(service);
                        self.migrations
                            .iter()
                            .find(|j| j.metadata.name.as_deref() == Some(name.as_str()))
                    })
                    .collect(),
                deployments: wave
                    .iter()
                    .filter_map(|service| {
                        self.deployments
                            .iter()
                            .find(|d| d.metadata.name.as_ref() == Some(service))
                    })
                    .collect(),
            })
            .collect()
    }

    /// In the order they are applied: namespace → policies → every Service, the sidecar's first
    /// (its ClusterIP is every pod's resolver; with netlock, their ClusterIPs are the only
    /// addresses a pod may send to) → the sidecar → probe → each start wave's migrations and
    /// Deployments → ingresses.
    pub fn in_apply_order(&self) -> Vec<Object> {
        let mut objects = vec![Object::Namespace(self.namespace.clone())];
        objects.extend(self.policies.iter().cloned().map(Object::NetworkPolicy));
        objects.push(Object::Service(self.sidecar_service.clone()));
        objects.extend(self.services.iter().cloned().map(Object::Service));
        objects.push(Object::Secret(self.sidecar_config.clone()));
        objects.push(Object::Deployment(self.sidecar.clone()));
        objects.push(Object::Pod(self.probe.clone()));
        objects.extend(self.service_env.iter().cloned().map(Object::Secret));
        objects.extend(self.capture_trust.iter().cloned().map(Object::ConfigMap));
        for wave in self.waves() {
            objects.extend(wave.migrations.into_iter().cloned().map(Object::Job));
            objects.extend(
                wave.deployments
                    .into_iter()
                    .cloned()
                    .map(Object::Deployment),
            );
        }
        objects.extend(self.ingresses.iter().cloned().map(Object::Ingress));
        objects
    }
}

/// Where a cluster has not yet assigned the services' ClusterIPs (`af render`, the sizes `af up`
/// checks before anything exists): addresses of the benchmarking range 198.18.0.0/15 in the
/// services' name order, one for each service with a port (each of those has a Service).
pub fn stand_in_service_ips(manifest: &Manifest) -> BTreeMap<String, IpAddr> {
    let first = u32::from(std::net::Ipv4Addr::new(198, 18, 0, 1));
    manifest
        .services
        .values()
        .filter(|service| service.port.is_some())
        .zip(0u32..)
        .map(|(service, i)| {
            let ip = std::net::Ipv4Addr::from(first + i);
            (service.name.clone(), IpAddr::V4(ip))
        })
        .collect()
}

/// An object's metadata in the environment's namespace, carrying our labels.
fn meta(input: &RenderInput<'_>, namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(names::ownership(input.env)),
        ..Default::default()
    }
}

/// Renders the whole environment.
pub fn render(input: &RenderInput<'_>) -> Result<Rendered, RenderError> {
    let namespace_name = names::namespace(&input.manifest.runtime.namespace_prefix, input.env);
    let services: Vec<_> = input.manifest.services_in_start_order();
    let config_text = secret::sidecar_config_text(input, &namespace_name)?;
    let mut migrations = Vec::new();
    let mut deployments = Vec::new();
    for service in &services {
        let image = input
            .images
            .get(&service.name)
            .ok_or_else(|| RenderError::NoImage(service.name.clone()))?;
        if let Some(command) = &service.migrate {
            migrations.push(job::migration(
                input,
                &namespace_name,
                service,
                image,
                command,
            ));
        }
        deployments.push(deployment::service(input, &namespace_name, service, image)?);
    }
    Ok(Rendered {
        namespace: namespace::namespace(input, &namespace_name),
        policies: network_policy::all(input, &namespace_name),
        probe: probe_pod::probe(input, &namespace_name),
        sidecar_service: service::sidecar(input, &namespace_name),
        sidecar_config: secret::sidecar_config_secret(input, &namespace_name, &config_text),
        sidecar: deployment::sidecar(input, &namespace_name, &config_text),
        service_env: secret::service_env(input, &namespace_name),
        capture_trust: trust::config_map(input, &namespace_name),
        migrations,
        services: services
            .iter()
            .filter_map(|s| service::service(input, &namespace_name, s))
            .collect(),
        deployments,
        ingresses: services
            .iter()
            .filter_map(|s| ingress::ingress(input, &namespace_name, s))
            .collect(),
        start_waves: input
            .manifest
            .services_in_start_waves()
            .into_iter()
            .map(|wave| wave.into_iter().map(|s| s.name.clone()).collect())
            .collect(),
    })
}

/// Objects as one YAML stream, documents separated by `---`.
pub fn to_yaml(objects: &[Object]) -> Result<String, String> {
    objects
        .iter()
        .map(|object| serde_saphyr::to_string(object).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()
        .map(|documents| documents.join("---\n"))
}
