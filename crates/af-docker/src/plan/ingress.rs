//! A web service's ingress as data: its role and its create body.

use bollard::models::ContainerCreateBody;

use crate::names;
use crate::plan::service::Placement;

/// The ingress role of a service.
pub fn role(service: &str) -> String {
    format!("{service}-ingress")
}

/// The ingress of `service` relaying `port` to `instances`: its name and create body
/// ([`crate::plan::containers::ingress`]).
pub fn body(
    at: Placement<'_>,
    egress: &str,
    service: &str,
    port: u16,
    instances: &[String],
) -> (String, ContainerCreateBody) {
    let targets: Vec<String> = instances.iter().map(|ip| format!("{ip}:{port}")).collect();
    let spec = names::spec_digest(&[
        at.engine_image,
        at.internal,
        egress,
        &port.to_string(),
        &targets.join(","),
    ]);
    (
        names::container(at.env, &role(service)),
        crate::plan::containers::ingress(
            at.env,
            service,
            at.engine_image,
            egress,
            port,
            &targets,
            &spec,
        ),
    )
}
