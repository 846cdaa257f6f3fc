//! A command in a Pod over the API's `pods/exec` WebSocket, on the v5 stream protocol only
//! ([`crate::channel`]): stdin written and then closed on its own (the command reads end of file
//! and goes on), stdout and stderr read as they come, concurrently, from the one connection, and
//! the exit status read from the status channel. An API server that offers only v4 is refused
//! before anything runs.

use afe_sandbox::{Attached, OutputChunk, SandboxError};
use futures_util::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::AttachParams;
use kube::client::UpgradeConnectionError;
use kube::core::Resource;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

use crate::channel::{self, Frame};

/// How many pieces of output wait for a reader before the command is held back.
const OUTPUT_QUEUE: usize = 64;
/// The exit status of a command the server could not start (the shell's "not found").
pub const NOT_STARTED: i64 = 127;

/// Why a command could not be started.
#[derive(Debug)]
pub enum ExecError {
    /// The Pod (or its container) is not there.
    Gone(String),
    /// The API server offers only the v4 stream protocol.
    V4Only,
    /// Anything else the API server or the connection said.
    Platform(String),
}

impl ExecError {
    /// As the port's error, for `ticket`, while doing `operation`.
    pub fn into_error(self, ticket: &str, operation: &str) -> SandboxError {
        match self {
            ExecError::Gone(why) => SandboxError::Gone {
                ticket: ticket.to_string(),
                why,
            },
            ExecError::V4Only => SandboxError::ExecProtocol {
                detail: "the API server answered with v4.channel.k8s.io".to_string(),
            },
            ExecError::Platform(detail) => SandboxError::Platform {
                operation: operation.to_string(),
                detail,
            },
        }
    }
}

/// Classifies a failed upgrade: the Pod is gone (404), or the server refused for another reason.
fn refused(err: kube::Error) -> ExecError {
    match err {
        kube::Error::UpgradeConnection(UpgradeConnectionError::ProtocolSwitch(status))
            if status == http::StatusCode::NOT_FOUND =>
        {
            ExecError::Gone("the Pod is not there".to_string())
        }
        kube::Error::UpgradeConnection(UpgradeConnectionError::ProtocolSwitch(status)) => {
            ExecError::Platform(format!(
                "the API server refused pods/exec with {status} (the worker's Role must allow create on pods/exec in the sandbox namespace)"
            ))
        }
        kube::Error::UpgradeConnection(UpgradeConnectionError::SecWebSocketProtocolMismatch) => {
            ExecError::Platform(
                "the API server chose no stream protocol afe speaks (v5.channel.k8s.io)"
                    .to_string(),
            )
        }
        kube::Error::Api(status) if status.code == 404 => ExecError::Gone(status.message),
        other => ExecError::Platform(other.to_string()),
    }
}

/// Starts `argv` in `container` of Pod `pod` and returns it attached: write its stdin (drop the
/// sender to close it), read its output, then its status.
pub async fn start(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    container: &str,
    argv: &[String],
) -> Result<Attached, ExecError> {
    let params = AttachParams::default()
        .container(container)
        .stdin(true)
        .stdout(true)
        .stderr(true);
    let mut request = kube::core::Request::new(Pod::url_path(&(), Some(namespace)))
        .exec(pod, argv.iter().map(String::as_str), &params)
        .map_err(|e| ExecError::Platform(e.to_string()))?;
    request.extensions_mut().insert("exec");
    let connection = client.connect(request).await.map_err(refused)?;
    if !connection.supports_stream_close() {
        return Err(ExecError::V4Only);
    }
    let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>(8);
    let (output_tx, output_rx) = mpsc::channel(OUTPUT_QUEUE);
    let (status_tx, status_rx) = oneshot::channel();
    let (kill_tx, kill_rx) = oneshot::channel();
    tokio::spawn(pump(
        connection.into_stream(),
        stdin_rx,
        output_tx,
        status_tx,
        kill_rx,
    ));
    Ok(Attached {
        stdin: stdin_tx,
        output: output_rx,
        status: status_rx,
        kill: kill_tx,
    })
}

/// Moves bytes between the connection and the channels until the command's status arrives and
/// the server closes, or the connection breaks, or the caller kills it.
async fn pump<S>(
    stream: S,
    mut stdin: mpsc::Receiver<Vec<u8>>,
    output: mpsc::Sender<OutputChunk>,
    status: oneshot::Sender<Result<i64, SandboxError>>,
    mut kill: oneshot::Receiver<()>,
) where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + futures_util::Sink<Message>
        + Unpin,
{
    let (mut sink, mut source) = stream.split();
    let mut stdin_open = true;
    let mut ended: Option<Result<i64, String>> = None;
    let mut broken: Option<String> = None;
    loop {
        tokio::select! {
            message = source.next() => match message {
                Some(Ok(Message::Binary(frame))) => match channel::read(&frame) {
                    Frame::Stdout(bytes) if !bytes.is_empty() => {
                        // A reader that went away no longer wants output; the command still ends.
                        let _ = output.send(OutputChunk::Stdout(bytes.to_vec())).await;
                    }
                    Frame::Stderr(bytes) if !bytes.is_empty() => {
                        let _ = output.send(OutputChunk::Stderr(bytes.to_vec())).await;
                    }
                    Frame::Status(text) => ended = Some(channel::exit_status(text)),
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    broken = Some(err.to_string());
                    break;
                }
            },
            bytes = stdin.recv(), if stdin_open => {
                let frame = match bytes {
                    Some(bytes) => channel::stdin(&bytes),
                    None => {
                        stdin_open = false;
                        channel::close_stdin()
                    }
                };
                if sink.send(Message::Binary(frame.into())).await.is_err() {
                    stdin_open = false;
                }
            },
            _ = &mut kill => {
                let _ = sink.close().await;
                broken = Some("killed".to_string());
                break;
            }
        }
    }
    let result = match ended {
        Some(Ok(code)) => Ok(code),
        Some(Err(message)) => {
            let _ = output
                .send(OutputChunk::Stderr(format!("{message}\n").into_bytes()))
                .await;
            Ok(NOT_STARTED)
        }
        None => Err(SandboxError::Gone {
            ticket: String::new(),
            why: format!(
                "the exec stream ended without the command's status ({}): the Pod or its container went away",
                broken.unwrap_or_else(|| "closed".to_string())
            ),
        }),
    };
    drop(output);
    let _ = status.send(result);
}
