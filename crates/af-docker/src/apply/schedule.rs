//! Scheduled services on Docker. The service's image does not carry a scheduler, so the engine's
//! own static binary is copied into a labelled volume once, and the service's container runs it,
//! read-only, as `af-proxy cron --schedule S -- <the service's command>`: the job runs inside the
//! service's container, in its namespace and under its rules, and nothing gets more reach than the
//! job itself.

use af_manifest::{EnvironmentId, Service};
use bollard::Docker;
use bollard::models::VolumeCreateRequest;

use crate::error::{DockerError, platform};
use crate::names;
use crate::one_shot;

pub use crate::plan::schedule::{MOUNT, entrypoint, install, mount, volume_name};

/// The environment's engine volume, created and filled when missing.
pub async fn ensure_engine_volume(
    docker: &Docker,
    env: &EnvironmentId,
    engine_image: &str,
) -> Result<String, DockerError> {
    let volume = volume_name(env);
    let existing = docker
        .list_volumes(Some(bollard::query_parameters::ListVolumesOptions {
            filters: Some(names::environment_filter(env)),
        }))
        .await
        .map_err(|e| platform("listing volumes", e))?;
    if existing
        .volumes
        .unwrap_or_default()
        .iter()
        .any(|v| v.name == volume)
    {
        return Ok(volume);
    }
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.clone()),
            labels: Some(names::labels(env, "engine-volume")),
            ..Default::default()
        })
        .await
        .map_err(|e| platform(format!("creating volume {volume}"), e))?;
    let install = install(engine_image, &volume);
    let finished = one_shot::run(docker, env, &install).await?;
    if finished.exit_code != 0 {
        return Err(platform(
            format!("filling volume {volume}"),
            finished.stderr.trim().to_string(),
        ));
    }
    Ok(volume)
}

/// The command a service runs: its `command` and `args`, or what its image would run.
pub async fn command_of(
    docker: &Docker,
    service: &Service,
    image: &str,
) -> Result<Vec<String>, DockerError> {
    let config = docker
        .inspect_image(image)
        .await
        .map_err(|e| platform(format!("inspecting image {image}"), e))?
        .config
        .unwrap_or_default();
    let mut command = service
        .command
        .clone()
        .or(config.entrypoint)
        .unwrap_or_default();
    command.extend(
        service
            .args
            .clone()
            .or(if service.command.is_some() {
                None
            } else {
                config.cmd
            })
            .unwrap_or_default(),
    );
    Ok(command)
}
