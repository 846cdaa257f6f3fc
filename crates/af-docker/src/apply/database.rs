//! An environment's database on the daemon ([`crate::plan::database`] says what and why): the
//! template volume built once per (image, seed), the environment's server started from a copy of
//! it, the branch made in it, and the reads and resets `af status` and `af db` need.

use std::time::Duration;

use af_manifest::EnvironmentId;
use af_runtime::{DatabaseStatus, RuntimeErrorKind, ShellOutput};
use bollard::Docker;
use bollard::models::VolumeCreateRequest;

use crate::error::{DockerError, platform};
use crate::names;
use crate::one_shot::{self, Finished};
use crate::plan::database::{self as plan, Connection};

/// How long a server may take to accept connections (a template's includes initdb).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const READY_POLL: Duration = Duration::from_millis(100);
/// How long a template's server may take to shut down cleanly before it is killed (what it
/// committed survives either way).
const STOP_TIMEOUT_S: i32 = 30;

/// The database image as the daemon has it: its id and its data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub reference: String,
    pub id: String,
    pub pgdata: String,
}

/// `reference` as the daemon has it; AF-RUN-066 when it is not on this machine (nothing is
/// pulled).
pub async fn image(docker: &Docker, reference: &str) -> Result<Image, DockerError> {
    match docker.inspect_image(reference).await {
        Ok(found) => {
            let pgdata = found
                .config
                .and_then(|c| c.env)
                .unwrap_or_default()
                .iter()
                .find_map(|v| v.strip_prefix("PGDATA=").map(str::to_string))
                .unwrap_or_else(|| plan::DEFAULT_PGDATA.to_string());
            Ok(Image {
                reference: reference.to_string(),
                id: found.id.unwrap_or_else(|| reference.to_string()),
                pgdata,
            })
        }
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Err(DockerError::Runtime(
            RuntimeErrorKind::DatabaseImageMissing {
                image: reference.to_string(),
            }
            .into(),
        )),
        Err(err) => Err(platform(format!("inspecting image {reference}"), err)),
    }
}

/// The seed: the file as the manifest names it, and its content.
#[derive(Clone, Debug)]
pub struct Seed {
    pub file: String,
    pub sql: Vec<u8>,
}

/// The connection string's parts for `env`: the password its server already has (a second `up`
/// keeps the services as they run), or a new one.
pub async fn connection(docker: &Docker, env: &EnvironmentId) -> Result<Connection, DockerError> {
    let existing = one_shot::inspect_ours(docker, &plan::server_name(env), env)
        .await?
        .and_then(|c| c.config)
        .and_then(|c| c.labels)
        .and_then(|mut l| l.remove(plan::PASSWORD_LABEL));
    let password = match existing {
        Some(password) => password,
        None => plan::new_password().map_err(|e| platform("making the database password", e))?,
    };
    Ok(Connection::for_environment(env, password))
}

/// The template volume for `image` and `seed`, built when there is none: a server on no network
/// applies the seed into [`plan::TEMPLATE_DATABASE`] as [`plan::OWNER`], seals it, and stops.
pub async fn ensure_template(
    docker: &Docker,
    image: &Image,
    seed: Option<&Seed>,
) -> Result<String, DockerError> {
    let volume = plan::template_volume(&image.id, seed.map_or(&[][..], |s| &s.sql));
    match docker.inspect_volume(&volume).await {
        Ok(found) if plan::is_template(&found.labels) => return Ok(volume),
        Ok(_) => return Err(not_ours("volume", &volume)),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        Err(err) => return Err(platform(format!("inspecting volume {volume}"), err)),
    }
    build_template(docker, image, seed, &volume).await?;
    Ok(volume)
}

/// Builds template `volume` again from nothing (one a copy found unfinished).
pub async fn rebuild_template(
    docker: &Docker,
    image: &Image,
    seed: Option<&Seed>,
    volume: &str,
) -> Result<(), DockerError> {
    remove_template(docker, volume).await?;
    build_template(docker, image, seed, volume).await
}

/// Removes template `volume` when it is one of af's (AF-RUN-045 when a volume of that name is
/// not), so that the next [`ensure_template`] builds it.
pub async fn remove_template(docker: &Docker, volume: &str) -> Result<(), DockerError> {
    match docker.inspect_volume(volume).await {
        Ok(found) if !plan::is_template(&found.labels) => Err(not_ours("volume", volume)),
        Ok(_) => remove_volume(docker, volume).await,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(err) => Err(platform(format!("inspecting volume {volume}"), err)),
    }
}

