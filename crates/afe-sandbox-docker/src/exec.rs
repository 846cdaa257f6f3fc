//! A command in one of a sandbox's containers through the Engine API's exec: stdin written while
//! stdout and stderr are read (a command that prints before it has read everything cannot block
//! the other side), each piece of output handed on as it arrives and kept up to a bound, the exit
//! status read from the daemon once the output ends.

use std::pin::Pin;

use afe_sandbox::{ExecOutput, OutputChunk, SandboxError};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// What to run, where, as whom.
#[derive(Debug)]
pub struct Command<'a> {
    pub container: &'a str,
    pub user: &'a str,
    pub argv: Vec<String>,
    /// `NAME=value`.
    pub env: Vec<String>,
    pub workdir: Option<&'a str>,
    pub stdin: Option<&'a [u8]>,
    pub output_limit: usize,
}

/// How an exec failed before it had a status.
#[derive(Debug)]
pub enum ExecFailure {
    /// The container is not there, or not running: the sandbox is gone.
    ContainerGone(String),
    /// The daemon failed otherwise.
    Daemon(String),
}

impl ExecFailure {
    /// As the port says it, for `ticket`'s sandbox.
    pub fn into_error(self, ticket: &str, operation: &str) -> SandboxError {
        match self {
            ExecFailure::ContainerGone(why) => SandboxError::Gone {
                ticket: ticket.to_string(),
                why,
            },
            ExecFailure::Daemon(detail) => SandboxError::Platform {
                operation: operation.to_string(),
                detail,
            },
        }
    }
}

/// A daemon error as an exec failure: 404 (no such container) and 409 (not running) mean the
/// container is gone.
pub fn classify(err: bollard::errors::Error) -> ExecFailure {
    match err {
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404 | 409,
            message,
        } => ExecFailure::ContainerGone(message),
        other => ExecFailure::Daemon(other.to_string()),
    }
}

/// Starts `command` attached: its output stream and, when `stdin` is set, its input.
pub async fn start(
    docker: &Docker,
    command: &Command<'_>,
) -> Result<
    (
        String,
        Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
        Pin<Box<dyn AsyncWrite + Send>>,
    ),
    ExecFailure,
