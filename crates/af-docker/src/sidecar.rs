//! The environment's sidecar on Docker: the engine image running `serve`, at a fixed address on
//! the services' network (every service's resolver points there) and also on the egress network,
//! the only container with a way off the host. Its control API answers only on the egress side.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use af_manifest::{EgressPolicy, EnvironmentId};
use af_sidecar_api::SidecarConfig;
use af_sidecar_api::config::{ControlConfig, DnsConfig, Listeners, TlsCaptureConfig};
use bollard::Docker;
use bollard::models::ContainerCreateBody;

use crate::error::{DockerError, internal, platform};
use crate::trust::CaptureCa;
use crate::{names, networks, one_shot};

pub const PROXY_PORT: u16 = 3128;
pub const DNS_PORT: u16 = 53;
pub const CONTROL_PORT: u16 = 9901;

/// The sidecar of an environment that is up: its address and token, read back off its container
/// (the token is in its configuration, which only the host side can inspect).
pub async fn find(docker: &Docker, env: &EnvironmentId) -> Result<Sidecar, DockerError> {
    let name = names::container(env, "sidecar");
    let found = docker
        .inspect_container(
            &name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .map_err(|e| {
            platform(
                format!("finding the sidecar {name} (is the environment up?)"),
                e,
            )
        })?;
    if !names::is_ours(found.config.as_ref().and_then(|c| c.labels.as_ref()), env) {
        return Err(DockerError::Runtime(
            af_runtime::RuntimeErrorKind::NotOurs {
                object_kind: "container".into(),
                name,
            }
            .into(),
        ));
    }
    let text = found
        .config
        .and_then(|c| c.env)
        .unwrap_or_default()
        .into_iter()
        .find_map(|v| v.strip_prefix(CONFIG_VARIABLE).map(str::to_string))
        .ok_or_else(|| {
            platform(
                format!("reading {name}'s configuration"),
                format!("its container has no {CONFIG_VARIABLE}"),
            )
        })?;
    let config = SidecarConfig::from_text(&text)
        .map_err(|e| platform(format!("reading {name}'s configuration"), e.to_string()))?;
    let token = config
        .inline_token()
        .ok_or_else(|| {
            platform(
                format!("reading {name}'s configuration"),
                "no control token",
            )
        })?
        .to_string();
    let internal_ip = config
        .dns
        .as_ref()
        .and_then(|dns| dns.answer_v4)
        .ok_or_else(|| platform(format!("reading {name}'s configuration"), "no address"))?;
    let egress_ip = address_on(docker, &name, &names::egress_network(env)).await?;
    Ok(Sidecar {
        container: name,
        internal_ip,
        control: format!("{egress_ip}:{CONTROL_PORT}"),
        token,
    })
}

/// Where the sidecar is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sidecar {
    pub container: String,
    /// Its address on the services' network: their proxy and resolver.
    pub internal_ip: Ipv4Addr,
    /// Its control API, on the egress network (reachable from the host only).
    pub control: String,
    pub token: String,
}

/// The address a subnet's host number `index` has (`172.20.0.0/16`, 2 → 172.20.0.2).
pub fn host_in(subnet: &str, index: u32) -> Option<Ipv4Addr> {
    let (base, prefix) = subnet.split_once('/')?;
    let base: Ipv4Addr = base.parse().ok()?;
    let prefix: u32 = prefix.parse().ok()?;
    let size = 1u64 << (32 - prefix.min(32));
    (u64::from(index) < size.saturating_sub(1)).then(|| Ipv4Addr::from(u32::from(base) + index))
}

/// The variable the sidecar's configuration is given in (`af-proxy serve` reads it), with its `=`.
pub(crate) const CONFIG_VARIABLE: &str = "AF_PROXY_CONFIG_TEXT=";

