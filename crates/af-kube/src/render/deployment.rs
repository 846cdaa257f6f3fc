//! Deployments: one per manifest service (cron services too, as plain Deployments whose container
//! runs the engine's scheduler around the service's command), and the sidecar's — exactly one
//! replica whatever anything asks: it is the environment's only resolver and only route out, and
//! a second one would split the record of what was refused across two decision logs.

use af_manifest::Service;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction, PodSpec, Probe,
    SecretVolumeSource, Sysctl, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::names::{SIDECAR, SIDECAR_CONFIG, WEB_LABEL, pod_labels, pod_selector};
use super::pod::{
    engine_security, engine_step_resources, environment, fixed_resources, pod_security, resources,
    workload_security, workload_spec,
};
use super::secret::CONFIG_KEY;
use super::service::sidecar_ports;
use super::{RenderError, RenderInput};

/// Where a cron service's pod gets the engine's binary (copied by an init container).
const ENGINE_MOUNT: &str = "/af";

fn readiness(service: &Service) -> Option<Probe> {
    let port = IntOrString::Int(i32::from(service.port?));
    Some(Probe {
        tcp_socket: service.health_path.is_none().then(|| TCPSocketAction {
            port: port.clone(),
            ..Default::default()
        }),
        http_get: service.health_path.as_ref().map(|path| HTTPGetAction {
            path: Some(path.clone()),
            port,
            ..Default::default()
        }),
        period_seconds: Some(2),
        ..Default::default()
    })
}

