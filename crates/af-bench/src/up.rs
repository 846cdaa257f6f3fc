//! `af-bench up`: `af up` + `af down` against `docker compose up` + `down` of the same services
//! (same images, same memory limits, no containment), timed in the same run. With `--database`,
//! both stacks also have a PostgreSQL server of the same image: af's environment its branch (a
//! copy of the template, then the branch made), compose's a `db` service, its `up` timed until the
//! server accepts connections (what af's `up` waits for).
//!
//! Every service is the engine image serving as a proxy, so nothing is pulled. The probe's targets
//! are TEST-NET addresses nothing answers: the benchmark sends nothing off the machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The services' proxy configuration, as the escaped text of a YAML double-quoted string.
const SERVICE_CONFIG: &str = "environment: bench\\npolicy: {}\\nlisten: {proxy: 0.0.0.0:8080}\\ncontrol: {listen: 127.0.0.1:9901, token: bench-token-0123456789}\\nlog: {path: /tmp/bench/log.jsonl}\\n";

/// Where the probe looks: TEST-NET-3, which nothing on this machine routes or answers.
const PROBE_TARGETS: [(&str, &str); 4] = [
    ("AF_PROBE_PUBLIC_TCP", "203.0.113.10:443"),
    ("AF_PROBE_PUBLIC_DNS", "203.0.113.10:53"),
    ("AF_PROBE_METADATA", "203.0.113.10:80"),
    ("AF_PROBE_METADATA_V6", "[2001:db8::10]:80"),
];

/// The manifest of `services` engine services, and a database of `database` (an image) when
/// given.
pub fn manifest(image: &str, services: usize, database: Option<&str>) -> String {
    let mut text = String::from("name: afbench\nruntime: {provider: local}\nservices:\n");
    for n in 1..=services {
        text.push_str(&format!(
            "  s{n}:\n    image: {image}\n    args: [serve]\n    port: 8080\n    resources: {{memory: 32Mi}}\n    env:\n      AF_PROXY_CONFIG_TEXT: \"{SERVICE_CONFIG}\"\n"
        ));
    }
    if let Some(database) = database {
        text.push_str(&format!(
            "database:\n  provider: container\n  image: {database}\n"
        ));
    }
    text
}

/// The compose file of the same services (and database).
pub fn compose_file(image: &str, services: usize, database: Option<&str>) -> String {
    let mut text = String::from("services:\n");
    for n in 1..=services {
        text.push_str(&format!(
            "  s{n}:\n    image: {image}\n    command: [serve]\n    mem_limit: 32m\n    environment:\n      AF_PROXY_CONFIG_TEXT: \"{SERVICE_CONFIG}\"\n"
        ));
    }
    if let Some(database) = database {
        text.push_str(&format!(
            "  {COMPOSE_DATABASE}:\n    image: {database}\n    user: postgres\n    environment:\n      POSTGRES_PASSWORD: bench\n"
        ));
    }
    text
}

/// The compose stack's database service.
const COMPOSE_DATABASE: &str = "db";

/// How compose is run here: the v2 plugin waits with `--wait`; v1 (`docker-compose`) has no
/// `--wait`, and `up -d` returns once every container runs — what `--wait` waits for when no
/// service has a healthcheck, as none has here.
struct Compose {
    program: &'static str,
    prefix: &'static [&'static str],
    up: &'static [&'static str],
}

fn find_compose() -> Result<Compose> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works("docker", &["compose", "version"]) {
        Ok(Compose {
            program: "docker",
            prefix: &["compose"],
            up: &["up", "-d", "--wait"],
        })
    } else if works("docker-compose", &["version"]) {
        Ok(Compose {
            program: "docker-compose",
            prefix: &[],
            up: &["up", "-d"],
        })
    } else {
        bail!(
            "neither `docker compose` nor `docker-compose` runs here; install one to measure the baseline"
        )
    }
}

fn timed(mut command: Command) -> Result<(Duration, Output)> {
    let start = Instant::now();
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    let took = start.elapsed();
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok((took, output))
}

/// The seconds `af up` printed for its probe step (`✓ Probe (0.6s): ...`).
pub fn probe_seconds(stderr: &str) -> Option<f64> {
    let line = stderr.lines().find(|l| l.starts_with("✓ Probe ("))?;
    let (seconds, _) = line.trim_start_matches("✓ Probe (").split_once("s)")?;
    seconds.parse().ok()
}

struct Round {
    af_up: Duration,
    af_down: Duration,
    compose_up: Duration,
    compose_down: Duration,
    probe: Option<f64>,
}

fn af_command(af: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(af);
    command
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .envs(PROBE_TARGETS);
    command
}

fn compose_command(compose: &Compose, dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(compose.program);
    command
        .args(compose.prefix)
        .args(["-p", "afbenchcompose"])
        .args(args)
        .current_dir(dir);
    command
}

/// Waits until the compose stack's database accepts connections over TCP, as af's `up` does.
fn wait_for_compose_database(compose: &Compose, dir: &Path) -> Result<()> {
    let (_, ps) = timed(compose_command(
        compose,
        dir,
        &["ps", "-q", COMPOSE_DATABASE],
    ))?;
    let container = String::from_utf8_lossy(&ps.stdout).trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let ready = Command::new("docker")
            .args(["exec", &container, "pg_isready", "-q", "-h", "127.0.0.1"])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("compose's database {container} did not accept connections within 120 s")
}

