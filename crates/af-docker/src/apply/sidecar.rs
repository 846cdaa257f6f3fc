//! The environment's sidecar on Docker: the engine image running `serve`, at a fixed address on
//! the services' network (every service's resolver points there) and also on the egress network,
//! the only container with a way off the host. Its control API answers only on the egress side.

use std::net::Ipv4Addr;

use af_manifest::EnvironmentId;
use af_sidecar_api::SidecarConfig;
use bollard::Docker;

use crate::error::{DockerError, platform};
use crate::{names, networks, one_shot};

pub use crate::plan::sidecar::{
    CONFIG_VARIABLE, CONTROL_PORT, DNS_PORT, PROXY_PORT, SidecarSpec, body, config, host_in,
    spec_digest,
};

/// The sidecar of an environment that is up: its address and token, read back off its container
/// (the token is in its configuration, which only the host side can inspect).
pub async fn find(docker: &Docker, env: &EnvironmentId) -> Result<Sidecar, DockerError> {
    let (name, config) = configuration(docker, env).await?;
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

/// The relays the environment's sidecar runs (an external database's), as it was configured.
pub async fn relays(
    docker: &Docker,
    env: &EnvironmentId,
) -> Result<Vec<af_sidecar_api::config::RelayConfig>, DockerError> {
    Ok(configuration(docker, env).await?.1.relays)
}

/// The environment's sidecar's name and the configuration it was created with.
async fn configuration(
    docker: &Docker,
    env: &EnvironmentId,
) -> Result<(String, SidecarConfig), DockerError> {
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
    Ok((name, config))
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
