//! Containers that run once to completion — the refusal rules, migrations, the probe's own holder
//! — started under exactly the rules a service gets: the environment's network only, no
//! capabilities, no new privileges, a read-only root, af's labels; and the engine run inside a
//! running holder (the probe, the gates).

use af_manifest::EnvironmentId;
use af_runtime::RuntimeErrorKind;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, ContainerInspectResponse};
use bollard::query_parameters::{CreateContainerOptions, LogsOptions, RemoveContainerOptions};
use futures_util::StreamExt;

use crate::error::{DockerError, platform};
use crate::names;

pub use crate::plan::containers::{HOLDER_ROOT, OneShot, UNPRIVILEGED};

/// What ran, and what it printed.
#[derive(Debug, Clone)]
pub struct Finished {
    pub exit_code: i64,
    pub stdout: String,
    pub stderr: String,
}

/// af's container `name` of `env` as the daemon reports it, `None` when there is none; one with
/// our name that is not ours is refused (AF-RUN-045), never touched.
pub(crate) async fn inspect_ours(
    docker: &Docker,
    name: &str,
    env: &EnvironmentId,
) -> Result<Option<ContainerInspectResponse>, DockerError> {
    match docker
        .inspect_container(
            name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
    {
        Ok(found) => {
            if !names::is_ours(found.config.as_ref().and_then(|c| c.labels.as_ref()), env) {
                return Err(DockerError::Runtime(
                    RuntimeErrorKind::NotOurs {
                        object_kind: "container".into(),
                        name: name.to_string(),
                    }
                    .into(),
                ));
            }
            Ok(Some(found))
        }
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(err) => Err(platform(format!("inspecting container {name}"), err)),
    }
}

/// Removes a leftover container of this name when it is ours; refuses (AF-RUN-045) when it is not.
pub async fn clear(docker: &Docker, name: &str, env: &EnvironmentId) -> Result<(), DockerError> {
    match inspect_ours(docker, name, env).await? {
        Some(_) => remove(docker, name).await,
        None => Ok(()),
    }
}

/// Whether af's container `name` exists, runs, and was created from `spec` (its spec label). One
/// with our name that is not ours is refused (AF-RUN-045).
pub async fn running_with_spec(
    docker: &Docker,
    name: &str,
    env: &EnvironmentId,
    spec: &str,
) -> Result<bool, DockerError> {
    Ok(inspect_ours(docker, name, env).await?.is_some_and(|found| {
        let same = found
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(names::SPEC_LABEL))
            .map(String::as_str)
            == Some(spec);
        same && found.state.and_then(|s| s.running).unwrap_or(false)
    }))
}

/// Creates container `name` from `body`, attaches it to `also_on` networks, and starts it.
pub async fn create_and_start(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
    also_on: &[&str],
) -> Result<(), DockerError> {
    create(docker, name, body, also_on).await?;
    start(docker, name).await
}

/// Creates container `name` from `body` and attaches it to `also_on` networks, without starting
/// it: nothing of it runs yet.
pub async fn create(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
    also_on: &[&str],
) -> Result<(), DockerError> {
    let options = CreateContainerOptions {
        name: Some(name.to_string()),
        ..Default::default()
    };
    docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| platform(format!("creating container {name}"), e))?;
    for network in also_on {
        docker
            .connect_network(
                network,
                bollard::models::NetworkConnectRequest {
                    container: name.to_string(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| platform(format!("attaching {name} to {network}"), e))?;
    }
    Ok(())
}

/// Starts the created container `name`.
pub async fn start(docker: &Docker, name: &str) -> Result<(), DockerError> {
    docker
        .start_container(
            name,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .map_err(|e| platform(format!("starting container {name}"), e))
}

pub async fn remove(docker: &Docker, name: &str) -> Result<(), DockerError> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(name, Some(options)).await {
        Ok(())
        | Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(err) => Err(platform(format!("removing container {name}"), err)),
    }
}

/// Runs `spec` to completion and removes it.
pub async fn run(
    docker: &Docker,
    env: &EnvironmentId,
    spec: &OneShot,
) -> Result<Finished, DockerError> {
    let name = names::container(env, &spec.role);
    clear(docker, &name, env).await?;
    // Every step as the image's unprivileged user (or `user`) with no capability at all; the one
    // step that needs one, the refusal rules, runs in a holder (`apply_refusal`).
    let body = crate::plan::containers::one_shot(env, spec);
    let result = match create_and_start(docker, &name, body, &[]).await {
        Ok(()) => collect(docker, &name).await,
        Err(err) => Err(err),
    };
    remove(docker, &name).await?;
    result
}

/// Waits for a started one-shot to finish and reads what it printed.
async fn collect(docker: &Docker, name: &str) -> Result<Finished, DockerError> {
    let exit_code = match docker
        .wait_container(
            name,
            None::<bollard::query_parameters::WaitContainerOptions>,
        )
        .next()
        .await
    {
        Some(Ok(response)) => response.status_code,
        // A non-zero exit arrives as an error carrying the code.
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
        Some(Err(err)) => return Err(platform(format!("waiting for container {name}"), err)),
        None => {
            return Err(platform(
                format!("waiting for container {name}"),
                "the wait ended without a status",
            ));
        }
    };
    let mut logs = docker.logs(
        name,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            tail: "all".to_string(),
            ..Default::default()
        }),
    );
    let (stdout, stderr) = read_output(&mut logs, || format!("reading the logs of {name}")).await?;
    Ok(Finished {
        exit_code,
        stdout,
        stderr,
    })
}

