//! `portForward`: TCP to `localhost:PORT` inside the Pod (its network namespace, as the kubelet
//! connects), over a WebSocket on the v4 channel protocol — two channels per port, data and error,
//! each opened by the port number; the socket closes once every port's connection has ended.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bollard::query_parameters::{InspectContainerOptions, ListContainersOptions};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::channel::{self, V4};
use super::{failure, query_pairs};
use crate::node::Shared;
use crate::node::pods::create::labels;

/// The process that holds Pod `namespace/pod`'s network namespace.
async fn holder_pid(shared: &Shared, namespace: &str, pod: &str) -> Option<i64> {
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![
            format!("{}={}", crate::CLUSTER_LABEL, shared.config.cluster_id),
            format!("{}={namespace}/{pod}", labels::POD),
            format!("{}=holder", labels::KIND),
        ],
    )]);
    let holder = shared
        .docker
        .list_containers(Some(ListContainersOptions {
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .ok()?
        .into_iter()
        .next()?;
    shared
        .docker
        .inspect_container(&holder.id?, None::<InspectContainerOptions>)
        .await
        .ok()?
        .state?
        .pid
        .filter(|pid| *pid > 0)
}

pub async fn portforward(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    upgrade: WebSocketUpgrade,
) -> Response {
    let pairs = query_pairs(query.as_deref());
    let ports: Result<Vec<u16>, _> = pairs
        .iter()
        .filter(|(k, _)| k == "port")
        .flat_map(|(_, v)| v.split(','))
        .map(|p| p.trim().parse::<u16>())
        .collect();
    let ports = match ports {
        Ok(ports) if !ports.is_empty() && ports.iter().all(|p| *p > 0) => ports,
        _ => {
            return failure(
                StatusCode::BAD_REQUEST,
                "port-forward needs one or more valid ports".into(),
            );
        }
    };
    let Some(pid) = holder_pid(&shared, &namespace, &pod).await else {
        return failure(
            StatusCode::BAD_REQUEST,
            format!("pod {pod:?} in namespace {namespace:?} is not running on this node"),
        );
    };
    let upgrade = upgrade.protocols([V4]);
    if upgrade.selected_protocol().is_none() {
        return failure(
            StatusCode::BAD_REQUEST,
            format!("this node forwards ports over the {V4} protocol only"),
        );
    }
    upgrade.on_upgrade(move |socket| session(pid, ports, socket))
}

async fn session(pid: i64, ports: Vec<u16>, socket: WebSocket) {
    let (mut sink, mut incoming) = socket.split();
    let (frames, mut outgoing) = mpsc::channel::<Vec<u8>>(64);
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    for (index, port) in ports.iter().copied().enumerate() {
        let data = u8::try_from(index * 2).unwrap_or(u8::MAX);
        let error = data.saturating_add(1);
        let _ = frames.send(channel::port_opening(data, port)).await;
        let _ = frames.send(channel::port_opening(error, port)).await;
        match crate::node::netns::connect(pid, port).await {
            Ok(stream) => {
                let (mut read, write) = stream.into_split();
                writers.push(Some(write));
                let frames = frames.clone();
                readers.push(tokio::spawn(async move {
                    let mut buffer = vec![0u8; 32 * 1024];
                    loop {
                        match read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if frames
                                    .send(channel::frame(data, &buffer[..n]))
                                    .await
                                    .is_err()
                                {
                                    break;
                                }
                            }
                        }
                    }
                }));
            }
            Err(err) => {
                writers.push(None);
                let text = format!(
                    "error forwarding port {port} to pod: failed to connect to localhost:{port} inside the pod: {err}"
                );
                let _ = frames.send(channel::frame(error, text.as_bytes())).await;
            }
        }
    }
    drop(frames);
    let sending = tokio::spawn(async move {
        while let Some(frame) = outgoing.recv().await {
            if sink.send(Message::Binary(frame.into())).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let receiving = async {
        while let Some(Ok(message)) = incoming.next().await {
            let data = match message {
                Message::Binary(data) => data.to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            let Some((&channel, payload)) = data.split_first() else {
                continue;
            };
            let index = usize::from(channel / 2);
            if channel % 2 != 0 || payload.is_empty() {
                continue;
            }
            if let Some(Some(writer)) = writers.get_mut(index)
                && writer.write_all(payload).await.is_err()
            {
                writers[index] = None;
            }
        }
    };
    // Every port's connection ended (the readers, whose frames then end the sending), or the
    // client went away (then the readers are stopped, which ends the sending too).
    let stops: Vec<_> = readers.iter().map(|r| r.abort_handle()).collect();
    tokio::select! {
        () = receiving => {}
        _ = futures_util::future::join_all(readers) => {}
    }
    for stop in stops {
        stop.abort();
    }
    let _ = sending.await;
}
