//! The probe Pod: one pod under exactly a service's rules running `af-proxy probe`, before any
//! service image runs. Its verdict decides whether the environment starts (AF-RUN-043).

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::RenderInput;
use super::names::{PROBE, pod_labels};
use super::pod::{
    dns_config, engine_security, engine_step_resources, lock_first, pod_security,
    sidecar_check_args,
};

pub fn probe(input: &RenderInput<'_>, namespace: &str) -> Pod {
    let labels = pod_labels(input.env, "probe", None, true);
    // Its positive control first: the sidecar, which runs by then.
    let mut args = vec!["probe".to_string()];
    args.extend(sidecar_check_args(input));
    args.extend(input.probe_targets.iter().cloned());
    let mut spec = PodSpec {
        // The pod rules of a service, without a gate: the probe is the check itself.
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        dns_policy: Some("None".to_string()),
        dns_config: Some(dns_config(input, namespace)),
        restart_policy: Some("Never".to_string()),
        security_context: Some(pod_security()),
        containers: vec![Container {
            name: "af-probe".to_string(),
            image: Some(input.engine_image.to_string()),
            args: Some(args),
            resources: Some(engine_step_resources()),
            security_context: Some(engine_security()),
            ..Default::default()
        }],
        ..Default::default()
    };
    // Under the same lock as the services' pods, so what it proves is what they get.
    lock_first(input, &mut spec);
    Pod {
        metadata: ObjectMeta {
            name: Some(PROBE.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(spec),
        ..Default::default()
    }
}
