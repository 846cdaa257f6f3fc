//! Services: one per manifest service with a port, named after it (so `http://worker:9090`
//! means it); the sidecar's, publishing its proxy, DNS and transparent listeners — never its
//! control API.

use af_manifest::Service as ManifestService;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::names::{SIDECAR, pod_selector};
use super::{RenderInput, ports};

fn port(name: &str, number: u16, protocol: &str) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        port: i32::from(number),
        target_port: Some(IntOrString::Int(i32::from(number))),
        protocol: Some(protocol.to_string()),
        ..Default::default()
    }
}

/// The sidecar's ports as workloads reach them (the control API is not among them).
pub fn sidecar_ports() -> Vec<ServicePort> {
    let mut out = vec![
        port("proxy", ports::PROXY, "TCP"),
        port("dns-udp", ports::DNS, "UDP"),
        port("dns-tcp", ports::DNS, "TCP"),
        port("http", ports::HTTP, "TCP"),
        port("tls", ports::TLS, "TCP"),
    ];
    for smtp in ports::SMTP {
        out.push(port(&format!("smtp-{smtp}"), smtp, "TCP"));
    }
    out.push(port(
        &format!("smtps-{}", ports::SMTPS),
        ports::SMTPS,
        "TCP",
    ));
    out
}

pub fn sidecar(input: &RenderInput<'_>, namespace: &str) -> Service {
    Service {
        metadata: super::meta(input, namespace, SIDECAR),
        spec: Some(ServiceSpec {
            selector: Some(pod_selector("sidecar", None)),
            ports: Some(sidecar_ports()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A service's Service; none for a service without a port (nothing could reach it by name).
pub fn service(
    input: &RenderInput<'_>,
    namespace: &str,
    service: &ManifestService,
) -> Option<Service> {
    let number = service.port?;
    Some(Service {
        metadata: super::meta(input, namespace, &service.name),
        spec: Some(ServiceSpec {
            selector: Some(pod_selector("service", Some(&service.name))),
            ports: Some(vec![port("app", number, "TCP")]),
            ..Default::default()
        }),
        ..Default::default()
    })
}
