//! The create body of every kind of container af makes, as data: one pure function per kind. The
//! runtime sends exactly these (through `one_shot::create` and friends); the environment's whole
//! plan ([`super::plan`]) is assembled from them, so its golden files and its guarantee tests
//! check what the daemon is asked for.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use af_manifest::{EnvironmentId, Service};
use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, NetworkingConfig,
    PortBinding,
};

use super::hardening::{confined, confined_read_only};
use crate::names;
use crate::plan::service::Placement;

/// af's labels for `role` of `env`, with the specification digest when there is one.
pub(crate) fn labels_with_spec(
    env: &EnvironmentId,
    role: &str,
    spec: Option<&str>,
) -> HashMap<String, String> {
    let mut labels = names::labels(env, role);
    if let Some(spec) = spec {
        labels.insert(names::SPEC_LABEL.to_string(), spec.to_string());
    }
    labels
}

/// The holder of a pod's network namespace.
#[derive(Clone, Copy, Debug)]
pub struct Holder<'a> {
    pub env: &'a EnvironmentId,
    pub role: &'a str,
    pub engine_image: &'a str,
    /// The network it is on: the services' network, for a service's or the probe's pod.
    pub network: &'a str,
    /// The resolver its pod uses: the sidecar, for a service's pod.
    pub dns: Option<Ipv4Addr>,
    /// The name the pod is reachable by on `network` (the service's name).
    pub alias: Option<&'a str>,
    pub spec: Option<&'a str>,
}

/// A holder: the engine's `hold`, as root with NET_ADMIN and nothing else (its one trusted step,
/// the refusal rules, is an `exec` as root; `hold` itself gives the capability up at start),
/// read-only, no new privileges. Other containers join it with `container:<name>`.
pub fn holder(holder: Holder<'_>) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(holder.engine_image.to_string()),
        cmd: Some(vec!["hold".to_string()]),
        user: Some(HOLDER_ROOT.to_string()),
        labels: Some(labels_with_spec(holder.env, holder.role, holder.spec)),
        host_config: Some(HostConfig {
            cap_add: Some(vec!["NET_ADMIN".to_string()]),
            dns: holder.dns.map(|ip| vec![ip.to_string()]),
            ..confined_read_only(holder.network)
        }),
        networking_config: holder.alias.map(|alias| NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                holder.network.to_string(),
                EndpointSettings {
                    aliases: Some(vec![alias.to_string()]),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    }
}

/// The holder of a service's pod (an instance's, or its migration's): on the services' network,
/// resolving through the sidecar, reachable as `alias` (the service's name) when given.
pub fn pod_holder(
    at: Placement<'_>,
    role: &str,
    alias: Option<&str>,
    spec: &str,
) -> ContainerCreateBody {
    holder(Holder {
        env: at.env,
        role,
        engine_image: at.engine_image,
        network: at.internal,
        dns: Some(at.sidecar_ip),
        alias,
        spec: Some(spec),
    })
}

/// An application container: instance `index` of `service`.
#[derive(Clone, Debug)]
pub struct Application<'a> {
    pub at: Placement<'a>,
    pub service: &'a Service,
    pub image: &'a str,
    pub index: u32,
    /// `container:<holder>`: the pod's namespace, whose refusal rules and gate came first.
    pub joined: String,
    pub spec: &'a str,
    /// `NAME=value`, the proxy settings and trust variables included.
    pub environment: Vec<String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// The engine volume, for a scheduled service (its scheduler is the engine's).
    pub engine_volume: Option<&'a str>,
}

