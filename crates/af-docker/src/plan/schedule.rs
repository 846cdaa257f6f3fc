//! A scheduled service as data: the engine volume, its filling, and the scheduler around the
//! service's command.

use af_manifest::{CronSchedule, EnvironmentId};
use bollard::models::HostConfig;

use crate::plan::containers::OneShot;

/// Where the engine binary is mounted in a scheduled service's container.
pub const MOUNT: &str = "/af";

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
