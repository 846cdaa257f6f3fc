//! `af-proxy cron`: runs a command on a schedule, inside the service's own container — its own
//! namespace, its own rules — so a scheduled job needs no scheduler with more reach than the job.

use std::process::{Child, Command, ExitCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use af_manifest::CronSchedule;

/// The UTC calendar fields of a minute since the epoch: (minute, hour, day of month, month, day of
/// week with 0 = Sunday).
pub fn calendar(minutes_since_epoch: u64) -> (u32, u32, u32, u32, u32) {
    let minute = (minutes_since_epoch % 60) as u32;
    let hour = ((minutes_since_epoch / 60) % 24) as u32;
    let days = (minutes_since_epoch / 1440) as i64;
    // 1970-01-01 was a Thursday.
    let weekday = ((days + 4).rem_euclid(7)) as u32;
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (minute, hour, day, month, weekday)
}

/// Runs `command` at every minute `schedule` names, never two runs at once (a run still going when
/// the next is due is left to finish, and that run is skipped and said so).
pub fn run(schedule: &CronSchedule, command: &[String]) -> ExitCode {
    let Some((program, arguments)) = command.split_first() else {
        eprintln!("af-proxy cron: no command to run");
        return ExitCode::FAILURE;
    };
    let mut last_minute = None;
    let mut running: Option<Child> = None;
    loop {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            / 60;
        if last_minute != Some(now) {
            last_minute = Some(now);
            let (minute, hour, day, month, weekday) = calendar(now);
            if schedule.fires_at(minute, hour, day, month, weekday) {
                if let Some(child) = running.as_mut()
                    && child.try_wait().ok().flatten().is_none()
                {
                    eprintln!("af-proxy cron: the previous run is still going; skipping this one");
                } else {
                    eprintln!("af-proxy cron: running {}", command.join(" "));
                    match Command::new(program).args(arguments).spawn() {
                        Ok(child) => running = Some(child),
                        Err(err) => eprintln!("af-proxy cron: cannot run {program}: {err}"),
                    }
                }
            }
        }
        if let Some(child) = running.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            eprintln!("af-proxy cron: the run ended: {status}");
            running = None;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_fields() {
        assert_eq!(
            calendar(0),
            (0, 0, 1, 1, 4),
            "1970-01-01 00:00 was a Thursday"
        );
        // 2026-11-30 06:58 UTC, a Monday.
        let minutes = 1_796_021_880 / 60;
        assert_eq!(calendar(minutes), (58, 6, 30, 11, 1));
        // 2024-02-29 (a leap day) 12:00, a Thursday.
        assert_eq!(calendar(1_709_208_000 / 60), (0, 12, 29, 2, 4));
    }
}
