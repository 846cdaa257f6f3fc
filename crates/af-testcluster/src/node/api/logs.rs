//! `containerLogs`: a container's output as the kubelet serves it — the current instance's, or
//! with `previous` the one before it; `follow`, `tailLines`, `sinceSeconds`/`sinceTime`,
//! `timestamps` and `limitBytes` as the API defines them.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bollard::query_parameters::LogsOptions;
use futures_util::StreamExt;

use super::{failure, flag, instances, query_pairs, value};
use crate::node::Shared;

pub async fn logs(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let pairs = query_pairs(query.as_deref());
    let previous = flag(&pairs, "previous");
    let found = instances(&shared, &namespace, &pod, &container).await;
    let chosen = found.get(usize::from(previous)).and_then(|c| c.id.clone());
    let Some(id) = chosen else {
        let text = if previous {
            format!("previous terminated container {container:?} in pod {pod:?} not found")
        } else {
            format!("container {container:?} in pod {pod:?} is waiting to start: ContainerCreating")
        };
        return failure(StatusCode::BAD_REQUEST, text);
    };
    let since = value(&pairs, "sinceSeconds")
        .and_then(|s| s.parse::<i64>().ok())
        .map(|s| k8s_openapi::jiff::Timestamp::now().as_second() - s)
        .or_else(|| {
            value(&pairs, "sinceTime")
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(|t| t.as_second())
        })
        .unwrap_or(0);
    let options = LogsOptions {
        follow: flag(&pairs, "follow"),
        stdout: true,
        stderr: true,
        timestamps: flag(&pairs, "timestamps"),
        since: i32::try_from(since).unwrap_or(0),
        tail: value(&pairs, "tailLines").unwrap_or("all").to_string(),
        ..Default::default()
    };
    let mut budget = value(&pairs, "limitBytes").and_then(|b| b.parse::<usize>().ok());
    let stream = shared
        .docker
        .logs(&id, Some(options))
        .take_while(move |piece| std::future::ready(piece.is_ok()))
        .filter_map(move |piece| {
            let bytes = piece.map(|p| p.into_bytes()).unwrap_or_default();
            let cut = match budget.as_mut() {
                None => Some(bytes),
                Some(0) => None,
                Some(left) => {
                    let take = bytes.len().min(*left);
                    *left -= take;
                    Some(bytes.slice(..take))
                }
            };
            std::future::ready(cut.map(Ok::<_, std::io::Error>))
        });
    (StatusCode::OK, Body::from_stream(stream)).into_response()
}
