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

/// How many times `down` removes what it finds before it gives up. A request an interrupted `af up`
/// had in flight is finished by the daemon after the client is gone, so an object can appear after
/// the first listing; each round removes what the one before missed.
const REMOVAL_ROUNDS: u32 = 20;
const BETWEEN_ROUNDS: std::time::Duration = std::time::Duration::from_millis(250);

pub async fn down(docker: &Docker, env: &EnvironmentId) -> Result<(), DockerError> {
    // Refuse first, before removing anything: a foreign network with our name means this id
    // collides with someone else's objects.
    for name in [names::internal_network(env), names::egress_network(env)] {
        networks::check_owned(docker, &name, env).await?;
    }
    for round in 1..=REMOVAL_ROUNDS {
        let failures = remove_everything_listed(docker, env).await?;
        let left = remaining(docker, env).await?;
        if left.is_empty() {
            return Ok(());
        }
        if round == REMOVAL_ROUNDS {
            let mut detail = format!(
                "labelled objects remain after {REMOVAL_ROUNDS} rounds of removal: {}",
                left.join(", ")
            );
            for failure in failures {
                detail.push_str("; ");
                detail.push_str(&failure);
            }
            return Err(platform("removing the environment", detail));
        }
        tokio::time::sleep(BETWEEN_ROUNDS).await;
    }
    Ok(())
}

/// Every labelled object of `env` still in Docker, by name.
async fn remaining(docker: &Docker, env: &EnvironmentId) -> Result<Vec<String>, DockerError> {
    let mut left = containers(docker, env).await?;
    left.extend(networks::list(docker, env).await?);
    left.extend(volumes(docker, env).await?);
    Ok(left)
}

/// One round: containers first (they hold the networks and volumes), then networks, then volumes.
/// A removal that fails is said, not fatal: the next round tries again (a network an interrupted
/// `up` was still attaching a container to is busy for a moment).
async fn remove_everything_listed(
    docker: &Docker,
    env: &EnvironmentId,
) -> Result<Vec<String>, DockerError> {
    let mut failures = Vec::new();
    for name in containers(docker, env).await? {
        if let Err(err) = one_shot::remove(docker, &name).await {
            failures.push(err.to_string());
        }
    }
    for name in networks::list(docker, env).await? {
        match docker.remove_network(&name).await {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(err) => failures.push(format!("removing network {name}: {err}")),
        }
    }
    for volume in volumes(docker, env).await? {
        match docker
            .remove_volume(
                &volume,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await
        {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(err) => failures.push(format!("removing volume {volume}: {err}")),
        }
    }
    Ok(failures)
}
