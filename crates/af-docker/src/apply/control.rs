//! Talking to the sidecar's control API from the host side: the decision log, the inbox, webhook
//! delivery, over a TCP connection to its address on the egress network
//! ([`af_sidecar_api::control_client`] speaks the protocol).

use af_runtime::{DecisionQuery, DecisionRecord, InboxEntry, WebhookDelivery, WebhookRequest};
use af_sidecar_api::control_client;

use crate::error::{DockerError, internal, platform};
use crate::sidecar::Sidecar;

/// One request, answered whole; (status, body).
async fn request(
    sidecar: &Sidecar,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), DockerError> {
    let operation = || {
        format!(
            "{method} {path} on the sidecar's control API ({})",
            sidecar.control
        )
    };
    let stream = tokio::net::TcpStream::connect(&sidecar.control)
        .await
        .map_err(|e| platform(operation(), e))?;
    control_client::request(stream, &sidecar.token, method, path, body)
        .await
        .map_err(|e| platform(operation(), e))
}

pub async fn decisions(
    sidecar: &Sidecar,
    query: &DecisionQuery,
) -> Result<Vec<DecisionRecord>, DockerError> {
    let (_, body) = request(sidecar, "GET", &control_client::decisions_path(query), "").await?;
    control_client::read_decisions(&body).map_err(|e| platform("reading the decision log", e))
}

pub async fn inbox(sidecar: &Sidecar) -> Result<Vec<InboxEntry>, DockerError> {
    let (_, body) = request(sidecar, "GET", "/v1/inbox", "").await?;
    control_client::read_inbox(&body).map_err(|e| platform("reading the inbox", e))
}

pub async fn trigger_webhook(
    sidecar: &Sidecar,
    webhook: &WebhookRequest,
) -> Result<WebhookDelivery, DockerError> {
    let body = serde_json::to_string(webhook).map_err(|e| internal("writing the webhook", e))?;
    let (_, answer) = request(sidecar, "POST", "/v1/webhooks", &body).await?;
    control_client::read_delivery(&answer)
        .map_err(|e| platform("reading the webhook's delivery", e))
}
