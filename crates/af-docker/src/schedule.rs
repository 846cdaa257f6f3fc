//! Scheduled services on Docker. The service's image does not carry a scheduler, so the engine's
//! own static binary is copied into a labelled volume once, and the service's container runs it,
//! read-only, as `af-proxy cron --schedule S -- <the service's command>`: the job runs inside the
//! service's container, in its namespace and under its rules, and nothing gets more reach than the
//! job itself.

use af_manifest::{CronSchedule, EnvironmentId, Service};
use bollard::Docker;
use bollard::models::{HostConfig, VolumeCreateRequest};

use crate::error::{DockerError, platform};
use crate::names;
use crate::one_shot::{self, OneShot};

/// Where the engine binary is mounted in a scheduled service's container.
pub const MOUNT: &str = "/af";

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

/// The environment's engine volume: the engine binary, mounted read-only into every scheduled
/// service's container.
pub fn volume_name(env: &EnvironmentId) -> String {
    format!("af-{env}-engine")
}

/// The one-shot that copies the engine binary into `volume`: as root (the volume is root's), on
/// no network.
pub fn install(engine_image: &str, volume: &str) -> OneShot {
    OneShot {
        role: "engine-install".to_string(),
        image: engine_image.to_string(),
        args: vec![
            "install".to_string(),
            "--to".to_string(),
            "/engine/af-proxy".to_string(),
        ],
        network_mode: "none".to_string(),
        user: Some("0".to_string()),
        binds: vec![format!("{volume}:/engine")],
        ..Default::default()
    }
}

/// The entrypoint of a scheduled service's container: the engine's scheduler, then the service's
/// own command (the manifest's, else the image's).
pub fn entrypoint(schedule: &CronSchedule, command: Vec<String>) -> Vec<String> {
    let mut out = vec![
        format!("{MOUNT}/af-proxy"),
        "cron".to_string(),
        "--schedule".to_string(),
        schedule.as_str().to_string(),
        "--".to_string(),
    ];
    out.extend(command);
    out
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

/// The mount of the engine volume, read-only, for a scheduled service's container.
pub fn mount(volume: &str, host_config: &mut HostConfig) {
    host_config
        .binds
        .get_or_insert_with(Vec::new)
        .push(format!("{volume}:{MOUNT}:ro"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_wraps_the_services_command() {
        let schedule = af_manifest::parse_cron("0 3 * * *").unwrap();
        assert_eq!(
            entrypoint(&schedule, vec!["/shop".into(), "report".into()]),
            [
                "/af/af-proxy",
                "cron",
                "--schedule",
                "0 3 * * *",
                "--",
                "/shop",
                "report"
            ]
        );
    }
}
