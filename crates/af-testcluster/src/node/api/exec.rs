//! `exec`: a command in a running container of a Pod, over a WebSocket on the v5 channel protocol
//! (or v4 where the client offers nothing newer): stdin frames into a Docker exec, v5's close of
//! stdin closing its input, its stdout and stderr back as they come, and its exit status as a
//! `metav1.Status` on the error channel before the socket closes, as the kubelet writes it.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;

use super::channel::{self, CLOSE, RESIZE, STDERR, STDIN, STDOUT, V4, V5};
use super::{failure, flag, instances, query_pairs};
use crate::node::Shared;

/// What the client asked to run.
#[derive(Clone, Debug)]
struct Asked {
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

pub async fn exec(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    upgrade: WebSocketUpgrade,
) -> Response {
    let pairs = query_pairs(query.as_deref());
    let asked = Asked {
        command: pairs
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect(),
        stdin: flag(&pairs, "input"),
        stdout: flag(&pairs, "output"),
        stderr: flag(&pairs, "error"),
        tty: flag(&pairs, "tty"),
    };
    if asked.command.is_empty() {
        return failure(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 command".into(),
        );
    }
    let found = instances(&shared, &namespace, &pod, &container).await;
    let running = found
        .first()
        .filter(|c| c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING))
        .and_then(|c| c.id.clone());
    let Some(id) = running else {
        return failure(
            StatusCode::BAD_REQUEST,
            format!("container {container:?} in pod {pod:?} is not running"),
        );
    };
    let upgrade = upgrade.protocols([V5, V4]);
    let Some(protocol) = upgrade.selected_protocol().cloned() else {
        return failure(
            StatusCode::BAD_REQUEST,
            format!("this node speaks the {V5} and {V4} protocols only"),
        );
    };
    let v5 = protocol == V5;
    upgrade.on_upgrade(move |socket| session(shared, id, asked, v5, socket))
}

async fn session(shared: Arc<Shared>, id: String, asked: Asked, v5: bool, socket: WebSocket) {
    let (mut sink, mut incoming) = socket.split();
    let docker = &shared.docker;
    let created = docker
        .create_exec(
            &id,
            CreateExecOptions {
                cmd: Some(asked.command.clone()),
                attach_stdin: Some(asked.stdin),
                attach_stdout: Some(asked.stdout),
                attach_stderr: Some(asked.stderr),
                tty: Some(asked.tty),
                ..Default::default()
            },
        )
        .await;
    let created = match created {
        Ok(created) => created,
        Err(err) => {
            let _ = sink
                .send(Message::Binary(channel::failure(&err.to_string()).into()))
                .await;
            let _ = sink.close().await;
            return;
        }
    };
    let started = docker
        .start_exec(
            &created.id,
            Some(StartExecOptions {
                tty: asked.tty,
                ..Default::default()
            }),
        )
        .await;
    let (mut output, mut input) = match started {
        Ok(StartExecResults::Attached { output, input }) => (output, input),
        Ok(StartExecResults::Detached) | Err(_) => {
            let _ = sink
                .send(Message::Binary(
                    channel::failure("the exec did not attach").into(),
                ))
                .await;
            let _ = sink.close().await;
            return;
        }
    };
    let exec_id = created.id.clone();
    let resizer = shared.docker.clone();
    // What the client sends: stdin, its close (v5), resizes. Its end closes stdin.
    let reading = tokio::spawn(async move {
        while let Some(Ok(message)) = incoming.next().await {
            let data = match message {
                Message::Binary(data) => data.to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            match data.first().copied() {
                Some(STDIN) if input.write_all(&data[1..]).await.is_err() => break,
                Some(STDIN) => {}
                Some(RESIZE) => {
                    if let Some((width, height)) = channel::resize(&data[1..]) {
                        let _ = resizer
                            .resize_exec(&exec_id, ResizeExecOptions { height, width })
                            .await;
                    }
                }
                Some(CLOSE) if v5 && data.get(1) == Some(&STDIN) => {
                    let _ = input.shutdown().await;
                }
                _ => {}
            }
        }
        let _ = input.shutdown().await;
    });
    while let Some(Ok(piece)) = output.next().await {
        let framed = match piece {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                channel::frame(STDOUT, &message)
            }
            LogOutput::StdErr { message } => channel::frame(STDERR, &message),
            LogOutput::StdIn { .. } => continue,
        };
        if sink.send(Message::Binary(framed.into())).await.is_err() {
            break;
        }
    }
    let exit_code = docker
        .inspect_exec(&created.id)
        .await
        .ok()
        .and_then(|e| e.exit_code)
        .unwrap_or(-1);
    let _ = sink
        .send(Message::Binary(
            channel::exit_status(&asked.command, exit_code).into(),
        ))
        .await;
    let _ = sink.close().await;
    reading.abort();
}
