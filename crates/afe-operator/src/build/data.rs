//! The data services (step 2), when the resource opts in to managed ones — never a default: one
//! CloudNativePG `Cluster` (serve and the workers read the `uri` key of the `-app` Secret it
//! writes) and one Redis StatefulSet with an append-only file and no authentication (reachable in
//! the engine's namespace only through its Service; an authenticated Redis is `external`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ExecAction, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, Service, ServicePort,
    ServiceSpec, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::Inputs;

/// The Redis image of a managed broker.
pub const REDIS_IMAGE: &str = "redis:7.4-alpine";

/// The CloudNativePG Cluster of a managed store (a custom resource, as JSON), when CloudNativePG is
/// installed.
pub fn store_cluster(inputs: &Inputs<'_>) -> Option<Value> {
    let managed = inputs.engine.spec.afe.store.managed.as_ref()?;
    if !inputs.cloudnative_pg {
        return None;
    }
    let meta = serde_json::to_value(inputs.meta(&inputs.named("store"), "store")).ok()?;
    Some(json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": meta,
        "spec": {
            "instances": managed.instances.unwrap_or(1),
            "storage": {"size": managed.storage.clone().unwrap_or_else(|| "10Gi".to_string())},
            "bootstrap": {"initdb": {"database": "afe", "owner": "afe"}},
        },
    }))
}

/// The managed broker's StatefulSet: one Redis with its append-only file on a volume.
pub fn redis(inputs: &Inputs<'_>) -> Option<StatefulSet> {
    let managed = inputs.engine.spec.afe.broker.managed.as_ref()?;
    let name = inputs.named("redis");
    Some(StatefulSet {
        metadata: inputs.meta(&name, "redis"),
        spec: Some(StatefulSetSpec {
            service_name: Some(name.clone()),
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(inputs.selector("redis")),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(inputs.labels("redis")),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    security_context: Some(PodSecurityContext {
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_string(),
                            ..Default::default()
                        }),
                        fs_group: Some(999),
                        ..Default::default()
                    }),
                    containers: vec![Container {
                        name: "redis".to_string(),
                        image: Some(REDIS_IMAGE.to_string()),
                        image_pull_policy: Some("IfNotPresent".to_string()),
                        args: Some(
                            [
                                "--appendonly",
                                "yes",
                                "--dir",
                                "/data",
                                "--protected-mode",
                                "no",
                            ]
                            .map(str::to_string)
                            .to_vec(),
                        ),
                        ports: Some(vec![ContainerPort {
                            name: Some("redis".to_string()),
                            container_port: 6379,
                            ..Default::default()
                        }]),
                        security_context: Some(super::restricted(999)),
                        liveness_probe: Some(ping(10)),
                        readiness_probe: Some(ping(5)),
                        volume_mounts: Some(vec![VolumeMount {
                            name: "data".to_string(),
                            mount_path: "/data".to_string(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            volume_claim_templates: Some(vec![PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some("data".to_string()),
                    ..Default::default()
                },
                spec: Some(PersistentVolumeClaimSpec {
                    access_modes: Some(vec!["ReadWriteOnce".to_string()]),
                    resources: Some(VolumeResourceRequirements {
                        requests: Some(BTreeMap::from([(
                            "storage".to_string(),
                            Quantity(managed.storage.clone().unwrap_or_else(|| "1Gi".to_string())),
                        )])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// A probe that asks Redis itself (`redis-cli ping`), every `period` seconds.
fn ping(period: i32) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["redis-cli".to_string(), "ping".to_string()]),
        }),
        period_seconds: Some(period),
        ..Default::default()
    }
}

/// The managed broker's Service, the name the processes dial.
pub fn redis_service(inputs: &Inputs<'_>) -> Option<Service> {
    inputs.engine.spec.afe.broker.managed.as_ref()?;
    Some(Service {
        metadata: inputs.meta(&inputs.named("redis"), "redis"),
        spec: Some(ServiceSpec {
            selector: Some(inputs.selector("redis")),
            ports: Some(vec![ServicePort {
                name: Some("redis".to_string()),
                port: 6379,
                target_port: Some(IntOrString::Int(6379)),
                protocol: Some("TCP".to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    })
}