/// A container's or an exec's output, to its end: (stdout, stderr). `what` names the reading for
/// an error.
async fn read_output(
    output: &mut (impl futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin),
    what: impl Fn() -> String,
) -> Result<(String, String), DockerError> {
    let (mut stdout, mut stderr) = (String::new(), String::new());
    while let Some(chunk) = output.next().await {
        match chunk.map_err(|e| platform(what(), e))? {
            LogOutput::StdOut { message } => stdout.push_str(&String::from_utf8_lossy(&message)),
            LogOutput::StdErr { message } => stderr.push_str(&String::from_utf8_lossy(&message)),
            _ => {}
        }
    }
    Ok((stdout, stderr))
}

/// Runs the engine binary with `args` inside `holder`, a running holder: in its namespaces, as the
/// engine's unprivileged user with no capability — exactly a workload's standing, without the
/// create, start and remove of a container of its own (a third of the time). What it printed, and
/// its exit code.
pub async fn exec_in_holder(
    docker: &Docker,
    holder: &str,
    args: &[String],
) -> Result<Finished, DockerError> {
    exec_in_holder_as(docker, holder, UNPRIVILEGED, args).await
}

/// [`exec_in_holder`] as `user`: [`HOLDER_ROOT`] for a trusted step that needs the holder's
/// NET_ADMIN.
pub async fn exec_in_holder_as(
    docker: &Docker,
    holder: &str,
    user: &str,
    args: &[String],
) -> Result<Finished, DockerError> {
    let what = || {
        format!(
            "running {} in {holder}",
            args.first().map_or("", String::as_str)
        )
    };
    // The engine binary is the holder's entrypoint, wherever an AF_PROXY_IMAGE keeps it.
    let inspected = docker
        .inspect_container(
            holder,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .map_err(|e| platform(what(), e))?;
    let mut cmd = inspected
        .config
        .and_then(|c| c.entrypoint)
        .filter(|e| !e.is_empty())
        .ok_or_else(|| platform(what(), "the holder has no entrypoint: not an engine image"))?;
    cmd.extend(args.iter().cloned());
    exec(docker, holder, user, cmd, Vec::new()).await
}

/// Runs `cmd` in the running container `container` as `user`, with `input` on its standard
/// input (closed after it): what it printed, and its exit code.
pub async fn exec(
    docker: &Docker,
    container: &str,
    user: &str,
    cmd: Vec<String>,
    input: Vec<u8>,
) -> Result<Finished, DockerError> {
    let program = cmd.first().cloned().unwrap_or_default();
    let what = || format!("running {program} in {container}");
    let created = docker
        .create_exec(
            container,
            bollard::models::ExecConfig {
                cmd: Some(cmd),
                user: Some(user.to_string()),
                attach_stdin: Some(!input.is_empty()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| platform(what(), e))?;
    let started = docker
        .start_exec(&created.id, None::<bollard::exec::StartExecOptions>)
        .await
        .map_err(|e| platform(what(), e))?;
    let (stdout, stderr) = match started {
        bollard::exec::StartExecResults::Attached {
            mut output,
            input: mut stdin,
        } => {
            // Written while the output is read: a program that prints as it reads would
            // otherwise fill its pipe and stop.
            // Standard input is attached only when there is some.
            let write = async {
                use tokio::io::AsyncWriteExt;
                if input.is_empty() {
                    return Ok(());
                }
                stdin.write_all(&input).await?;
                stdin.flush().await?;
                stdin.shutdown().await
            };
            let (written, read) = tokio::join!(write, read_output(&mut output, what));
            written.map_err(|e| platform(what(), e))?;
            read?
        }
        bollard::exec::StartExecResults::Detached => (String::new(), String::new()),
    };
    let inspected = docker
        .inspect_exec(&created.id)
        .await
        .map_err(|e| platform(what(), e))?;
    let exit_code = inspected.exit_code.ok_or_else(|| {
        platform(
            what(),
            "the daemon reported no exit code after the output ended",
        )
    })?;
    Ok(Finished {
        exit_code,
        stdout,
        stderr,
    })
}

/// Starts the holder of a pod's network namespace on `network` ([`crate::plan::containers::holder`]). Other
/// containers join it with `container:<name>`.
pub async fn start_holder(
    docker: &Docker,
    env: &EnvironmentId,
    role: &str,
    image: &str,
    network: &str,
) -> Result<String, DockerError> {
    let name = names::container(env, role);
    clear(docker, &name, env).await?;
    let body = crate::plan::containers::holder(crate::plan::containers::Holder {
        env,
        role,
        engine_image: image,
        network,
        dns: None,
        alias: None,
        spec: None,
    });
    create_and_start(docker, &name, body, &[]).await?;
    Ok(name)
}

/// Applies the refusal rules (`args`: `refuse-outside ...`) in `holder`'s namespace: an `exec` as
/// root, with the holder's one capability, NET_ADMIN. A refusal that did not apply is AF-RUN-051.
pub async fn apply_refusal(
    docker: &Docker,
    holder: &str,
    args: &[String],
) -> Result<(), DockerError> {
    let applied = exec_in_holder_as(docker, holder, HOLDER_ROOT, args).await?;
    if applied.exit_code != 0 {
        return Err(DockerError::Runtime(
            af_runtime::RuntimeErrorKind::NetlockFailed {
                place: format!("the holder {holder}"),
                detail: format!("the refusal rules did not apply: {}", applied.stderr.trim()),
            }
            .into(),
        ));
    }
    Ok(())
}