async fn build_template(
    docker: &Docker,
    image: &Image,
    seed: Option<&Seed>,
    volume: &str,
) -> Result<(), DockerError> {
    let builder = format!("{volume}-build");
    // A builder left by an interrupted build is ours to remove; a foreign one is never touched.
    match docker
        .inspect_container(
            &builder,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
    {
        Ok(found) => {
            let labels = found.config.and_then(|c| c.labels).unwrap_or_default();
            if !plan::is_template(&labels) {
                return Err(not_ours("container", &builder));
            }
            one_shot::remove(docker, &builder).await?;
        }
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        Err(err) => return Err(platform(format!("inspecting container {builder}"), err)),
    }
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.to_string()),
            labels: Some(plan::template_labels(&image.reference)),
            ..Default::default()
        })
        .await
        .map_err(|e| platform(format!("creating volume {volume}"), e))?;
    let built = async {
        // initdb needs a superuser password; nothing keeps it, and the setup removes it.
        let initdb_password =
            plan::new_password().map_err(|e| platform("making the database password", e))?;
        let body = plan::server(plan::Server {
            image: &image.reference,
            network: "none",
            volume,
            pgdata: &image.pgdata,
            env_vars: vec![format!("POSTGRES_PASSWORD={initdb_password}")],
            labels: plan::template_labels(&image.reference),
        });
        one_shot::create_and_start(docker, &builder, body, &[]).await?;
        wait_ready(docker, &builder).await?;
        superuser(docker, &builder, "postgres", plan::template_setup_sql()).await?;
        if let Some(seed) = seed {
            let cmd = plan::apply_seed(plan::TEMPLATE_DATABASE);
            let applied =
                one_shot::exec(docker, &builder, plan::SERVER_USER, cmd, seed.sql.clone()).await?;
            if applied.exit_code != 0 {
                return Err(DockerError::Runtime(
                    RuntimeErrorKind::SeedFailed {
                        file: seed.file.clone(),
                        detail: last_lines(&applied.stderr, 8),
                    }
                    .into(),
                ));
            }
        }
        superuser(docker, &builder, "postgres", plan::template_seal_sql()).await?;
        let marker = format!("{}/{}", image.pgdata, plan::TEMPLATE_READY);
        let touched = one_shot::exec(
            docker,
            &builder,
            plan::SERVER_USER,
            vec!["touch".into(), marker],
            Vec::new(),
        )
        .await?;
        check(&touched, "marking the database template finished")?;
        docker
            .stop_container(
                &builder,
                Some(bollard::query_parameters::StopContainerOptions {
                    t: Some(STOP_TIMEOUT_S),
                    ..Default::default()
                }),
            )
            .await
            .map_err(|e| platform(format!("stopping {builder}"), e))?;
        Ok::<_, DockerError>(())
    }
    .await;
    one_shot::remove(docker, &builder).await?;
    if built.is_err() {
        // An unfinished template is never left to be copied.
        remove_volume(docker, volume).await?;
    }
    built
}

/// The environment's server after [`prepare_server`].
#[derive(Debug)]
pub enum PreparedServer {
    /// It runs as specified, in its pod, with its data: only the branch is checked.
    Current,
    /// Its data volume is ready and its pod's holder holds the refusal rules; the gate and the
    /// server are next.
    Fresh { template: String, spec: String },
}

/// The part of the environment's server that runs nothing of its image on a network: its
/// template (built when there is none), its data volume (a copy of the template, unless a server
/// of the same specification already had one: it keeps its data) and its pod's holder with the
/// refusal rules, placed `at` the services' network as a service's is. `up` does this while the
/// probe runs; [`start_server`] does the rest after the verdict.
pub async fn prepare_server(
    docker: &Docker,
    at: crate::service::Placement<'_>,
    image: &Image,
    seed: Option<&Seed>,
) -> Result<PreparedServer, DockerError> {
    let env = at.env;
    let template = ensure_template(docker, image, seed).await?;
    let name = plan::server_name(env);
    let holder = plan::holder_name(env);
    let spec = plan::server_spec(&image.id, &template, at.internal);
    let found = one_shot::inspect_ours(docker, &name, env).await?;
    let same = found.as_ref().is_some_and(|c| {
        c.config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(names::SPEC_LABEL))
            == Some(&spec)
    });
    let running = found
        .as_ref()
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.running)
        .unwrap_or(false);
    if same && running && one_shot::running_with_spec(docker, &holder, env, &spec).await? {
        return Ok(PreparedServer::Current);
    }
    one_shot::remove(docker, &name).await?;
    one_shot::clear(docker, &holder, env).await?;
    if !same {
        // A new specification (image, seed, network) starts from its template again.
        fresh_data(docker, env, image, seed, &template, &plan::data_volume(env)).await?;
    }
    crate::service::hold_with_rules(docker, at, &holder, plan::HOLDER_ROLE, None, &spec).await?;
    Ok(PreparedServer::Fresh { template, spec })
}