/// The sidecar's configuration: every listener on all of its addresses, the control API answering
/// only on the egress side (a connection arriving on `internal_ip`, the services' side, is closed
/// unread), outside names resolved to `internal_ip`, webhooks to each service by name.
pub fn config(
    env: &EnvironmentId,
    policy: &EgressPolicy,
    internal_ip: Ipv4Addr,
    token: &str,
    webhooks: &[(String, u16)],
    capture_ca: Option<&CaptureCa>,
) -> SidecarConfig {
    let any = |port: u16| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    let mut control = ControlConfig::inline(any(CONTROL_PORT), token.to_string());
    control.workload_addresses = vec![IpAddr::V4(internal_ip)];
    let mut config = SidecarConfig::new(
        env.as_str(),
        Listeners {
            proxy: Some(any(PROXY_PORT)),
            http: Some(any(80)),
            tls: Some(any(443)),
            dns: Some(any(DNS_PORT)),
            smtp: vec![any(25), any(587)],
            smtps: vec![any(465)],
        },
        control,
    );
    config.policy = policy.clone();
    config.dns = Some(DnsConfig::answering(Some(internal_ip), None));
    // Each service with a port takes webhooks at its name, which the platform's resolver knows.
    config.webhooks = webhooks
        .iter()
        .map(|(service, port)| (service.clone(), format!("{service}:{port}")))
        .collect();
    config.tls_capture = capture_ca.map(|ca| TlsCaptureConfig::inline(&ca.pem));
    config
}

/// The sidecar after [`prepare`].
#[derive(Debug)]
pub enum Prepared {
    /// It already runs exactly as specified.
    Running(Sidecar),
    /// Created (replacing a leftover of ours) on both networks, not started.
    Created {
        name: String,
        internal_ip: Ipv4Addr,
        token: String,
        egress: String,
    },
}

/// Starts a [`prepare`]d sidecar; `true` when it was (re)created.
pub async fn start_prepared(
    docker: &Docker,
    prepared: Prepared,
) -> Result<(Sidecar, bool), DockerError> {
    match prepared {
        Prepared::Running(sidecar) => Ok((sidecar, false)),
        Prepared::Created {
            name,
            internal_ip,
            token,
            egress,
        } => {
            one_shot::start(docker, &name).await?;
            let egress_ip = address_on(docker, &name, &egress).await?;
            Ok((
                Sidecar {
                    container: name,
                    internal_ip,
                    control: format!("{egress_ip}:{CONTROL_PORT}"),
                    token,
                },
                true,
            ))
        }
    }
}

/// What a sidecar is made from.
#[derive(Clone, Copy, Debug)]
pub struct SidecarSpec<'a> {
    /// The engine image.
    pub image: &'a str,
    /// The services' network and the egress network.
    pub internal: &'a str,
    pub egress: &'a str,
    pub policy: &'a EgressPolicy,
    /// Each service that takes webhooks, and its port.
    pub webhooks: &'a [(String, u16)],
    pub capture_ca: Option<&'a CaptureCa>,
}

/// Everything of the sidecar but starting it: kept when it runs as specified, else created (on the
/// services' network at its fixed address, and on the egress network) and left stopped. `up`
/// does this while the probe runs; the sidecar starts after the verdict.
pub async fn prepare(
    docker: &Docker,
    env: &EnvironmentId,
    spec: SidecarSpec<'_>,
) -> Result<Prepared, DockerError> {
    let name = names::container(env, "sidecar");
    let spec_digest = spec_digest(&spec)?;
    if one_shot::running_with_spec(docker, &name, env, &spec_digest).await? {
        return Ok(Prepared::Running(find(docker, env).await?));
    }
    one_shot::clear(docker, &name, env).await?;
    let internal_ip = networks::addressing(docker, spec.internal)
        .await?
        .sidecar_ip;
    let token =
        af_sidecar_api::new_control_token().map_err(|e| platform("making the control token", e))?;
    let body = body(env, spec, internal_ip, &token)?;
    one_shot::create(docker, &name, body, &[spec.egress]).await?;
    Ok(Prepared::Created {
        name,
        internal_ip,
        token,
        egress: spec.egress.to_string(),
    })
}

