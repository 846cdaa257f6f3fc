//! The environment's two networks: `internal` for the services (no route off the host), `egress`
//! for the sidecar alone. Created with af's labels in the creating call; a network with our name
//! and without our label is someone else's and is refused (AF-RUN-045), never reused or removed.

use af_manifest::EnvironmentId;
use af_runtime::RuntimeErrorKind;
use bollard::Docker;
use bollard::models::NetworkCreateRequest;

use crate::error::{DockerError, platform};
use crate::names;

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
    for (name, is_internal, role) in [
        (&internal, true, "internal-network"),
        (&egress, false, "egress-network"),
    ] {
        if check_owned(docker, name, env).await? {
            continue;
        }
        let request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".to_string()),
            internal: Some(is_internal),
            labels: Some(names::labels(env, role)),
            ..Default::default()
        };
        docker
            .create_network(request)
            .await
            .map_err(|e| platform(format!("creating network {name}"), e))?;
    }
    Ok((internal, egress))
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

/// The subnets of a network, as CIDR text.
pub async fn subnets(docker: &Docker, name: &str) -> Result<Vec<String>, DockerError> {
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
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| c.subnet)
        .collect())
}
