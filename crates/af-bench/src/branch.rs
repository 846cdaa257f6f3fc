//! `af-bench branch`: what a new environment's database costs, through af's own code, against the
//! seed applied afresh, in the same run on the same daemon.
//!
//! Two pairs, each round:
//! - **A branch in a server** (what `af db reset` does, and how each branch is made): `CREATE
//!   DATABASE … TEMPLATE af_template` against `CREATE DATABASE` + the seed through psql, in the
//!   same running server. Target: ≤ 0.2×, for a seed of 10 MB.
//! - **A new environment's server**: a copy of the seeded template volume, the server started and
//!   the branch made (`prepare_server` and `start_server` but the pod) against a server made from nothing with the seed applied
//!   (`ensure_template`'s build: initdb, the seed, sealed).
//!
//! The seed is generated, about `--seed-mb` megabytes of SQL: a table of rows of text and an index
//! on it, measured twice — the rows by `COPY` (as `pg_dump` writes them), then by one `INSERT`
//! each (as `pg_dump --inserts` and most hand-written seeds do). Every server runs on no network or on a network of its own; no
//! packet leaves the machine.

use std::time::{Duration, Instant};

use af_docker::database::{self, Image, Seed};
use af_docker::one_shot;
use af_docker::plan::database as plan;
use af_manifest::EnvironmentId;
use anyhow::{Context, Result, bail};

pub struct Options {
    pub image: String,
    pub seed_mb: usize,
    pub rounds: usize,
}

/// How the seed's rows are written: as `pg_dump` writes them by default (`COPY`), or as one
/// `INSERT` per row (`pg_dump --inserts`, and most seeds written by hand).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Copy,
    Insert,
}

/// About `megabytes` of SQL: a table, its rows in `form`, an index.
pub fn seed_sql(megabytes: usize, form: Form) -> Vec<u8> {
    let mut sql = String::from(
        "CREATE TABLE events (id bigint PRIMARY KEY, kind text NOT NULL, payload text NOT NULL);\n",
    );
    if form == Form::Copy {
        sql.push_str("COPY events (id, kind, payload) FROM stdin;\n");
    }
    let target = megabytes << 20;
    let mut id = 0u64;
    while sql.len() < target {
        id += 1;
        let kind = ["order", "payment", "mail", "report"][(id % 4) as usize];
        let payload = format!(
            "event {id} of kind {kind}: the quick brown fox jumps over the lazy dog {:016x}",
            id.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        );
        match form {
            Form::Copy => sql.push_str(&format!("{id}\t{kind}\t{payload}\n")),
            Form::Insert => sql.push_str(&format!(
                "INSERT INTO events (id, kind, payload) VALUES ({id}, '{kind}', '{payload}');\n"
            )),
        }
    }
    if form == Form::Copy {
        sql.push_str("\\.\n");
    }
    sql.push_str("CREATE INDEX events_by_kind ON events (kind);\n");
    sql.into_bytes()
}