/// The environment's server once [`prepare_server`]d: its pod's gate, the server in the holder's
/// namespace, ready, with the branch made; `true` when it was (re)created. Needs the sidecar (the
/// gate asks it).
pub async fn start_server(
    docker: &Docker,
    at: crate::service::Placement<'_>,
    image: &Image,
    prepared: PreparedServer,
    connection: &Connection,
) -> Result<bool, DockerError> {
    let env = at.env;
    let name = plan::server_name(env);
    let created = match prepared {
        PreparedServer::Current => false,
        PreparedServer::Fresh { template, spec } => {
            let holder = plan::holder_name(env);
            crate::service::gate(docker, at, &holder, "the database").await?;
            let body = plan::server(plan::Server {
                image: &image.reference,
                network: &format!("container:{holder}"),
                volume: &plan::data_volume(env),
                pgdata: &image.pgdata,
                env_vars: Vec::new(),
                labels: plan::server_labels(env, &spec, &template, &connection.password),
            });
            one_shot::create_and_start(docker, &name, body, &[]).await?;
            true
        }
    };
    wait_ready(docker, &name).await?;
    branch(docker, &name, connection).await?;
    Ok(created)
}

/// The environment's data volume made again as a copy of `template` (built again first when a
/// copy finds it unfinished).
pub async fn fresh_data(
    docker: &Docker,
    env: &EnvironmentId,
    image: &Image,
    seed: Option<&Seed>,
    template: &str,
    volume: &str,
) -> Result<(), DockerError> {
    match docker.inspect_volume(volume).await {
        Ok(found) if !names::is_ours(Some(&found.labels), env) => {
            return Err(not_ours("volume", volume));
        }
        _ => remove_volume(docker, volume).await?,
    }
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.to_string()),
            labels: Some(names::labels(env, plan::DATA_ROLE)),
            ..Default::default()
        })
        .await
        .map_err(|e| platform(format!("creating volume {volume}"), e))?;
    let copy = plan::copy_template(&image.reference, template, volume, &image.pgdata);
    let mut copied = one_shot::run(docker, env, &copy).await?;
    if copied.exit_code == 3 {
        // Left unfinished by an interrupted build: built again, then copied.
        rebuild_template(docker, image, seed, template).await?;
        copied = one_shot::run(docker, env, &copy).await?;
    }
    check(&copied, "copying the database template")
}

/// The owner's password and the branch (made when it does not exist yet), in `server`.
pub async fn branch(
    docker: &Docker,
    server: &str,
    connection: &Connection,
) -> Result<(), DockerError> {
    superuser(
        docker,
        server,
        "postgres",
        plan::branch_sql(&connection.database, &connection.password),
    )
    .await
    .map(drop)
}

/// Waits until the server in `container` accepts connections over TCP (an image's first-start
/// setup runs a server on its socket only, which is not yet the one to use); AF-RUN-068 with its
/// last lines when it does not within [`READY_TIMEOUT`] or stops.
pub async fn wait_ready(docker: &Docker, container: &str) -> Result<(), DockerError> {
    let started = tokio::time::Instant::now();
    let deadline = started + READY_TIMEOUT;
    let probe: Vec<String> = [
        "pg_isready",
        "-q",
        "-h",
        "127.0.0.1",
        "-p",
        "5432",
        "-U",
        plan::SERVER_USER,
    ]
    .map(String::from)
    .to_vec();
    let stopped = loop {
        let ready = one_shot::exec(
            docker,
            container,
            plan::SERVER_USER,
            probe.clone(),
            Vec::new(),
        )
        .await;
        match ready {
            Ok(finished) if finished.exit_code == 0 => return Ok(()),
            // An exec into a container that stopped fails: it will not become ready.
            Err(_) if !is_running(docker, container).await => break true,
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            break false;
        }
        tokio::time::sleep(READY_POLL).await;
    };
    Err(DockerError::Runtime(
        RuntimeErrorKind::DatabaseNeverReady {
            container: container.to_string(),
            waited_s: started.elapsed().as_secs(),
            stopped,
            detail: crate::service::last_log_lines(docker, container, 8).await,
        }
        .into(),
    ))
}

async fn is_running(docker: &Docker, container: &str) -> bool {
    docker
        .inspect_container(
            container,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()
        .and_then(|c| c.state)
        .and_then(|s| s.running)
        .unwrap_or(false)
}

/// `sql` as the superuser on `database`, through the container's socket; any error is af's own
/// (the statements are its own).
async fn superuser(
    docker: &Docker,
    container: &str,
    database: &str,
    sql: String,
) -> Result<Finished, DockerError> {
    let finished = one_shot::exec(
        docker,
        container,
        plan::SERVER_USER,
        plan::psql_as_superuser(database),
        sql.into_bytes(),
    )
    .await?;
    check(&finished, format!("preparing the database in {container}"))?;
    Ok(finished)
}

fn check(finished: &Finished, operation: impl Into<String>) -> Result<(), DockerError> {
    if finished.exit_code == 0 {
        return Ok(());
    }
    Err(platform(
        operation,
        format!(
            "exit status {}: {}",
            finished.exit_code,
            last_lines(&finished.stderr, 8)
        ),
    ))
}

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join(" | ")
}

