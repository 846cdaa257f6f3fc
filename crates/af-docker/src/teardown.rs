//! `down`: remove exactly what carries the environment's label — containers, networks, volumes — and
//! wait until it is gone. An object with our name and without our label is refused (AF-RUN-045)
//! and left as it is.

use af_manifest::EnvironmentId;
use bollard::Docker;
use bollard::query_parameters::ListContainersOptions;

use crate::error::{DockerError, platform};
use crate::{names, networks, one_shot};

/// Containers of `env` (running or not), by name.
pub async fn containers(docker: &Docker, env: &EnvironmentId) -> Result<Vec<String>, DockerError> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(names::environment_filter(env)),
        ..Default::default()
    };
    let found = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| platform("listing containers", e))?;
    Ok(found
        .into_iter()
        .filter(|c| names::is_ours(c.labels.as_ref(), env))
        .filter_map(|c| {
            c.names
                .and_then(|n| n.first().map(|n| n.trim_start_matches('/').to_string()))
        })
        .collect())
}

/// Volumes of `env`, by name.
pub async fn volumes(docker: &Docker, env: &EnvironmentId) -> Result<Vec<String>, DockerError> {
    let options = bollard::query_parameters::ListVolumesOptions {
        filters: Some(names::environment_filter(env)),
    };
    let found = docker
        .list_volumes(Some(options))
        .await
        .map_err(|e| platform("listing volumes", e))?;
    Ok(found
        .volumes
        .unwrap_or_default()
        .into_iter()
        .filter(|v| names::is_ours(Some(&v.labels), env))
        .map(|v| v.name)
        .collect())
}

pub async fn down(docker: &Docker, env: &EnvironmentId) -> Result<(), DockerError> {
    // Refuse first, before removing anything: a foreign network with our name means this id
    // collides with someone else's objects.
    for name in [names::internal_network(env), names::egress_network(env)] {
        networks::check_owned(docker, &name, env).await?;
    }
    for name in containers(docker, env).await? {
        one_shot::remove(docker, &name).await?;
    }
    for name in networks::list(docker, env).await? {
        match docker.remove_network(&name).await {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(err) => return Err(platform(format!("removing network {name}"), err)),
        }
    }
    for volume in volumes(docker, env).await? {
        docker
            .remove_volume(
                &volume,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await
            .map_err(|e| platform(format!("removing volume {volume}"), e))?;
    }
    if !containers(docker, env).await?.is_empty()
        || !networks::list(docker, env).await?.is_empty()
        || !volumes(docker, env).await?.is_empty()
    {
        return Err(platform(
            "removing the environment",
            "labelled objects remain after removal",
        ));
    }
    Ok(())
}