/// Everything a sidecar is made from, as a digest; unchanged, a second `up` keeps it as it runs
/// (and keeps its token, which the services never see but `af net log` reads back).
fn spec_digest(spec: &SidecarSpec<'_>) -> Result<String, DockerError> {
    let policy_text = serde_json::to_string(spec.policy)
        .map_err(|e| internal("writing the sidecar configuration", e))?;
    let webhook_text = format!("{:?}", spec.webhooks);
    let ca_cert = spec.capture_ca.map_or("", |ca| ca.pem.cert.as_str());
    Ok(names::spec_digest(&[
        spec.image,
        spec.internal,
        spec.egress,
        &policy_text,
        &webhook_text,
        ca_cert,
    ]))
}

/// The sidecar's create body ([`crate::plan::containers::sidecar`]) at `internal_ip`, behind
/// `token`.
pub fn body(
    env: &EnvironmentId,
    spec: SidecarSpec<'_>,
    internal_ip: Ipv4Addr,
    token: &str,
) -> Result<ContainerCreateBody, DockerError> {
    let text = config(
        env,
        spec.policy,
        internal_ip,
        token,
        spec.webhooks,
        spec.capture_ca,
    )
    .to_text()
    .map_err(|e| internal("writing the sidecar configuration", e))?;
    Ok(crate::plan::containers::sidecar(
        env,
        spec.image,
        spec.internal,
        internal_ip,
        &text,
        &spec_digest(&spec)?,
    ))
}

/// A container's address on a network.
pub async fn address_on(
    docker: &Docker,
    container: &str,
    network: &str,
) -> Result<String, DockerError> {
    let found = docker
        .inspect_container(
            container,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .map_err(|e| platform(format!("inspecting container {container}"), e))?;
    found
        .network_settings
        .and_then(|n| n.networks)
        .and_then(|mut networks| networks.remove(network))
        .and_then(|endpoint| endpoint.ip_address)
        .filter(|ip| !ip.is_empty())
        .ok_or_else(|| {
            platform(
                format!("reading the address of {container} on {network}"),
                "it has none",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_in_subnets() {
        assert_eq!(
            host_in("172.20.0.0/16", 2),
            Some(Ipv4Addr::new(172, 20, 0, 2))
        );
        assert_eq!(host_in("10.0.5.0/24", 2), Some(Ipv4Addr::new(10, 0, 5, 2)));
        assert_eq!(host_in("10.0.5.0/31", 2), None);
        assert_eq!(host_in("nonsense", 2), None);
    }

    /// What the runtime writes, the sidecar reads back field for field, and accepts.
    fn read_by_the_sidecar(config: &SidecarConfig) -> af_egress::LoadedConfig {
        let text = config.to_text().unwrap();
        let loaded = af_egress::parse_config(&text, std::path::Path::new("/"))
            .unwrap_or_else(|problems| panic!("the sidecar refuses it: {problems:?}\n{text}"));
        assert_eq!(&loaded.config, config, "{text}");
        loaded
    }

    #[test]
    fn the_configuration_round_trips_through_the_sidecars_own_parser() {
        let env = EnvironmentId::derive("shop", "main");
        let policy = EgressPolicy {
            allow: vec![af_manifest::parse_host_rule("api.stripe.com").unwrap()],
            ..EgressPolicy::default()
        };
        let config = config(
            &env,
            &policy,
            Ipv4Addr::new(172, 20, 0, 2),
            "0123456789abcdef0123",
            &[("web".to_string(), 8080)],
            None,
        );
        let loaded = read_by_the_sidecar(&config);
        assert_eq!(loaded.control_token, "0123456789abcdef0123");
        assert_eq!(
            loaded.config.control.workload_addresses,
            [IpAddr::V4(Ipv4Addr::new(172, 20, 0, 2))]
        );
        assert_eq!(loaded.config.webhooks["web"], "web:8080");
        assert!(loaded.capture_ca.is_none());

        let ca = CaptureCa {
            volume: "v".into(),
            pem: af_sidecar_api::new_ca(env.as_str()).unwrap(),
            with_system_store: true,
        };
        let config = super::config(
            &env,
            &policy,
            Ipv4Addr::new(172, 20, 0, 2),
            "0123456789abcdef0123",
            &[],
            Some(&ca),
        );
        assert!(
            read_by_the_sidecar(&config).capture_ca.is_some(),
            "the sidecar loads the CA"
        );
    }
}