fn not_ours(object_kind: &str, name: &str) -> DockerError {
    DockerError::Runtime(
        RuntimeErrorKind::NotOurs {
            object_kind: object_kind.to_string(),
            name: name.to_string(),
        }
        .into(),
    )
}

async fn remove_volume(docker: &Docker, volume: &str) -> Result<(), DockerError> {
    match docker
        .remove_volume(
            volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await
    {
        Ok(())
        | Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(err) => Err(platform(format!("removing volume {volume}"), err)),
    }
}

/// The running server of `env`, or AF-RUN-069 saying why there is none.
async fn running_server(docker: &Docker, env: &EnvironmentId) -> Result<String, DockerError> {
    let name = plan::server_name(env);
    let no_branch = |reason: &str| {
        DockerError::Runtime(
            RuntimeErrorKind::NoDatabaseBranch {
                environment: env.to_string(),
                reason: reason.to_string(),
            }
            .into(),
        )
    };
    match one_shot::inspect_ours(docker, &name, env).await? {
        None => Err(no_branch(
            "it has no database container (its manifest has no `database: {provider: container}`, or af up has not run)",
        )),
        Some(found) if found.state.as_ref().and_then(|s| s.running) != Some(true) => Err(
            no_branch("its database container is not running (af up starts it again)"),
        ),
        Some(_) => Ok(name),
    }
}

/// The addresses the environment's server received connections from, in the order it accepted
/// them, as its log says ([`plan::connections_received`]).
pub async fn arrivals(docker: &Docker, env: &EnvironmentId) -> Vec<String> {
    let log = crate::service::last_log_lines(docker, &plan::server_name(env), 100_000).await;
    plan::connections_received(&log)
}

/// The branch as `af status` shows it; `None` when the environment has no database container.
pub async fn status(
    docker: &Docker,
    env: &EnvironmentId,
) -> Result<Option<DatabaseStatus>, DockerError> {
    let name = plan::server_name(env);
    let Some(found) = one_shot::inspect_ours(docker, &name, env).await? else {
        return Ok(None);
    };
    let running = found.state.and_then(|s| s.running).unwrap_or(false);
    let image = found.config.and_then(|c| c.image).unwrap_or_default();
    let branch = plan::branch(env);
    let size_bytes = if running {
        let mut cmd = plan::psql_as_superuser("postgres");
        cmd.extend(["-tA", "-c"].map(String::from));
        cmd.push(plan::size_sql(&branch));
        one_shot::exec(docker, &name, plan::SERVER_USER, cmd, Vec::new())
            .await
            .ok()
            .filter(|f| f.exit_code == 0)
            .and_then(|f| f.stdout.trim().parse().ok())
    } else {
        None
    };
    Ok(Some(DatabaseStatus {
        branch,
        image,
        running,
        size_bytes,
    }))
}

/// `af db reset`: the branch dropped (its sessions ended) and made again from the template.
pub async fn reset(docker: &Docker, env: &EnvironmentId) -> Result<DatabaseStatus, DockerError> {
    let name = running_server(docker, env).await?;
    superuser(
        docker,
        &name,
        "postgres",
        plan::reset_sql(&plan::branch(env)),
    )
    .await?;
    status(docker, env).await?.ok_or_else(|| {
        platform(
            "reading the database after its reset",
            "its container went away",
        )
    })
}

/// `af db psql` without a terminal: psql as the branch's owner with `args`, `input` on its
/// standard input.
pub async fn shell(
    docker: &Docker,
    env: &EnvironmentId,
    args: &[String],
    input: Vec<u8>,
) -> Result<ShellOutput, DockerError> {
    let name = running_server(docker, env).await?;
    let cmd = plan::psql_as_owner(&plan::branch(env), args);
    let finished = one_shot::exec(docker, &name, plan::SERVER_USER, cmd, input).await?;
    Ok(ShellOutput {
        stdout: finished.stdout,
        stderr: finished.stderr,
        exit_code: finished.exit_code,
    })
}

/// `af db psql` from a terminal: the `docker exec -it` command that opens psql on the branch.
pub async fn interactive_shell(
    docker: &Docker,
    env: &EnvironmentId,
    args: &[String],
) -> Result<Vec<String>, DockerError> {
    let name = running_server(docker, env).await?;
    let mut cmd: Vec<String> = ["docker", "exec", "-it", "-u", plan::SERVER_USER, &name]
        .map(String::from)
        .to_vec();
    cmd.extend(plan::psql_as_owner(&plan::branch(env), args));
    Ok(cmd)
}