fn engine_volume() -> Volume {
    Volume {
        name: "af-engine".to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

fn engine_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: "af-engine".to_string(),
        mount_path: ENGINE_MOUNT.to_string(),
        // `readOnly: false` is not written: the API server keeps no false there (it is the
        // field's zero value), so the Deployment would never read back as applied and every `up`
        // would write it again.
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// A manifest service's Deployment.
pub fn service(
    input: &RenderInput<'_>,
    namespace: &str,
    service: &Service,
    image: &str,
) -> Result<Deployment, RenderError> {
    let mut labels = pod_labels(input.env, "service", Some(&service.name), true);
    if service.web {
        labels.insert(WEB_LABEL.to_string(), "true".to_string());
    }
    let mut app = Container {
        name: service.name.clone(),
        image: Some(image.to_string()),
        command: service.command.clone(),
        args: service.args.clone(),
        env: Some(environment(input, service)),
        ports: service.port.map(|port| {
            vec![ContainerPort {
                container_port: i32::from(port),
                protocol: Some("TCP".to_string()),
                ..Default::default()
            }]
        }),
        readiness_probe: readiness(service),
        resources: resources(service),
        security_context: Some(workload_security()),
        ..Default::default()
    };
    let mut init = Vec::new();
    let mut volumes = Vec::new();
    if let Some(schedule) = &service.cron {
        // The image does not carry a scheduler: the engine's binary is copied in, and runs the
        // service's command on the schedule.
        let mut command: Vec<String> = service.command.clone().unwrap_or_default();
        command.extend(service.args.clone().unwrap_or_default());
        if command.is_empty() {
            command = input
                .image_commands
                .get(&service.name)
                .cloned()
                .ok_or_else(|| RenderError::CronCommandUnknown(service.name.clone()))?;
        }
        let mut wrapped = vec![
            format!("{ENGINE_MOUNT}/af-proxy"),
            "cron".to_string(),
            "--schedule".to_string(),
            schedule.as_str().to_string(),
            "--".to_string(),
        ];
        wrapped.extend(command);
        app.command = Some(wrapped);
        app.args = None;
        app.volume_mounts = Some(vec![engine_mount(true)]);
        init.push(Container {
            name: "af-install".to_string(),
            image: Some(input.engine_image.to_string()),
            args: Some(vec![
                "install".to_string(),
                "--to".to_string(),
                format!("{ENGINE_MOUNT}/af-proxy"),
            ]),
            volume_mounts: Some(vec![engine_mount(false)]),
            resources: Some(engine_step_resources()),
            security_context: Some(engine_security()),
            ..Default::default()
        });
        volumes.push(engine_volume());
    }
    let mut spec = workload_spec(input, namespace, init, vec![app]);
    if !volumes.is_empty() {
        spec.volumes.get_or_insert_with(Vec::new).extend(volumes);
    }
    Ok(deployment(
        input,
        namespace,
        (&service.name, "service", Some(&service.name)),
        i32::try_from(service.replicas).unwrap_or(i32::MAX),
        None,
        labels,
        spec,
    ))
}

/// A Deployment of `name` whose pods (`role`, `service`) carry `pod_labels` and run `spec`.
fn deployment(
    input: &RenderInput<'_>,
    namespace: &str,
    (name, role, service): (&str, &str, Option<&str>),
    replicas: i32,
    strategy: Option<DeploymentStrategy>,
    pod_labels: std::collections::BTreeMap<String, String>,
    spec: PodSpec,
) -> Deployment {
    Deployment {
        metadata: super::meta(input, namespace, name),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            strategy,
            selector: LabelSelector {
                match_labels: Some(pod_selector(role, service)),
                ..Default::default()
            },
            template: super::pod::template(pod_labels, spec),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The sidecar's Deployment.
pub fn sidecar(input: &RenderInput<'_>, namespace: &str, config_text: &str) -> Deployment {
    let mut security = pod_security();
    // The engine runs as 1337; its listeners are on 53, 80, 443 and 25. A namespaced, safe sysctl
    // lets it bind them without adding a capability.
    security.sysctls = Some(vec![Sysctl {
        name: "net.ipv4.ip_unprivileged_port_start".to_string(),
        value: "0".to_string(),
    }]);
    let container = Container {
        name: "af-proxy".to_string(),
        image: Some(input.engine_image.to_string()),
        args: Some(vec![
            "serve".to_string(),
            "--config".to_string(),
            format!("/etc/af/{CONFIG_KEY}"),
        ]),
        ports: Some(
            sidecar_ports()
                .into_iter()
                .map(|port| ContainerPort {
                    container_port: port.port,
                    protocol: port.protocol,
                    ..Default::default()
                })
                .collect(),
        ),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(i32::from(super::ports::PROXY)),
                ..Default::default()
            }),
            period_seconds: Some(2),
            ..Default::default()
        }),
        // Measured peak memory is about 20 MiB (docs/performance.md). Half a core: a throttled
        // sidecar slows every request of the environment, and a whole core per environment would
        // crowd a small cluster.
        resources: Some(fixed_resources("500m", "256Mi")),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "config".to_string(),
                mount_path: "/etc/af".to_string(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: "log".to_string(),
                mount_path: "/var/log/af".to_string(),
                ..Default::default()
            },
        ]),
        security_context: Some(engine_security()),
        ..Default::default()
    };
    let mut sidecar = deployment(
        input,
        namespace,
        (SIDECAR, "sidecar", None),
        1,
        // Never two at once, even during a change.
        Some(DeploymentStrategy {
            type_: Some("Recreate".to_string()),
            ..Default::default()
        }),
        pod_labels(input.env, "sidecar", None, false),
        PodSpec {
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(security),
            containers: vec![container],
            volumes: Some(vec![
                Volume {
                    name: "config".to_string(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(SIDECAR_CONFIG.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "log".to_string(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        },
    );
    // The sidecar reads its configuration once, at start: a changed one (a new policy, the capture
    // CA) must replace the pod, which a changed pod template does. The same configuration, the
    // same digest: a second `up` changes nothing.
    if let Some(template) = sidecar
        .spec
        .as_mut()
        .and_then(|spec| spec.template.metadata.as_mut())
    {
        template.annotations = Some(std::collections::BTreeMap::from([(
            CONFIG_DIGEST_ANNOTATION.to_string(),
            config_digest(config_text),
        )]));
    }
    sidecar
}

/// On the sidecar's pods: the digest of the configuration they were started with.
pub const CONFIG_DIGEST_ANNOTATION: &str = "dev.antifailure.config-digest";

fn config_digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}