> {
    let created = docker
        .create_exec(
            command.container,
            ExecConfig {
                cmd: Some(command.argv.clone()),
                user: Some(command.user.to_string()),
                env: (!command.env.is_empty()).then(|| command.env.clone()),
                working_dir: command.workdir.map(str::to_string),
                attach_stdin: Some(command.stdin.is_some()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(classify)?;
    let started = docker
        .start_exec(
            &created.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                // Reads of up to 64 KiB: a bundle on stdout is not cut into 8 KiB frames.
                output_capacity: Some(64 << 10),
            }),
        )
        .await
        .map_err(classify)?;
    match started {
        StartExecResults::Attached { output, input } => Ok((created.id, output, input)),
        StartExecResults::Detached => Err(ExecFailure::Daemon(
            "the daemon started the command detached".to_string(),
        )),
    }
}

/// Runs `command` to its end; `Ok` with its status and bounded output, each piece handed to
/// `on_output` as it arrives.
pub async fn run(
    docker: &Docker,
    command: &Command<'_>,
    on_output: &mut (dyn FnMut(&OutputChunk) + Send),
) -> Result<ExecOutput, ExecFailure> {
    let (id, mut output, mut input) = start(docker, command).await?;
    let stdin = command.stdin;
    let write = async move {
        if let Some(bytes) = stdin {
            // A command that exits without reading all of it closes the pipe: not an error here,
            // its status says what happened.
            let _ = input.write_all(bytes).await;
            let _ = input.shutdown().await;
        }
        Ok::<_, ExecFailure>(())
    };
    let limit = command.output_limit;
    let read = async {
        let mut kept = ExecOutput::default();
        while let Some(piece) = output.next().await {
            let chunk = match piece.map_err(classify)? {
                LogOutput::StdOut { message } => OutputChunk::Stdout(message.to_vec()),
                LogOutput::StdErr { message } => OutputChunk::Stderr(message.to_vec()),
                LogOutput::Console { message } => OutputChunk::Stdout(message.to_vec()),
                LogOutput::StdIn { .. } => continue,
            };
            on_output(&chunk);
            kept.absorb(&chunk, limit);
        }
        Ok::<_, ExecFailure>(kept)
    };
    let (_, kept) = tokio::try_join!(write, read)?;
    let status = exit_status(docker, &id, command.container).await?;
    // Killed by a signal: by its own doing (the memory limit, a kill it sent), or because its
    // container died, which the daemon may not have recorded yet. A second command tells them
    // apart for certain: nothing can start in a container whose first process is gone.
    if status > 128 && !still_runs_commands(docker, command).await {
        return Err(ExecFailure::ContainerGone(format!(
            "container {} stopped while the command ran (it ended with status {status})",
            command.container
        )));
    }
    Ok(ExecOutput { status, ..kept })
}

/// Whether `true` still runs to success in the command's container, as the command's user.
async fn still_runs_commands(docker: &Docker, command: &Command<'_>) -> bool {
    let probe = Command {
        argv: vec!["true".to_string()],
        env: Vec::new(),
        workdir: None,
        stdin: None,
        output_limit: 0,
        ..*command
    };
    let Ok((id, mut output, _)) = start(docker, &probe).await else {
        return false;
    };
    while let Some(Ok(_)) = output.next().await {}
    matches!(exit_status(docker, &id, probe.container).await, Ok(0))
}

/// The exit status of an exec whose output has ended. The daemon may record it a moment after the
/// stream closes, so it is asked again (for up to ten seconds) while the exec still shows as
/// running and its container runs; a container that stopped took the command with it.
async fn exit_status(docker: &Docker, id: &str, container: &str) -> Result<i64, ExecFailure> {
    for _ in 0..1000 {
        let inspected = docker.inspect_exec(id).await.map_err(classify)?;
        if inspected.running != Some(true)
            && let Some(status) = inspected.exit_code
        {
            return Ok(status);
        }
        if !container_runs(docker, container).await? {
            return Err(ExecFailure::ContainerGone(format!(
                "container {container} stopped while the command ran"
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Err(ExecFailure::Daemon(
        "the daemon reported no exit status ten seconds after the command's output ended"
            .to_string(),
    ))
}

/// Whether `container` runs; a container that is not there does not.
pub async fn container_runs(docker: &Docker, container: &str) -> Result<bool, ExecFailure> {
    match docker
        .inspect_container(
            container,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
    {
        Ok(found) => Ok(found.state.and_then(|s| s.running).unwrap_or(false)),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(false),
        Err(err) => Err(classify(err)),
    }
}

/// Starts `command` with its standard input and output joined into one byte stream the caller
/// speaks a protocol over (a control API request through `af-proxy connect`); its stderr is
/// dropped. The relay ends when either side closes.
pub async fn duplex(
    docker: &Docker,
    command: &Command<'_>,
) -> Result<impl AsyncRead + AsyncWrite + Unpin + Send + 'static, ExecFailure> {
    let (_, mut output, mut input) = start(docker, command).await?;
    let (ours, theirs) = tokio::io::duplex(64 << 10);
    let (mut from_caller, mut to_caller) = tokio::io::split(theirs);
    tokio::spawn(async move {
        let upstream = async {
            let _ = tokio::io::copy(&mut from_caller, &mut input).await;
            let _ = input.shutdown().await;
        };
        let downstream = async {
            while let Some(Ok(piece)) = output.next().await {
                if let LogOutput::StdOut { message } | LogOutput::Console { message } = piece
                    && to_caller.write_all(&message).await.is_err()
                {
                    break;
                }
            }
            let _ = to_caller.shutdown().await;
        };
        tokio::join!(upstream, downstream);
    });
    Ok(ours)
}

/// How the attached command's wrapper says its process id: the first line of its stdout, before
/// the command's own output. A POSIX shell is in every sandbox image (docs/afe-sandbox.md).
const SAY_PID: &str = "echo \"$$\"; exec \"$@\"";

/// Starts `command` attached ([`afe_sandbox::Attached`]): stdin fed from a channel, output pumped
/// into one, the status sent once the output ends, and a kill that works from outside: the
/// command is started through a shell that says its pid and then becomes the command, so a kill
/// is `kill -KILL <pid>` run as the same user in the same container. `ticket` names the sandbox in
/// a status that says it is gone.
pub async fn attach(
    docker: &Docker,
    command: &Command<'_>,
    ticket: &str,
) -> Result<afe_sandbox::Attached, ExecFailure> {
    let mut argv: Vec<String> = ["sh", "-c", SAY_PID, "sh"].map(String::from).to_vec();
    argv.extend(command.argv.iter().cloned());
    let wrapped = Command {
        argv,
        env: command.env.clone(),
        stdin: Some(&[]),
        ..*command
    };
    let (id, mut output, mut input) = start(docker, &wrapped).await?;
    let (stdin_tx, mut stdin_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let (output_tx, output_rx) = tokio::sync::mpsc::channel::<OutputChunk>(64);
    let (status_tx, status_rx) = tokio::sync::oneshot::channel();
    let (kill_tx, mut kill_rx) = tokio::sync::oneshot::channel::<()>();
    let docker = docker.clone();
    let container = command.container.to_string();
    let user = command.user.to_string();
    let ticket = ticket.to_string();
    let feed = tokio::spawn(async move {
        while let Some(bytes) = stdin_rx.recv().await {
            if input.write_all(&bytes).await.is_err() || input.flush().await.is_err() {
                break;
            }
        }
        let _ = input.shutdown().await;
    });
    tokio::spawn(async move {
        let kill = |pid: String| {
            let (docker, container, user) = (docker.clone(), container.clone(), user.clone());
            async move {
                let kill = Command {
                    container: &container,
                    user: &user,
                    // The shell's own kill: images need not have /bin/kill (procps).
                    argv: ["sh", "-c", "kill -KILL \"$1\"", "sh", &pid]
                        .map(String::from)
                        .to_vec(),
                    env: Vec::new(),
                    workdir: None,
                    stdin: None,
                    output_limit: 4096,
                };
                let _ = run(&docker, &kill, &mut |_| {}).await;
            }
        };
        // The wrapper's first line is its pid; until it is read, a kill waits for it.
        let mut pid: Option<Option<String>> = None;
        let mut first_line = Vec::new();
        let mut kill_wanted = false;
        loop {
            let piece = tokio::select! {
                piece = output.next() => piece,
                _ = &mut kill_rx, if !kill_wanted => {
                    kill_wanted = true;
                    if let Some(Some(pid)) = &pid {
                        kill(pid.clone()).await;
                    }
                    continue;
                }
            };
            let Some(Ok(piece)) = piece else { break };
            let chunk = match piece {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    let mut bytes = message.to_vec();
                    if pid.is_none() {
                        first_line.extend_from_slice(&bytes);
                        let Some(end) = first_line.iter().position(|b| *b == b'\n') else {
                            continue;
                        };
                        let said = String::from_utf8_lossy(&first_line[..end])
                            .trim()
                            .to_string();
                        let said = Some(said).filter(|p| p.parse::<u32>().is_ok());
                        if kill_wanted && let Some(pid) = &said {
                            kill(pid.clone()).await;
                        }
                        pid = Some(said);
                        bytes = first_line.split_off(end + 1);
                        if bytes.is_empty() {
                            continue;
                        }
                    }
                    OutputChunk::Stdout(bytes)
                }
                LogOutput::StdErr { message } => OutputChunk::Stderr(message.to_vec()),
                LogOutput::StdIn { .. } => continue,
            };
            // Nobody reading any more is not a reason to stop reading: the command would block
            // on a full pipe. Its output goes nowhere until it ends or is killed.
            let _ = output_tx.send(chunk).await;
        }
        feed.abort();
        let status = exit_status(&docker, &id, &container)
            .await
            .map_err(|e| e.into_error(&ticket, "running an attached command"));
        let _ = status_tx.send(status);
    });
    Ok(afe_sandbox::Attached {
        stdin: stdin_tx,
        output: output_rx,
        status: status_rx,
        kill: kill_tx,
    })
}
