//! The environment's two networks: `internal` for the services (no route off the host), `egress`
//! for the sidecar alone. Created with af's labels in the creating call; a network with our name
//! and without our label is someone else's and is refused (AF-RUN-045), never reused or removed.

use std::net::Ipv4Addr;

use af_manifest::EnvironmentId;
use af_runtime::RuntimeErrorKind;
use bollard::Docker;
use bollard::models::IpamConfig;

use crate::error::{DockerError, platform};
use crate::names;

pub use crate::plan::networks::{Layout, layout_of};

/// Refuses a network named `name` that exists without af's label for `env`. `Ok(true)` when it
/// exists and is ours.
pub async fn check_owned(
    docker: &Docker,
    name: &str,
    env: &EnvironmentId,
) -> Result<bool, DockerError> {
    match docker
        .inspect_network(
            name,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
    {
        Ok(network) => {
            if names::is_ours(network.labels.as_ref(), env) {
                Ok(true)
            } else {
                Err(DockerError::Runtime(
                    RuntimeErrorKind::NotOurs {
                        object_kind: "network".into(),
                        name: name.to_string(),
                    }
                    .into(),
                ))
            }
        }
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(false),
        Err(err) => Err(platform(format!("inspecting network {name}"), err)),
    }
}

/// Creates (or reuses, when ours) the environment's networks; returns (internal, egress) names.
pub async fn ensure(docker: &Docker, env: &EnvironmentId) -> Result<(String, String), DockerError> {
    let internal = names::internal_network(env);
    let egress = names::egress_network(env);
    // Independent of each other: made at the same time.
    let making_internal = async {
        if !check_owned(docker, &internal, env).await? {
            create_internal(docker, &internal, env).await?;
        }
        Ok::<_, DockerError>(())
    };
    let making_egress = async {
        if !check_owned(docker, &egress, env).await? {
            docker
                .create_network(crate::plan::networks::egress(&egress, env))
                .await
                .map_err(|e| platform(format!("creating network {egress}"), e))?;
        }
        Ok::<_, DockerError>(())
    };
    let (made_internal, made_egress) = tokio::join!(making_internal, making_egress);
    made_internal?;
    made_egress?;
    Ok((internal, egress))
}

/// The services' network gets a subnet af chooses, so the sidecar can have a fixed address in it
/// (Docker assigns fixed addresses only in subnets a user configured). Candidates are /24s of
/// 10.213.0.0/16, starting at one derived from the environment id; one that overlaps an existing
/// network is skipped.
async fn create_internal(
    docker: &Docker,
    name: &str,
    env: &EnvironmentId,
) -> Result<(), DockerError> {
    let start = env
        .as_str()
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let mut last_error = String::new();
    for attempt in 0..32u32 {
        let third = u8::try_from((start + attempt) % 256).unwrap_or_default();
        let request = crate::plan::networks::internal(name, env, third);
        match docker.create_network(request).await {
            Ok(_) => return Ok(()),
            Err(err) if err.to_string().contains("overlap") => last_error = err.to_string(),
            Err(err) => return Err(platform(format!("creating network {name}"), err)),
        }
    }
    Err(platform(
        format!("creating network {name}"),
        format!("no free subnet in 10.213.0.0/16: {last_error}"),
    ))
}

/// The labelled networks of `env`.
pub async fn list(docker: &Docker, env: &EnvironmentId) -> Result<Vec<String>, DockerError> {
    let options = bollard::query_parameters::ListNetworksOptions {
        filters: Some(names::environment_filter(env)),
    };
    let networks = docker
        .list_networks(Some(options))
        .await
        .map_err(|e| platform("listing networks", e))?;
    Ok(networks
        .into_iter()
        .filter(|n| names::is_ours(n.labels.as_ref(), env))
        .filter_map(|n| n.name)
        .collect())
}

/// A network's subnets and gateways. Docker reports each subnet's gateway; one it does not report
/// is Docker's default, the subnet's first address.
pub async fn layout(docker: &Docker, name: &str) -> Result<Layout, DockerError> {
    Ok(layout_of(&ipam(docker, name).await?))
}

/// What `up` needs to know of the services' network's addresses, from one inspection.
#[derive(Clone, Debug)]
pub struct Addressing {
    pub layout: Layout,
    /// The sidecar's fixed address: host .2 of the IPv4 subnet (the gateway is .1).
    pub sidecar_ip: Ipv4Addr,
    /// Whether the network keeps containers' own addresses out of the lower half (a network made
    /// by an earlier af does not): only then can instances be made before the sidecar takes its
    /// fixed address.
    pub reserves_fixed: bool,
}

pub async fn addressing(docker: &Docker, name: &str) -> Result<Addressing, DockerError> {
    let configs = ipam(docker, name).await?;
    let subnet = configs
        .iter()
        .filter_map(|c| c.subnet.as_deref())
        .find(|s| !s.contains(':'))
        .ok_or_else(|| {
            platform(
                format!("reading the subnet of {name}"),
                "it has no IPv4 subnet",
            )
        })?;
    let sidecar_ip = crate::sidecar::host_in(subnet, 2).ok_or_else(|| {
        platform(
            format!("choosing the sidecar's address in {subnet}"),
            "the subnet is too small",
        )
    })?;
    let reserves_fixed = configs.iter().any(|c| {
        c.ip_range
            .as_deref()
            .is_some_and(|r| r.ends_with(crate::plan::networks::DYNAMIC_RANGE))
    });
    Ok(Addressing {
        layout: layout_of(&configs),
        sidecar_ip,
        reserves_fixed,
    })
}

/// The subnets of a network, as CIDR text.
pub async fn subnets(docker: &Docker, name: &str) -> Result<Vec<String>, DockerError> {
    Ok(ipam(docker, name)
        .await?
        .into_iter()
        .filter_map(|c| c.subnet)
        .collect())
}

/// The address configuration of network `name`.
async fn ipam(docker: &Docker, name: &str) -> Result<Vec<IpamConfig>, DockerError> {
    let network = docker
        .inspect_network(
            name,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .map_err(|e| platform(format!("inspecting network {name}"), e))?;
    Ok(network
        .ipam
        .and_then(|ipam| ipam.config)
        .unwrap_or_default())
}
