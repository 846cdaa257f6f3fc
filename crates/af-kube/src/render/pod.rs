//! The pod rules every customer pod gets (services, migrations, and the probe that stands in for
//! them): no service account token; names resolved by the sidecar and nothing else; the startup
//! gate first; no added capability, no privilege escalation, the runtime's default seccomp.

use std::collections::BTreeMap;

use af_manifest::{EnvValue, Service};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, PodDNSConfig,
    PodDNSConfigOption, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements,
    SeccompProfile, SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{NETLOCK, SERVICE_ENV};
use super::{RenderInput, ports};

/// The uid the engine image runs as.
pub const ENGINE_UID: i64 = 1337;

/// What an engine step (gate, probe, binary copy) may use: small, and the same figure requested as
/// allowed, like every size af sets.
pub fn engine_step_resources() -> ResourceRequirements {
    fixed_resources("100m", "64Mi")
}

/// Requests equal to limits, for the engine's own containers.
pub fn fixed_resources(cpu: &str, memory: &str) -> ResourceRequirements {
    let figures = BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.to_string())),
        ("memory".to_string(), Quantity(memory.to_string())),
    ]);
    ResourceRequirements {
        limits: Some(figures.clone()),
        requests: Some(figures),
        ..Default::default()
    }
}

/// A container of the engine image: non-root, read-only, nothing added, everything dropped.
pub fn engine_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Default::default()
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(ENGINE_UID),
        run_as_group: Some(ENGINE_UID),
        ..Default::default()
    }
}

/// A customer container: whatever user its image says, but no privilege escalation and no
/// capability at all.
pub fn workload_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The pod-level rules: the runtime's default seccomp profile.
pub fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Resolution through the sidecar only: `dnsPolicy: None`, its ClusterIP as the one nameserver,
/// the namespace's search path.
pub fn dns_config(input: &RenderInput<'_>, namespace: &str) -> PodDNSConfig {
    let domain = &input.cluster.domain;
    PodDNSConfig {
        nameservers: Some(vec![input.sidecar_ip.to_string()]),
        searches: Some(vec![
            format!("{namespace}.svc.{domain}"),
            format!("svc.{domain}"),
            domain.clone(),
        ]),
        options: Some(vec![PodDNSConfigOption {
            name: Some("ndots".to_string()),
            value: Some("5".to_string()),
        }]),
    }
}

/// Where the gate and the probe ask for the sidecar first (their positive check): its Service's
/// proxy and DNS ports.
pub fn sidecar_check_args(input: &RenderInput<'_>) -> Vec<String> {
    let sidecar = input.sidecar_ip;
    vec![
        "--sidecar-proxy".to_string(),
        format!("{sidecar}:{}", ports::PROXY),
        "--sidecar-dns".to_string(),
        format!("{sidecar}:{}", ports::DNS),
    ]
}

/// Where iptables' legacy backend (an `AF_PROXY_IMAGE` may carry it) takes its lock file: the
/// root filesystem is read-only.
const NETLOCK_RUN: &str = "/run";

/// The netlock step (`runtime.netlock`), the first init container of every customer pod and the
/// probe's: every packet out of the pod dropped but to loopback, replies, and the environment's
/// own Service addresses — the sidecar's and each service's ClusterIP, never a range (the
/// service range holds the API server's address). Root with NET_ADMIN and nothing else, once,
/// before anything else in the pod runs; the capability does not outlive the step.
pub fn netlock(input: &RenderInput<'_>) -> Option<Container> {
    if !input.manifest.runtime.netlock {
        return None;
    }
    let mut args = vec!["netlock".to_string()];
    let mut allowed = vec![input.sidecar_ip];
    allowed.extend(input.service_ips.values().copied());
    for address in allowed {
        args.push("--only-to".to_string());
        args.push(address.to_string());
    }
    Some(Container {
        name: NETLOCK.to_string(),
        image: Some(input.engine_image.to_string()),
        args: Some(args),
        resources: Some(engine_step_resources()),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".to_string()]),
                drop: Some(vec!["ALL".to_string()]),
            }),
            read_only_root_filesystem: Some(true),
            // iptables programs the pod's network namespace as root: NET_ADMIN alone, as a
            // non-root user, is not kept across exec without ambient capabilities.
            run_as_non_root: Some(false),
            run_as_user: Some(0),
            run_as_group: Some(0),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: NETLOCK.to_string(),
            mount_path: NETLOCK_RUN.to_string(),
            ..Default::default()
        }]),
        ..Default::default()
    })
}

