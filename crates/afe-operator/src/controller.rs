//! The watch loop: kube-runtime's `Controller` on the `AgentFlowEngine`s of one namespace. It
//! reconciles one when it changes, when an object it owns changes, when its source ConfigMap or
//! any afe custom resource of the namespace changes, and every `requeue` (the reaper's sweep);
//! after an error it tries again with a backoff; on SIGTERM or Ctrl-C it finishes what is running
//! and stops. It never watches KEDA's or CloudNativePG's kinds: they may not be installed, and a
//! watch on a kind the server does not serve fails forever (the reconcile asks discovery).

use std::sync::Arc;

use afe_config::engine::AgentFlowEngine;
use afe_config::kinds::{Agent, Flow, Plugin, SchemaResource};
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::build::MANAGED_BY;
use crate::reconcile::{Context, error_policy, reconcile};

/// Why the operator could not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "AFE-OPR-004 the AgentFlowEngine kind is not served by this cluster ({detail}); install the CRDs first: kubectl apply -k deploy/operator"
)]
pub struct NotInstalled {
    pub detail: String,
}

/// Fails unless the cluster serves afe's custom resources: without them every watch would fail
/// forever.
pub async fn check_installed(client: &Client) -> Result<(), NotInstalled> {
    let list = client
        .list_api_group_resources("afe.dev/v1alpha1")
        .await
        .map_err(|err| NotInstalled {
            detail: err.to_string(),
        })?;
    if crate::discovery::serves(&list, "agentflowengines") {
        Ok(())
    } else {
        Err(NotInstalled {
            detail: "afe.dev/v1alpha1 has no agentflowengines".to_string(),
        })
    }
}

/// Runs the controller on `namespace` until a signal stops it.
pub async fn run(client: Client, namespace: &str, ctx: Arc<Context>) {
    let engines: Api<AgentFlowEngine> = Api::namespaced(client.clone(), namespace);
    let ours =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={MANAGED_BY}"));
    let controller = Controller::new(engines, watcher::Config::default());
    let store = controller.store();
    let every_engine = {
        let store = store.clone();
        move |_: DynamicObject| {
            store
                .state()
                .iter()
                .map(|engine| ObjectRef::from_obj(engine.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let mut controller = controller
        .owns(
            Api::<Deployment>::namespaced(client.clone(), namespace),
            ours.clone(),
        )
        .owns(
            Api::<StatefulSet>::namespaced(client.clone(), namespace),
            ours.clone(),
        )
        .owns(
            Api::<Service>::namespaced(client.clone(), namespace),
            ours.clone(),
        )
        .owns(
            Api::<Ingress>::namespaced(client.clone(), namespace),
            ours.clone(),
        )
        .owns(
            Api::<ConfigMap>::namespaced(client.clone(), namespace),
            ours,
        )
        .watches(
            Api::<ConfigMap>::namespaced(client.clone(), namespace),
            watcher::Config::default(),
            move |map: ConfigMap| {
                let name = map.name_any();
                store
                    .state()
                    .iter()
                    .filter(|engine| engine.spec.config.config_map_ref.name == name)
                    .map(|engine| ObjectRef::from_obj(engine.as_ref()))
                    .collect::<Vec<_>>()
            },
        );
    for resource in [
        ApiResource::erase::<SchemaResource>(&()),
        ApiResource::erase::<Agent>(&()),
        ApiResource::erase::<Flow>(&()),
        ApiResource::erase::<Plugin>(&()),
    ] {
        controller = controller.watches_with(
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource),
            resource.clone(),
            watcher::Config::default(),
            every_engine.clone(),
        );
    }
    controller
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((engine, _)) => tracing::debug!(engine = %engine.name, "reconciled"),
                Err(err) => tracing::warn!(error = %err, "controller"),
            }
        })
        .await;
}
