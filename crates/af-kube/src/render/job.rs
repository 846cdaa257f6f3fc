//! The migrate Job of a service that declares `migrate`: run once to completion before the
//! service, under the same pod rules, and never retried (`backoffLimit: 0`): one clear failure
//! reads better than a Job that is neither running nor finished, and a half-applied migration is
//! worse than a refused one.

use af_manifest::Service;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::Container;

use super::RenderInput;
use super::names::{migration_job, pod_labels};
use super::pod::{environment, resources, workload_security, workload_spec};

pub fn migration(
    input: &RenderInput<'_>,
    namespace: &str,
    service: &Service,
    image: &str,
    command: &[String],
) -> Job {
    let pod_labels = pod_labels(input.env, "migration", Some(&service.name), true);
    let container = Container {
        name: "migrate".to_string(),
        image: Some(image.to_string()),
        command: Some(command.to_vec()),
        env: Some(environment(input, service)),
        resources: resources(service),
        security_context: Some(workload_security()),
        ..Default::default()
    };
    let mut spec = workload_spec(input, namespace, Vec::new(), vec![container]);
    spec.restart_policy = Some("Never".to_string());
    Job {
        metadata: super::meta(input, namespace, &migration_job(&service.name)),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            template: super::pod::template(pod_labels, spec),
            ..Default::default()
        }),
        ..Default::default()
    }
}
