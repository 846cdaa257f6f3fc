//! Step 3 (and 2 and 4) of a reconcile as data: every object the operator owns, built from the
//! `AgentFlowEngine` and what the reconcile learned (the computed revision, whether KEDA is
//! installed), by pure functions — one per kind — with goldens in `tests/golden/`.
//!
//! Every object is named after the resource (`<name>-serve`, `<name>-worker`, ...), labelled
//! `app.kubernetes.io/managed-by: afe-operator` and `app.kubernetes.io/instance: <name>`, and owned
//! by it (an ownerReference with `controller: true`), except what lives in the sandbox namespace,
//! which an ownerReference cannot reach across namespaces: that is found by its labels. No secret
//! value is ever in an object: every secret is projected by reference (`secretKeyRef`,
//! `secretRef`).

mod data;
mod policy;
mod scaling;
mod workloads;

use std::collections::BTreeMap;

use afe_config::engine::{AgentFlowEngine, EngineImage};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

pub use data::{redis, redis_service, store_cluster};
pub use policy::{engine_policies, sandbox_ingress_policy};
pub use scaling::{Scaling, scaled_object, scaling};
pub use workloads::{api_service, config_map, ingress, serve, worker};

/// Who manages what the operator makes.
pub const MANAGED_BY: &str = "afe-operator";
/// The port serve listens on in its Pod and the Service's port.
pub const API_PORT: i32 = 8080;
/// Where the configuration ConfigMap is mounted in serve (its `-c` folder).
pub const CONFIG_DIR: &str = "/etc/afe/config";
/// The annotation carrying the revision the workloads run: a change rolls them.
pub const REVISION: &str = "afe.dev/revision";
/// The image when the resource names none.
pub const DEFAULT_IMAGE: &str = "ghcr.io/agentflowengine/afe:latest";

/// What a reconcile knows when it builds.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    pub engine: &'a AgentFlowEngine,
    /// The revision the workloads run (the computed one, when the pin allows it).
    pub revision: &'a str,
    /// The validated configuration's files (the source ConfigMap's keys).
    pub files: &'a BTreeMap<String, String>,
    /// Whether KEDA's ScaledObject kind is served (discovery said so).
    pub keda: bool,
    /// Whether CloudNativePG's Cluster kind is served (discovery said so).
    pub cloudnative_pg: bool,
}

impl Inputs<'_> {
    pub fn name(&self) -> &str {
        self.engine.metadata.name.as_deref().unwrap_or("afe")
    }

    pub fn namespace(&self) -> &str {
        self.engine
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
    }

    /// `<name>-<part>`.
    pub fn named(&self, part: &str) -> String {
        format!("{}-{part}", self.name())
    }

    /// The labels of component `component`.
    pub fn labels(&self, component: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), "afe".to_string()),
            (
                "app.kubernetes.io/instance".to_string(),
                self.name().to_string(),
            ),
            (
                "app.kubernetes.io/component".to_string(),
                component.to_string(),
            ),
            (
                "app.kubernetes.io/managed-by".to_string(),
                MANAGED_BY.to_string(),
            ),
        ])
    }

    /// The selector of component `component`'s Pods (labels that never change).
    pub fn selector(&self, component: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "app.kubernetes.io/instance".to_string(),
                self.name().to_string(),
            ),
            (
                "app.kubernetes.io/component".to_string(),
                component.to_string(),
            ),
        ])
    }

    /// The ownerReference that makes the resource the object's controller.
    pub fn owner(&self) -> OwnerReference {
        OwnerReference {
            api_version: "afe.dev/v1alpha1".to_string(),
            kind: "AgentFlowEngine".to_string(),
            name: self.name().to_string(),
            uid: self.engine.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// The metadata of owned object `name` of `component`.
    pub fn meta(&self, name: &str, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace().to_string()),
            labels: Some(self.labels(component)),
            owner_references: Some(vec![self.owner()]),
            ..Default::default()
        }
    }

    /// afe's image: the resource's, by digest when it names one.
    pub fn image(&self) -> String {
        self.engine
            .spec
            .deployment
            .as_ref()
            .and_then(|d| d.image.as_ref())
            .map_or_else(|| DEFAULT_IMAGE.to_string(), image_text)
    }
}

/// Every object the resource asks for, as JSON with its `apiVersion` and `kind`, in the order
/// they are applied: the data services first (the processes read what they publish), then the
/// configuration, the processes, their scaling, and the sandbox namespace's policy.
pub fn desired(inputs: &Inputs<'_>) -> Vec<serde_json::Value> {
    fn json(object: impl serde::Serialize) -> serde_json::Value {
        serde_json::to_value(object).expect("Kubernetes objects serialize to JSON")
    }
    let mut out = Vec::new();
    out.extend(store_cluster(inputs));
    out.extend(redis_service(inputs).map(json));
    out.extend(redis(inputs).map(json));
    out.push(json(config_map(inputs)));
    out.push(json(serve(inputs)));
    out.push(json(worker(inputs)));
    out.push(json(api_service(inputs)));
    out.extend(ingress(inputs).map(json));
    out.extend(scaled_object(inputs));
    out.extend(engine_policies(inputs).into_iter().map(json));
    out.extend(sandbox_ingress_policy(inputs).map(json));
    out
}

/// Where an object the operator may make lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub name: String,
    pub namespace: String,
}

/// Every object a change of the resource's spec can take away (or KEDA's or CloudNativePG's
/// removal): the configuration ConfigMap, serve, the workers, the API's Service and the policies
/// of serve and the workers are always asked for. The kinds the cluster does not serve are left
/// out — asking for them would fail.
pub fn optional(inputs: &Inputs<'_>) -> Vec<Target> {
    let here = |api_version, kind, name: String| Target {
        api_version,
        kind,
        name,
        namespace: inputs.namespace().to_string(),
    };
    let mut targets = vec![
        here("v1", "Service", inputs.named("redis")),
        here("apps/v1", "StatefulSet", inputs.named("redis")),
        here(
            "networking.k8s.io/v1",
            "NetworkPolicy",
            inputs.named("redis"),
        ),
        here("networking.k8s.io/v1", "Ingress", inputs.named("api")),
        Target {
            api_version: "networking.k8s.io/v1",
            kind: "NetworkPolicy",
            name: "afe-sandbox-ingress".to_string(),
            namespace: inputs.engine.spec.afe.sandbox.namespace.clone(),
        },
    ];
    if inputs.keda {
        targets.push(here(
            "keda.sh/v1alpha1",
            "ScaledObject",
            inputs.named("worker"),
        ));
    }
    if inputs.cloudnative_pg {
        targets.push(here(
            "postgresql.cnpg.io/v1",
            "Cluster",
            inputs.named("store"),
        ));
    }
    targets
}

/// A container as `uid` with no capability, no privilege escalation and a read-only root.
pub fn restricted(uid: i64) -> k8s_openapi::api::core::v1::SecurityContext {
    k8s_openapi::api::core::v1::SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Default::default()
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        ..Default::default()
    }
}

/// `repository@digest`, or `repository:tag` (`latest` when it names neither).
pub fn image_text(image: &EngineImage) -> String {
    match (&image.digest, &image.tag) {
        (Some(digest), _) => format!("{}@{digest}", image.repository),
        (None, Some(tag)) => format!("{}:{tag}", image.repository),
        (None, None) => format!("{}:latest", image.repository),
    }
}
