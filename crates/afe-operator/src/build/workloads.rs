//! The processes (step 3): the configuration ConfigMap, serve's and the workers' Deployments, the
//! API's Service and its Ingress. Serve holds no provider or git credential (seed AFE-293): the
//! workers' `envSecretRefs` reach the workers alone.

use std::collections::BTreeMap;

use afe_config::kinds::SecretRef;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvFromSource, EnvVar, EnvVarSource, HTTPGetAction, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, SecretEnvSource, SecretKeySelector, Service,
    ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{API_PORT, CONFIG_DIR, Inputs, REVISION, Scaling, image_text};

/// The uid afe's processes run as.
const UID: i64 = 10001;

/// The configuration ConfigMap: the validated files, serve's `-c` folder.
pub fn config_map(inputs: &Inputs<'_>) -> ConfigMap {
    let mut meta = inputs.meta(&inputs.named("config"), "config");
    meta.annotations = Some(BTreeMap::from([(
        REVISION.to_string(),
        inputs.revision.to_string(),
    )]));
    ConfigMap {
        metadata: meta,
        data: Some(inputs.files.clone()),
        ..Default::default()
    }
}

fn from_secret(variable: &str, secret: &SecretRef, default_key: &str) -> EnvVar {
    EnvVar {
        name: variable.to_string(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.name.clone(),
                key: secret
                    .key
                    .clone()
                    .unwrap_or_else(|| default_key.to_string()),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn value(variable: &str, value: &str) -> EnvVar {
    EnvVar {
        name: variable.to_string(),
        value: Some(value.to_string()),
        ..Default::default()
    }
}

/// Where both processes find the store, the broker and the tracer: by reference only.
fn data_env(inputs: &Inputs<'_>) -> Vec<EnvVar> {
    let afe = &inputs.engine.spec.afe;
    let mut env = Vec::new();
    match (&afe.store.external, &afe.store.managed) {
        (Some(external), _) => env.push(from_secret("AFE_STORE_URL", &external.secret_ref, "uri")),
        (None, _) => env.push(from_secret(
            "AFE_STORE_URL",
            &SecretRef {
                // CloudNativePG writes the application user's connection string here.
                name: format!("{}-app", inputs.named("store")),
                key: Some("uri".to_string()),
            },
            "uri",
        )),
    }
    match (&afe.broker.external, &afe.broker.managed) {
        (Some(external), _) => env.push(from_secret("AFE_BROKER_URL", &external.secret_ref, "uri")),
        (None, _) => env.push(value(
            "AFE_BROKER_URL",
            &format!("redis://{}:6379/", inputs.named("redis")),
        )),
    }
    if let Some(tracer) = &afe.tracer {
        env.push(value("AFE_OTLP_ENDPOINT", &tracer.otlp.endpoint));
        if let Some(headers) = &tracer.otlp.headers_secret_ref {
            env.push(from_secret("AFE_OTLP_HEADERS", headers, "headers"));
            env.push(value("AFE_OTLP_HEADERS_ENV", "AFE_OTLP_HEADERS"));
        }
    }
    env
}

fn scratch() -> (Volume, VolumeMount) {
    (
        Volume {
            name: "tmp".to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".to_string(),
            mount_path: "/tmp".to_string(),
            ..Default::default()
        },
    )
}

/// A Deployment of `component` around `container`, its Pods carrying the revision.
fn deployment(
    inputs: &Inputs<'_>,
    component: &str,
    replicas: Option<i32>,
    mut container: Container,
    mut volumes: Vec<Volume>,
    service_account: Option<&str>,
) -> Deployment {
    let (tmp, tmp_mount) = scratch();
    volumes.push(tmp);
    container
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(tmp_mount);
    container.security_context = Some(super::restricted(UID));
    container.image = Some(inputs.image());
    container.image_pull_policy = Some("IfNotPresent".to_string());
    Deployment {
        metadata: inputs.meta(&inputs.named(component), component),
        spec: Some(DeploymentSpec {
            replicas,
            selector: LabelSelector {
                match_labels: Some(inputs.selector(component)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    labels: Some(inputs.labels(component)),
                    annotations: Some(BTreeMap::from([(
                        REVISION.to_string(),
                        inputs.revision.to_string(),
                    )])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: service_account.map(str::to_string),
                    automount_service_account_token: Some(service_account.is_some()),
                    enable_service_links: Some(false),
                    security_context: Some(PodSecurityContext {
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_string(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn probe(path: &str) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::Int(API_PORT),
            ..Default::default()
        }),
        period_seconds: Some(5),
        ..Default::default()
    }
}

/// Serve: the API and the UI, the configuration folder it publishes revisions from, the store and
/// the broker; the API token by reference; none of the workers' secrets.
pub fn serve(inputs: &Inputs<'_>) -> Deployment {
    let api = inputs
        .engine
        .spec
        .deployment
        .as_ref()
        .and_then(|d| d.api.as_ref());
    let mut env = data_env(inputs);
    if let Some(token) = api.and_then(|a| a.api_token_secret_ref.as_ref()) {
        env.push(from_secret("AFE_API_TOKEN", token, "AFE_API_TOKEN"));
    }
    let container = Container {
        name: "serve".to_string(),
        args: Some(
            [
                "serve",
                "-c",
                CONFIG_DIR,
                "--ui",
                "--listen",
                &format!("0.0.0.0:{API_PORT}"),
            ]
            .map(str::to_string)
            .to_vec(),
        ),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("http".to_string()),
            container_port: API_PORT,
            ..Default::default()
        }]),
        readiness_probe: Some(probe("/readyz")),
        liveness_probe: Some(probe("/healthz")),
        volume_mounts: Some(vec![VolumeMount {
            name: "config".to_string(),
            mount_path: CONFIG_DIR.to_string(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let config = Volume {
        name: "config".to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: inputs.named("config"),
            ..Default::default()
        }),
        ..Default::default()
    };
    let replicas = api.and_then(|a| a.replicas).unwrap_or(1) as i32;
    deployment(
        inputs,
        "serve",
        Some(replicas),
        container,
        vec![config],
        None,
    )
}

/// The workers: the store, the broker, the sandbox's settings, and the secrets the resource
/// names for them (model keys, the git token) — by reference. Their replicas are not written
/// when KEDA scales them; without KEDA, autoscaled workers run at `maxReplicas`.
pub fn worker(inputs: &Inputs<'_>) -> Deployment {
    let afe = &inputs.engine.spec.afe;
    let workers = inputs
        .engine
        .spec
        .deployment
        .as_ref()
        .and_then(|d| d.workers.as_ref());
    let mut env = data_env(inputs);
    env.push(value("HOME", "/tmp"));
    let mut env_from = Vec::new();
    for secret in workers
        .map(|w| w.env_secret_refs.as_slice())
        .unwrap_or_default()
    {
        match &secret.key {
            Some(key) => env.push(from_secret(key, secret, key)),
            None => env_from.push(EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: secret.name.clone(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
        }
    }
    let sandbox = &afe.sandbox;
    let engine_image = sandbox
        .engine_image
        .as_ref()
        .map_or_else(|| inputs.image(), image_text);
    let mut args: Vec<String> = [
        "worker",
        "--sandbox-platform",
        "kubernetes",
        "--sandbox-namespace",
        &sandbox.namespace,
        "--engine-image",
        &engine_image,
    ]
    .map(str::to_string)
    .to_vec();
    if let Some(concurrency) = workers.and_then(|w| w.concurrency) {
        args.extend(["--concurrency".to_string(), concurrency.to_string()]);
    }
    for (flag, given) in [
        ("--sandbox-storage", &sandbox.storage),
        ("--sandbox-runtime-class", &sandbox.runtime_class_name),
        ("--sandbox-env-secret", &sandbox.env_secret),
    ] {
        if let Some(given) = given {
            args.extend([flag.to_string(), given.clone()]);
        }
    }
    let container = Container {
        name: "worker".to_string(),
        args: Some(args),
        env: Some(env),
        env_from: Some(env_from).filter(|e| !e.is_empty()),
        ..Default::default()
    };
    let replicas = match super::scaling(inputs.engine, inputs.keda) {
        Scaling::Keda(_) => None,
        Scaling::KedaAbsent(autoscaling) | Scaling::NoTriggerAuthentication(autoscaling) => {
            Some(autoscaling.max_replicas as i32)
        }
        Scaling::Fixed(replicas) => Some(replicas as i32),
    };
    deployment(
        inputs,
        "worker",
        replicas,
        container,
        Vec::new(),
        Some("afe-worker"),
    )
}

/// The API's Service: port 80 to serve's 8080.
pub fn api_service(inputs: &Inputs<'_>) -> Service {
    Service {
        metadata: inputs.meta(&inputs.named("api"), "serve"),
        spec: Some(ServiceSpec {
            selector: Some(inputs.selector("serve")),
            ports: Some(vec![ServicePort {
                name: Some("http".to_string()),
                port: 80,
                target_port: Some(IntOrString::Int(API_PORT)),
                protocol: Some("TCP".to_string()),
                ..Default::default()
            }]),
            type_: Some("ClusterIP".to_string()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Ingress, when the resource asks for one: the API and the UI (and their WebSockets) on its
/// host.
pub fn ingress(inputs: &Inputs<'_>) -> Option<Ingress> {
    let wanted = inputs.engine.spec.deployment.as_ref()?.ingress.as_ref()?;
    Some(Ingress {
        metadata: inputs.meta(&inputs.named("api"), "serve"),
        spec: Some(IngressSpec {
            ingress_class_name: wanted.class_name.clone(),
            rules: Some(vec![IngressRule {
                host: Some(wanted.host.clone()),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".to_string()),
                        path_type: "Prefix".to_string(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: inputs.named("api"),
                                port: Some(ServiceBackendPort {
                                    number: Some(80),
                                    ..Default::default()
                                }),
                            }),
                            ..Default::default()
                        },
                    }],
                }),
            }]),
            tls: Some(
                wanted
                    .tls
                    .iter()
                    .map(|tls| IngressTLS {
                        secret_name: Some(tls.secret_name.clone()),
                        hosts: Some(if tls.hosts.is_empty() {
                            vec![wanted.host.clone()]
                        } else {
                            tls.hosts.clone()
                        }),
                    })
                    .collect(),
            )
            .filter(|tls: &Vec<IngressTLS>| !tls.is_empty()),
            ..Default::default()
        }),
        ..Default::default()
    })
}
