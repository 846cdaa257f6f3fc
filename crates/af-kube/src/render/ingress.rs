//! An Ingress per web service at `<environment>-<service>.<domain>`, only when a domain is set:
//! without one, af prints no URL rather than one that resolves to nothing.

use af_manifest::Service;
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, ServiceBackendPort,
};

use super::RenderInput;

/// The preview host of a web service.
pub fn host(input: &RenderInput<'_>, service: &str, domain: &str) -> String {
    format!("{}-{service}.{domain}", input.env)
}

pub fn ingress(input: &RenderInput<'_>, namespace: &str, service: &Service) -> Option<Ingress> {
    let domain = input.manifest.runtime.domain.as_deref()?;
    let port = service.port.filter(|_| service.web)?;
    Some(Ingress {
        metadata: super::meta(input, namespace, &service.name),
        spec: Some(IngressSpec {
            rules: Some(vec![IngressRule {
                host: Some(host(input, &service.name, domain)),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".to_string()),
                        path_type: "Prefix".to_string(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: service.name.clone(),
                                port: Some(ServiceBackendPort {
                                    number: Some(i32::from(port)),
                                    ..Default::default()
                                }),
                            }),
                            ..Default::default()
                        },
                    }],
                }),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    })
}
