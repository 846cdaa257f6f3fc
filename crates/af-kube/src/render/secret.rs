//! Secrets: the sidecar's configuration (its policy and control token; `af-proxy serve` reads it
//! from the mounted Secret and serves nothing if it cannot), and the values services take from
//! af's environment (`from_env`), which are filled when applied and never rendered.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use af_manifest::EnvValue;
use af_sidecar_api::SidecarConfig;
use af_sidecar_api::config::{ControlConfig, DnsConfig, Listeners, TlsCaptureConfig};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{SERVICE_ENV, SIDECAR_CONFIG, ownership};
use super::{RenderError, RenderInput, ports};

/// The key the sidecar's configuration is kept under, and the file name it is mounted as.
pub const CONFIG_KEY: &str = "config.yaml";
/// Lists the keys a [`SERVICE_ENV`] Secret gets when applied.
pub const FILLED_FROM_ANNOTATION: &str = "dev.antifailure.filled-from";

/// The sidecar's configuration: every listener on all of the pod's addresses, outside names
/// resolved to the sidecar Service's ClusterIP, the environment's own names (its services, and
/// anything in its namespace) forwarded to the cluster's resolver, webhooks to each service at
/// its Service's full name. The control API listens on the pod's loopback only: it is reached
/// through a port-forward to this pod, never from another pod.
pub fn sidecar_config(input: &RenderInput<'_>, namespace: &str) -> SidecarConfig {
    let any = |port: u16| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    let mut config = SidecarConfig::new(
        input.env.as_str(),
        Listeners {
            proxy: Some(any(ports::PROXY)),
            http: Some(any(ports::HTTP)),
            tls: Some(any(ports::TLS)),
            dns: Some(any(ports::DNS)),
            smtp: ports::SMTP.into_iter().map(any).collect(),
            smtps: vec![any(ports::SMTPS)],
        },
        ControlConfig::inline(
            SocketAddr::from((Ipv4Addr::LOCALHOST, ports::CONTROL)),
            input.control_token.to_string(),
        ),
    );
    config.policy = input.manifest.egress.clone();
    let (answer_v4, answer_v6) = match input.sidecar_ip {
        IpAddr::V4(ip) => (Some(ip), None),
        IpAddr::V6(ip) => (None, Some(ip)),
    };
    config.dns = Some(DnsConfig {
        internal_names: input.manifest.services.keys().cloned().collect(),
        internal_suffixes: vec![format!("{namespace}.svc.{}", input.cluster.domain)],
        upstream: Some(input.cluster.dns),
        ..DnsConfig::answering(answer_v4, answer_v6)
    });
    // Each service with a port takes webhooks at its Service's full name: the sidecar asks the
    // cluster's resolver itself, with no search path, and a bare name is no name there (a real
    // cluster answered `web` with NXDOMAIN).
    config.webhooks = input
        .manifest
        .services
        .values()
        .filter_map(|s| {
            s.port.map(|port| {
                (
                    s.name.clone(),
                    format!("{}.{namespace}.svc.{}:{port}", s.name, input.cluster.domain),
                )
            })
        })
        .collect();
    config.tls_capture = input
        .capture
        .map(|capture| TlsCaptureConfig::inline(capture.ca));
    config
}

/// The sidecar's configuration file ([`sidecar_config`] as text).
pub fn sidecar_config_text(
    input: &RenderInput<'_>,
    namespace: &str,
) -> Result<String, RenderError> {
    sidecar_config(input, namespace)
        .to_text()
        .map_err(|e| RenderError::Unserializable(e.to_string()))
}

/// The sidecar's configuration Secret, around `text` ([`sidecar_config_text`]).
pub fn sidecar_config_secret(input: &RenderInput<'_>, namespace: &str, text: &str) -> Secret {
    Secret {
        metadata: super::meta(input, namespace, SIDECAR_CONFIG),
        string_data: Some(BTreeMap::from([(CONFIG_KEY.to_string(), text.to_string())])),
        type_: Some("Opaque".to_string()),
        ..Default::default()
    }
}

/// The variables of af's environment the services read (`from_env`), sorted.
pub fn env_sources(input: &RenderInput<'_>) -> Vec<String> {
    let mut sources: Vec<String> = input
        .manifest
        .services
        .values()
        .flat_map(|service| service.env.values())
        .filter_map(|value| match value {
            EnvValue::FromEnv(source) => Some(source.clone()),
            EnvValue::Literal(_) => None,
        })
        .collect();
    sources.sort();
    sources.dedup();
    sources
}

/// The Secret the services' `from_env` variables are read from: rendered without values (its
/// annotation names the keys it gets when applied); none when no service takes any.
pub fn service_env(input: &RenderInput<'_>, namespace: &str) -> Option<Secret> {
    let sources = env_sources(input);
    (!sources.is_empty()).then(|| Secret {
        metadata: ObjectMeta {
            name: Some(SERVICE_ENV.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(ownership(input.env)),
            annotations: Some(BTreeMap::from([(
                FILLED_FROM_ANNOTATION.to_string(),
                sources.join(","),
            )])),
            ..Default::default()
        },
        type_: Some("Opaque".to_string()),
        ..Default::default()
    })
}
