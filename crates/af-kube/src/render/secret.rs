//! Secrets: the sidecar's configuration (its policy and control token; `af-proxy serve` reads it
//! from the mounted Secret and serves nothing if it cannot), and the values services take from
//! af's environment (`from_env`), which are filled when applied and never rendered.

use std::collections::BTreeMap;
use std::net::IpAddr;

use af_manifest::EnvValue;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{SERVICE_ENV, SIDECAR_CONFIG, ownership};
use super::{RenderError, RenderInput, ports};

/// The key the sidecar's configuration is kept under, and the file name it is mounted as.
pub const CONFIG_KEY: &str = "config.yaml";
/// Lists the keys a [`SERVICE_ENV`] Secret gets when applied.
pub const FILLED_FROM_ANNOTATION: &str = "dev.antifailure.filled-from";

/// The sidecar's configuration file.
pub fn sidecar_config_text(
    input: &RenderInput<'_>,
    namespace: &str,
) -> Result<String, RenderError> {
    // Never a stand-in: `{}` would be a policy the manifest did not write.
    let policy = serde_json::to_string(&input.manifest.egress)
        .map_err(|e| RenderError::Unserializable(format!("the egress policy: {e}")))?;
    let answer = match input.sidecar_ip {
        IpAddr::V4(ip) => format!("answer_v4: {ip}"),
        IpAddr::V6(ip) => format!("answer_v6: \"{ip}\""),
    };
    // Each service with a port takes webhooks at its name, which the cluster's resolver knows.
    let webhooks: Vec<String> = input
        .manifest
        .services
        .values()
        .filter_map(|s| s.port.map(|port| format!("{0}: \"{0}:{port}\"", s.name)))
        .collect();
    let internal_names: Vec<String> = input
        .manifest
        .services
        .keys()
        .map(|name| format!("{name:?}"))
        .collect();
    Ok(format!(
        "environment: {env}
policy: {policy}
listen:
  proxy: 0.0.0.0:{proxy}
  http: 0.0.0.0:{http}
  tls: 0.0.0.0:{tls}
  dns: 0.0.0.0:{dns}
  smtp: [0.0.0.0:{smtp0}, 0.0.0.0:{smtp1}]
  smtps: [0.0.0.0:{smtps}]
dns:
  {answer}
  internal_names: [{names}]
  internal_suffixes: [\"{namespace}.svc.{domain}\"]
  upstream: \"{upstream}\"
control:
  # Loopback only: reached through a port-forward to this pod, never from another pod.
  listen: 127.0.0.1:{control}
  token: \"{token}\"
log:
  path: /var/log/af/decisions.jsonl
webhooks: {{{webhooks}}}
{tls_capture}",
        env = input.env,
        proxy = ports::PROXY,
        http = ports::HTTP,
        tls = ports::TLS,
        dns = ports::DNS,
        smtp0 = ports::SMTP[0],
        smtp1 = ports::SMTP[1],
        smtps = ports::SMTPS,
        names = internal_names.join(", "),
        domain = input.cluster.domain,
        upstream = input.cluster.dns,
        control = ports::CONTROL,
        token = input.control_token,
        webhooks = webhooks.join(", "),
        tls_capture = input
            .capture
            .map_or(String::new(), |capture| capture.ca.sidecar_config_line()),
    ))
}

/// The sidecar's configuration Secret, around `text` ([`sidecar_config_text`]).
pub fn sidecar_config(input: &RenderInput<'_>, namespace: &str, text: &str) -> Secret {
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