/// The netlock step's scratch volume (see [`netlock`]).
pub fn netlock_volume() -> Volume {
    Volume {
        name: NETLOCK.to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// Puts the netlock step first in `spec` when the manifest asks for it, with its volume.
pub fn lock_first(input: &RenderInput<'_>, spec: &mut PodSpec) {
    if let Some(step) = netlock(input) {
        spec.init_containers
            .get_or_insert_with(Vec::new)
            .insert(0, step);
        spec.volumes
            .get_or_insert_with(Vec::new)
            .push(netlock_volume());
    }
}

/// The startup gate: first init container of every customer pod, from the engine image.
pub fn gate(input: &RenderInput<'_>) -> Container {
    let mut args = vec!["gate".to_string()];
    args.extend(sidecar_check_args(input));
    args.extend(input.probe_targets.iter().cloned());
    Container {
        name: "af-gate".to_string(),
        image: Some(input.engine_image.to_string()),
        args: Some(args),
        resources: Some(engine_step_resources()),
        security_context: Some(engine_security()),
        ..Default::default()
    }
}

/// A pod spec under the customer rules, around `containers` (the netlock step, when asked for,
/// then the gate go first among the init containers).
pub fn workload_spec(
    input: &RenderInput<'_>,
    namespace: &str,
    mut init: Vec<Container>,
    containers: Vec<Container>,
) -> PodSpec {
    init.insert(0, gate(input));
    let mut spec = PodSpec {
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        dns_policy: Some("None".to_string()),
        dns_config: Some(dns_config(input, namespace)),
        init_containers: Some(init),
        containers,
        security_context: Some(pod_security()),
        ..Default::default()
    };
    super::trust::mount_in(input, &mut spec);
    lock_first(input, &mut spec);
    spec
}

/// A pod template: `labels` on the pods, `spec` their spec.
pub fn template(labels: BTreeMap<String, String>, spec: PodSpec) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            ..Default::default()
        }),
        spec: Some(spec),
    }
}

/// Requests and limits: the same figure for each dimension the manifest names; a dimension it
/// does not name is in neither map; nothing named, no requirements at all.
pub fn resources(service: &Service) -> Option<ResourceRequirements> {
    let mut figures = BTreeMap::new();
    if let Some(cpu) = &service.resources.cpu {
        figures.insert("cpu".to_string(), Quantity(cpu.canonical()));
    }
    if let Some(memory) = &service.resources.memory {
        figures.insert("memory".to_string(), Quantity(memory.canonical()));
    }
    (!figures.is_empty()).then(|| ResourceRequirements {
        limits: Some(figures.clone()),
        requests: Some(figures),
        ..Default::default()
    })
}

/// A service's environment: its own variables (a `from_env` one read from the environment's
/// Secret, filled from af's environment when applied), then the proxy settings, which always
/// point at the sidecar.
pub fn environment(input: &RenderInput<'_>, service: &Service) -> Vec<EnvVar> {
    let mut out: Vec<EnvVar> = service
        .env
        .iter()
        .filter(|(name, _)| !af_runtime::PROXY_VARIABLES.contains(&name.as_str()))
        .map(|(name, value)| match value {
            EnvValue::Literal(text) => EnvVar {
                name: name.clone(),
                value: Some(text.clone()),
                ..Default::default()
            },
            EnvValue::FromEnv(source) => EnvVar {
                name: name.clone(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: SERVICE_ENV.to_string(),
                        key: source.clone(),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        })
        .collect();
    let proxy = format!("http://{}:{}", input.sidecar_ip, ports::PROXY);
    let no_proxy = af_runtime::no_proxy(input.manifest.services.keys().map(String::as_str));
    for (name, value) in [
        ("HTTP_PROXY", &proxy),
        ("HTTPS_PROXY", &proxy),
        ("http_proxy", &proxy),
        ("https_proxy", &proxy),
        ("NO_PROXY", &no_proxy),
        ("no_proxy", &no_proxy),
    ] {
        out.push(EnvVar {
            name: name.to_string(),
            value: Some(value.clone()),
            ..Default::default()
        });
    }
    out.extend(super::trust::variables(input, service));
    out
}