struct Round {
    /// An exec into the server that does nothing: what every step through the container pays.
    exec: Duration,
    /// The template database's files copied and synced, nothing else.
    floor: Duration,
    from_template: Duration,
    seed_afresh: Duration,
    new_server: Duration,
    server_from_nothing: Duration,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn superuser_sql(docker: &bollard::Docker, server: &str, sql: &str) -> Result<()> {
    let finished = one_shot::exec(
        docker,
        server,
        plan::SERVER_USER,
        plan::psql_as_superuser("postgres"),
        sql.as_bytes().to_vec(),
    )
    .await?;
    if finished.exit_code != 0 {
        bail!("{sql}: {}", finished.stderr);
    }
    Ok(())
}

async fn one_round(
    docker: &bollard::Docker,
    image: &Image,
    seed: &Seed,
    internal: &str,
    n: usize,
) -> Result<Round> {
    // A server from nothing: a template built again (initdb, the seed, sealed, stopped).
    let template = plan::template_volume(&image.id, &seed.sql);
    database::remove_template(docker, &template).await?;
    let started = Instant::now();
    let template = database::ensure_template(docker, image, Some(seed)).await?;
    let server_from_nothing = started.elapsed();

    // A new environment's server from it: the copy, the start, the branch (its pod — a holder,
    // the refusal rules, the gate — is left out: it is the same for a server from nothing).
    let env = EnvironmentId::derive("afbench", &format!("branch-{}-{n}", std::process::id()));
    let connection = database::connection(docker, &env).await?;
    let started = Instant::now();
    let volume = plan::data_volume(&env);
    database::fresh_data(docker, &env, image, Some(seed), &template, &volume).await?;
    let server = plan::server_name(&env);
    let body = plan::server(plan::Server {
        image: &image.reference,
        network: internal,
        volume: &volume,
        pgdata: &image.pgdata,
        env_vars: Vec::new(),
        labels: af_docker::names::labels(&env, plan::ROLE),
    });
    one_shot::create_and_start(docker, &server, body, &[]).await?;
    database::wait_ready(docker, &server).await?;
    database::branch(docker, &server, &connection).await?;
    let new_server = started.elapsed();
    let started = Instant::now();
    one_shot::exec(
        docker,
        &server,
        plan::SERVER_USER,
        vec!["true".into()],
        Vec::new(),
    )
    .await?;
    let exec = started.elapsed();

    // In that server: a branch from the template (as af db reset makes it) ...
    let started = Instant::now();
    superuser_sql(docker, &server, &plan::reset_sql(&connection.database)).await?;
    let from_template = started.elapsed();

    // The floor of any branch made by copying: the template database's files copied and synced
    // in the server's data volume, nothing else.
    let oid = one_shot::exec(
        docker,
        &server,
        plan::SERVER_USER,
        [
            plan::psql_as_superuser("postgres"),
            [
                "-tA",
                "-c",
                "SELECT oid FROM pg_database WHERE datname = 'af_template'",
            ]
            .map(String::from)
            .to_vec(),
        ]
        .concat(),
        Vec::new(),
    )
    .await?
    .stdout
    .trim()
    .to_string();
    let floor_copy = |script: &str| {
        vec![
            "sh".to_string(),
            "-c".to_string(),
            script.to_string(),
            image.pgdata.clone(),
            oid.clone(),
        ]
    };
    let started = Instant::now();
    let copied = one_shot::exec(
        docker,
        &server,
        plan::SERVER_USER,
        floor_copy("cp -r \"$0/base/$1\" \"$0/af-bench-floor\" && sync \"$0/af-bench-floor\"/*"),
        Vec::new(),
    )
    .await?;
    let floor = started.elapsed();
    if copied.exit_code != 0 {
        bail!("copying the template's files: {}", copied.stderr);
    }
    one_shot::exec(
        docker,
        &server,
        plan::SERVER_USER,
        floor_copy("rm -rf \"$0/af-bench-floor\""),
        Vec::new(),
    )
    .await?;

    // ... against a new database with the seed applied afresh, as the template got it.
    let started = Instant::now();
    superuser_sql(
        docker,
        &server,
        &format!("CREATE DATABASE fresh OWNER {};", plan::OWNER),
    )
    .await?;
    let applied = one_shot::exec(
        docker,
        &server,
        plan::SERVER_USER,
        plan::apply_seed("fresh"),
        seed.sql.clone(),
    )
    .await?;
    if applied.exit_code != 0 {
        bail!("the seed: {}", applied.stderr);
    }
    let seed_afresh = started.elapsed();

    af_docker::teardown::down(docker, &env).await?;
    Ok(Round {
        exec,
        floor,
        from_template,
        seed_afresh,
        new_server,
        server_from_nothing,
    })
}

pub async fn run(options: Options) -> Result<()> {
    let docker = af_docker::connect().await?;
    let image = database::image(&docker, &options.image)
        .await
        .with_context(|| format!("the database image {}", options.image))?;
    // The servers' network: internal, of the benchmark's own, removed after.
    let internal = format!("afbench-branch-{}", std::process::id());
    docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: internal.clone(),
            internal: Some(true),
            ..Default::default()
        })
        .await?;
    println!(
        "af-bench branch: {} on {}, {} rounds after one warm-up per seed form",
        options.image,
        image.id.chars().take(19).collect::<String>(),
        options.rounds
    );
    let mut result = Ok(());
    for form in [Form::Copy, Form::Insert] {
        result = measure(&docker, &image, &internal, &options, form).await;
        if result.is_err() {
            break;
        }
    }
    let _ = docker.remove_network(&internal).await;
    result
}

