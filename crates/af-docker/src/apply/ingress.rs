//! URLs for web services on 127.0.0.1. The services' network is `internal` and cannot publish a
//! port, so each web service gets an ingress: the engine image relaying its published port to the
//! service's instances. It is on the egress network (to publish) and the services' network (to
//! reach them); the services themselves still have no route out.

use bollard::Docker;

use crate::error::{DockerError, platform};
use crate::service::Placement;
use crate::{names, one_shot};

pub use crate::plan::ingress::{body, role};

/// Starts (or keeps, when unchanged) the ingress of `service`, relaying `port` to `instances`;
/// returns its URL and whether anything changed.
pub async fn start(
    docker: &Docker,
    at: Placement<'_>,
    egress: &str,
    service: &str,
    port: u16,
    instances: &[String],
) -> Result<(String, bool), DockerError> {
    let (env, internal) = (at.env, at.internal);
    let (name, body) = body(at, egress, service, port, instances);
    let spec = body
        .labels
        .as_ref()
        .and_then(|labels| labels.get(names::SPEC_LABEL))
        .cloned()
        .unwrap_or_default();
    if one_shot::running_with_spec(docker, &name, env, &spec).await? {
        return Ok((url(docker, &name, port).await?, false));
    }
    one_shot::clear(docker, &name, env).await?;
    one_shot::create_and_start(docker, &name, body, &[internal]).await?;
    Ok((url(docker, &name, port).await?, true))
}

/// The URL an ingress publishes for `port`.
pub async fn url(docker: &Docker, name: &str, port: u16) -> Result<String, DockerError> {
    published(docker, name, Some(port)).await
}

/// The URL an ingress publishes: for `port`, or the first it publishes.
pub async fn published(
    docker: &Docker,
    name: &str,
    port: Option<u16>,
) -> Result<String, DockerError> {
    let found = docker
        .inspect_container(
            name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .map_err(|e| platform(format!("inspecting container {name}"), e))?;
    let host_port = found
        .network_settings
        .and_then(|n| n.ports)
        .and_then(|mut ports| match port {
            Some(port) => ports.remove(&format!("{port}/tcp")).flatten(),
            None => ports.into_values().flatten().next(),
        })
        .and_then(|bindings| bindings.into_iter().find_map(|b| b.host_port))
        .ok_or_else(|| platform(format!("reading the published port of {name}"), "none"))?;
    Ok(format!("http://127.0.0.1:{host_port}"))
}