fn one_round(af: &Path, compose: &Compose, dir: &Path, database: bool) -> Result<Round> {
    let (af_up, up) = timed(af_command(af, dir, &["up", "--env", "bench"]))?;
    let (af_down, _) = timed(af_command(af, dir, &["down", "--env", "bench"]))?;
    let started = Instant::now();
    timed(compose_command(compose, dir, compose.up))?;
    if database {
        wait_for_compose_database(compose, dir)?;
    }
    let compose_up = started.elapsed();
    // `-v`: the database's data volume goes too, as af's does.
    let (compose_down, _) = timed(compose_command(compose, dir, &["down", "-v"]))?;
    Ok(Round {
        af_up,
        af_down,
        compose_up,
        compose_down,
        probe: probe_seconds(&String::from_utf8_lossy(&up.stderr)),
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn run(
    af: &Path,
    image: &str,
    services: usize,
    rounds: usize,
    database: Option<&str>,
) -> Result<()> {
    let compose = find_compose()?;
    let dir: PathBuf = std::env::temp_dir().join(format!("af-bench-up-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("af.yaml"), manifest(image, services, database))?;
    std::fs::write(
        dir.join("docker-compose.yml"),
        compose_file(image, services, database),
    )?;
    if let Some(database) = database {
        println!(
            "with a database: {database} (af: the environment's branch; compose: a db service, up timed until it accepts connections)"
        );
    }
    println!(
        "af-bench up: {services} services, {rounds} rounds after one warm-up; baseline `{} {}` + `down`",
        compose.program,
        compose
            .prefix
            .iter()
            .chain(compose.up)
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:>5} {:>9} {:>9} {:>11} {:>11} {:>8} {:>8}",
        "round", "af up s", "af down", "compose up", "compose dn", "probe s", "up ratio"
    );
    let result = (|| {
        one_round(af, &compose, &dir, database.is_some())?;
        let mut measured = Vec::new();
        for n in 1..=rounds {
            let round = one_round(af, &compose, &dir, database.is_some())?;
            println!(
                "{n:>5} {:>9.2} {:>9.2} {:>11.2} {:>11.2} {:>8} {:>8.2}",
                round.af_up.as_secs_f64(),
                round.af_down.as_secs_f64(),
                round.compose_up.as_secs_f64(),
                round.compose_down.as_secs_f64(),
                round.probe.map_or("?".to_string(), |p| format!("{p:.1}")),
                round.af_up.as_secs_f64() / round.compose_up.as_secs_f64(),
            );
            measured.push(round);
        }
        Ok::<_, anyhow::Error>(measured)
    })();
    // Leave nothing behind, whatever happened.
    let _ = af_command(af, &dir, &["down", "--env", "bench"]).output();
    let _ = compose_command(&compose, &dir, &["down", "-v"]).output();
    let _ = std::fs::remove_dir_all(&dir);
    let measured = result?;

    let of = |f: fn(&Round) -> f64| median(measured.iter().map(f).collect());
    let af_up = of(|r| r.af_up.as_secs_f64());
    let compose_up = of(|r| r.compose_up.as_secs_f64());
    let af_cycle = of(|r| (r.af_up + r.af_down).as_secs_f64());
    let compose_cycle = of(|r| (r.compose_up + r.compose_down).as_secs_f64());
    let probe = measured
        .iter()
        .filter_map(|r| r.probe)
        .fold(0.0_f64, f64::max);
    println!(
        "median: af up {af_up:.2} s vs compose up {compose_up:.2} s, ratio {:.2}; up+down {af_cycle:.2} s vs {compose_cycle:.2} s, ratio {:.2} (target <= 1.30)",
        af_up / compose_up,
        af_cycle / compose_cycle
    );
    println!("slowest probe step: {probe:.1} s (target: verdict within 1 s)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_step_is_read_off_up_output() {
        let stderr = "▸ Probe: every escape route\n✓ Probe (0.6s): every escape route\n✓ Sidecar (0.3s): the egress sidecar\n";
        assert_eq!(probe_seconds(stderr), Some(0.6));
        assert_eq!(probe_seconds("✓ Sidecar (0.3s)\n"), None);
    }

    #[test]
    fn the_manifest_and_the_compose_file_name_the_same_services() {
        let with_database = manifest("img:1", 1, Some("pg:1"));
        let parsed = af_manifest::parse(&with_database, "af.yaml").expect("valid with a database");
        assert!(parsed.database.is_some());
        assert!(compose_file("img:1", 1, Some("pg:1")).contains("  db:\n    image: pg:1"));
        let manifest = manifest("img:1", 2, None);
        let compose = compose_file("img:1", 2, None);
        for service in ["  s1:", "  s2:"] {
            assert!(manifest.contains(service) && compose.contains(service));
        }
        assert!(!manifest.contains("  s3:"));
        assert!(compose.contains("mem_limit: 32m") && manifest.contains("memory: 32Mi"));
        af_manifest::parse(&manifest, "af.yaml").expect("the benchmark's manifest is valid");
    }
}