/// The application's container: its image as the image's own user, in its pod's namespace, with
/// no capability and no new privileges, the manifest's CPU and memory as limits, and nothing
/// mounted but the engine volume (read-only, a scheduled service) and the capture CA's files
/// (read-only).
pub fn application(app: Application<'_>) -> ContainerCreateBody {
    let (_, app_role) = crate::plan::service::roles(&app.service.name, app.index);
    let resources = &app.service.resources;
    let mut host_config = HostConfig {
        nano_cpus: resources
            .cpu
            .as_ref()
            .map(|q| i64::try_from(q.milli_value() * 1_000_000).unwrap_or(i64::MAX)),
        memory: resources
            .memory
            .as_ref()
            .map(|q| i64::try_from(q.value_rounded_up()).unwrap_or(i64::MAX)),
        ..confined(&app.joined)
    };
    if let Some(volume) = app.engine_volume {
        crate::plan::schedule::mount(volume, &mut host_config);
    }
    if let Some(ca) = app.at.capture_ca {
        ca.mount(&mut host_config);
    }
    let mut labels = labels_with_spec(app.at.env, &app_role, Some(app.spec));
    labels.insert(names::SERVICE_LABEL.to_string(), app.service.name.clone());
    labels.insert(names::INSTANCE_LABEL.to_string(), app.index.to_string());
    labels.insert(
        names::REPLICAS_LABEL.to_string(),
        app.service.replicas.to_string(),
    );
    ContainerCreateBody {
        image: Some(app.image.to_string()),
        entrypoint: app.entrypoint,
        cmd: app.cmd,
        env: Some(app.environment),
        labels: Some(labels),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// The sidecar's container: the engine's `serve` with its configuration in
/// `AF_PROXY_CONFIG_TEXT`, on the services' network at its fixed address (it is attached to the
/// egress network after creation), read-only but for its log's memory-backed scratch space.
pub fn sidecar(
    env: &EnvironmentId,
    engine_image: &str,
    internal: &str,
    internal_ip: Ipv4Addr,
    config_text: &str,
    spec: &str,
) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(engine_image.to_string()),
        cmd: Some(vec!["serve".to_string()]),
        env: Some(vec![format!(
            "{}{config_text}",
            crate::plan::sidecar::CONFIG_VARIABLE
        )]),
        labels: Some(labels_with_spec(env, "sidecar", Some(spec))),
        host_config: Some(HostConfig {
            // The log's ring lives in memory-backed scratch space; the root stays read-only.
            tmpfs: Some(HashMap::from([(
                "/var/log/af".to_string(),
                "size=64m,uid=1337,gid=1337".to_string(),
            )])),
            // Ports 25, 53, 80 and 443 without a capability.
            sysctls: Some(HashMap::from([(
                "net.ipv4.ip_unprivileged_port_start".to_string(),
                "0".to_string(),
            )])),
            ..confined_read_only(internal)
        }),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                internal.to_string(),
                EndpointSettings {
                    ipam_config: Some(EndpointIpamConfig {
                        ipv4_address: Some(internal_ip.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    }
}

/// A web service's ingress: the engine's `relay` from a port published on the machine's loopback
/// only to the service's instances. On the egress network (attached to the services' network after
/// creation): a preview for this machine, not a service for the network.
pub fn ingress(
    env: &EnvironmentId,
    service: &str,
    engine_image: &str,
    egress: &str,
    port: u16,
    targets: &[String],
    spec: &str,
) -> ContainerCreateBody {
    let mut args = vec![
        "relay".to_string(),
        "--listen".to_string(),
        format!("0.0.0.0:{port}"),
    ];
    for target in targets {
        args.extend(["--to".to_string(), target.clone()]);
    }
    let exposed = format!("{port}/tcp");
    let role = crate::plan::ingress::role(service);
    let mut labels = labels_with_spec(env, &role, Some(spec));
    labels.insert(names::INGRESS_LABEL.to_string(), service.to_string());
    ContainerCreateBody {
        image: Some(engine_image.to_string()),
        cmd: Some(args),
        exposed_ports: Some(vec![exposed.clone()]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            port_bindings: Some(HashMap::from([(
                exposed,
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(String::new()),
                }]),
            )])),
            ..confined_read_only(egress)
        }),
        ..Default::default()
    }
}

/// A container that runs once to completion (a migration, the engine volume's filling): as the
/// image's user (or `spec.user`) with no capability, read-only, on `spec.network_mode` only.
pub fn one_shot(env: &EnvironmentId, spec: &OneShot) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        entrypoint: spec.entrypoint.clone(),
        cmd: (!spec.args.is_empty() || spec.entrypoint.is_none()).then(|| spec.args.clone()),
        env: (!spec.env.is_empty()).then(|| spec.env.clone()),
        labels: Some(names::labels(env, &spec.role)),
        user: spec.user.clone(),
        host_config: Some(HostConfig {
            binds: (!spec.binds.is_empty()).then(|| spec.binds.clone()),
            ..confined_read_only(&spec.network_mode)
        }),
        ..Default::default()
    }
}

/// A container that is created and never started, on no network: a place for labels (the probe's
/// verdict) or for the daemon to extract files into `binds` (the capture CA's volume).
pub fn inert(
    engine_image: &str,
    labels: HashMap<String, String>,
    binds: Vec<String>,
) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(engine_image.to_string()),
        labels: Some(labels),
        host_config: Some(HostConfig {
            binds: (!binds.is_empty()).then_some(binds),
            ..confined_read_only("none")
        }),
        ..Default::default()
    }
}

/// A one-shot container's definition.
#[derive(Debug, Clone, Default)]
pub struct OneShot {
    pub role: String,
    pub image: String,
    pub args: Vec<String>,
    /// `network` name, or `container:<id>` to join another container's network namespace.
    pub network_mode: String,
    /// Replaces the image's entrypoint (a workload's migration command).
    pub entrypoint: Option<Vec<String>>,
    /// `NAME=value` variables.
    pub env: Vec<String>,
    /// Run as this user instead of the image's (the NET_ADMIN step runs as root regardless).
    pub user: Option<String>,
    /// `volume:path[:ro]` mounts.
    pub binds: Vec<String>,
}

/// The holder's container runs as root, so that its one trusted step — the refusal rules, an
/// `exec` as root (`one_shot::apply_refusal`) — has NET_ADMIN; NET_ADMIN is the only capability it has,
/// and its own process (`hold`) gives it up at start. Everything else runs in it as
/// [`UNPRIVILEGED`] with no capability (Docker clears them for a non-root `exec`).
pub const HOLDER_ROOT: &str = "0";

/// The engine image's unprivileged user, as the probe and the gates run in a holder.
pub const UNPRIVILEGED: &str = "1337:1337";