async fn measure(
    docker: &bollard::Docker,
    image: &Image,
    internal: &str,
    options: &Options,
    form: Form,
) -> Result<()> {
    let seed = Seed {
        file: format!("generated {} MB seed", options.seed_mb),
        sql: seed_sql(options.seed_mb, form),
    };
    println!(
        "\nseed: {:.1} MB of SQL, rows by {}",
        seed.sql.len() as f64 / (1 << 20) as f64,
        match form {
            Form::Copy => "COPY (pg_dump's default)",
            Form::Insert => "one INSERT each (pg_dump --inserts, most hand-written seeds)",
        }
    );
    println!(
        "{:>5} {:>14} {:>12} {:>7} {:>12} {:>14} {:>7}",
        "round", "from template", "seed afresh", "ratio", "new server", "from nothing", "ratio"
    );
    one_round(docker, image, &seed, internal, 0).await?;
    let mut rounds = Vec::new();
    for n in 1..=options.rounds {
        let round = one_round(docker, image, &seed, internal, n).await?;
        println!(
            "{n:>5} {:>14.3} {:>12.3} {:>7.3} {:>12.3} {:>14.3} {:>7.3}",
            round.from_template.as_secs_f64(),
            round.seed_afresh.as_secs_f64(),
            round.from_template.as_secs_f64() / round.seed_afresh.as_secs_f64(),
            round.new_server.as_secs_f64(),
            round.server_from_nothing.as_secs_f64(),
            round.new_server.as_secs_f64() / round.server_from_nothing.as_secs_f64(),
        );
        rounds.push(round);
    }
    let of =
        |f: fn(&Round) -> Duration| median(rounds.iter().map(|r| f(r).as_secs_f64()).collect());
    let (template, afresh) = (of(|r| r.from_template), of(|r| r.seed_afresh));
    let (new_server, nothing) = (of(|r| r.new_server), of(|r| r.server_from_nothing));
    let (exec, floor) = (of(|r| r.exec), of(|r| r.floor));
    println!(
        "median: a branch from the template {template:.3} s vs the seed applied afresh {afresh:.3} s, ratio {:.3} (target <= 0.2); of each, {exec:.3} s is the exec into the server",
        template / afresh
    );
    println!(
        "floor: the template's files copied and synced, nothing else, {floor:.3} s = {:.3} of the seed afresh (no branch made by copying goes under it)",
        floor / afresh
    );
    println!(
        "median: a new environment's server (copy, start, branch) {new_server:.3} s vs a server from nothing with the seed {nothing:.3} s, ratio {:.3}",
        new_server / nothing
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_is_about_the_size_asked_in_either_form() {
        let copy = String::from_utf8(seed_sql(1, Form::Copy)).unwrap();
        assert!(copy.len() >= 1 << 20 && copy.len() < (1 << 20) + 4096);
        assert!(copy.contains("\n\\.\nCREATE INDEX"));
        assert_eq!(copy.lines().filter(|l| l.starts_with("COPY")).count(), 1);
        let insert = String::from_utf8(seed_sql(1, Form::Insert)).unwrap();
        assert!(insert.len() >= 1 << 20 && insert.len() < (1 << 20) + 4096);
        assert!(!insert.contains("COPY"));
        assert!(
            insert
                .lines()
                .nth(1)
                .unwrap()
                .starts_with("INSERT INTO events")
        );
    }
}
