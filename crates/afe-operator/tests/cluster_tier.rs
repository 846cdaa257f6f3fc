//! The operator's cluster tier: its reconcile against a real API server, through a disposable
//! cluster's kubeconfig context — where a fake cannot say what a real server stores (its defaults,
//! its canonical forms, its managed fields). Run by `scripts/afe-kind-test`, never by CI (there
//! is no cluster there): the file is built only with the `cluster-tier` feature, so the suite
//! neither runs nor skips it, and each test fails — never passes — without the script's settings.
//! Needs afe's CRDs installed (the script applies deploy/operator/crds); no image is pulled: the
//! reconcile runs in this process, and what it makes need not start for what is judged here.
//!
//! - The example installation reconciled twice: every owned object and the status are written by
//!   the first, and the second changes nothing — the same resourceVersion on each.
//! - An object of the operator's name that is not its own is left as it was (its resourceVersion),
//!   named in `Ready=False, ResourceConflict` and in an Event; the rest is made.

mod example;

use std::sync::Arc;
use std::time::Duration;

use afe_config::engine::AgentFlowEngine;
use afe_operator::reconcile::{Context, reconcile};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};

fn need(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: the cluster tier runs through scripts/afe-kind-test, which sets it"
        )
    })
}

/// A namespace of the test's own, deleted when it ends.
struct Namespace {
    client: kube::Client,
    name: String,
}

impl Namespace {
    async fn new(suffix: &str) -> Namespace {
        let client = afe_sandbox_kube::connect::connect(Some(&need("AFE_KIND_CONTEXT")))
            .await
            .unwrap()
            .client;
        let name = format!("{}-{suffix}", need("AFE_KIND_NAMESPACE"));
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
            )
            .await
            .unwrap();
        Namespace { client, name }
    }

    async fn delete(self) {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let _ = namespaces
            .delete(&self.name, &DeleteParams::background())
            .await;
    }

    fn api(&self, api_version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        Api::namespaced_with(self.client.clone(), &self.name, &resource)
    }

    async fn create(&self, mut object: Value) {
        object["metadata"]["namespace"] = json!(self.name);
        let api_version = object["apiVersion"].as_str().unwrap().to_string();
        let kind = object["kind"].as_str().unwrap().to_string();
        let plural = match kind.as_str() {
            "AgentFlowEngine" => "agentflowengines".to_string(),
            "Schema" => "schemas".to_string(),
            other => format!("{}s", other.to_lowercase()),
        };
        self.api(&api_version, &kind, &plural)
            .create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
            .unwrap();
    }

    /// The example installation in this namespace (its sandbox namespace too), without the
    /// pin, the autoscaling or the Ingress (what this cluster has installed is not the point).
    async fn install_example(&self) {
        self.create(example::example_source()).await;
        for resource in example::example_resources() {
            self.create(resource).await;
        }
        let mut engine = example::example_engine();
        for key in ["uid", "generation"] {
            engine["metadata"].as_object_mut().unwrap().remove(key);
        }
        engine.as_object_mut().unwrap().remove("status");
        engine["spec"]["config"]
            .as_object_mut()
            .unwrap()
            .remove("revision");
        assert_eq!(
            engine["spec"]["afe"]["sandbox"]["namespace"],
            example::SANDBOX_NS
        );
        engine["spec"]["afe"]["sandbox"]["namespace"] = json!(self.name);
        let deployment = engine["spec"]["deployment"].as_object_mut().unwrap();
        deployment.remove("ingress");
        deployment["workers"]
            .as_object_mut()
            .unwrap()
            .remove("autoscaling");
        self.create(engine).await;
    }

    async fn engine(&self) -> AgentFlowEngine {
        Api::<AgentFlowEngine>::namespaced(self.client.clone(), &self.name)
            .get("afe")
            .await
            .unwrap()
    }

    async fn reconcile(&self) {
        let ctx = Arc::new(Context::new(
            self.client.clone(),
            Recorder::new(
                self.client.clone(),
                Reporter {
                    controller: "afe-operator".to_string(),
                    instance: None,
                },
            ),
            // No ticket Pod is in the test's namespace: the reaper's clock judges nothing.
            Arc::new(|| example::NOW_MS),
            Duration::from_secs(60),
        ));
        reconcile(Arc::new(self.engine().await), ctx).await.unwrap();
    }

    /// The resourceVersion of every object the operator makes here, and of the engine.
    async fn versions(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (api_version, kind, plural) in [
            ("v1", "ConfigMap", "configmaps"),
            ("apps/v1", "Deployment", "deployments"),
            ("v1", "Service", "services"),
            ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
            ("afe.dev/v1alpha1", "AgentFlowEngine", "agentflowengines"),
        ] {
            for object in self
                .api(api_version, kind, plural)
                .list(&Default::default())
                .await
                .unwrap()
                .items
            {
                out.push((
                    format!("{kind}/{}", object.metadata.name.clone().unwrap()),
                    object.metadata.resource_version.clone().unwrap(),
                ));
            }
        }
        out.sort();
        out
    }
}

fn condition(engine: &AgentFlowEngine, type_: &str) -> (String, String, String) {
    let status = engine.status.clone().unwrap_or_default();
    let c = afe_operator::status::find(&status, type_)
        .unwrap_or_else(|| panic!("no condition {type_} in {status:?}"));
    let text = |t: &Option<String>| t.clone().unwrap_or_default();
    (c.status.clone(), text(&c.reason), text(&c.message))
}

#[tokio::test]
async fn the_example_reconciles_and_a_second_reconcile_changes_nothing_on_a_real_server() {
    let ns = Namespace::new("op").await;
    ns.install_example().await;
    ns.reconcile().await;
    let engine = ns.engine().await;
    assert_eq!(condition(&engine, "ConfigValidated").1, "Valid");
    assert_eq!(condition(&engine, "RevisionPinned").1, "NotPinned");
    assert!(
        engine
            .status
            .as_ref()
            .unwrap()
            .revision
            .as_deref()
            .unwrap()
            .starts_with("04cf1cc0ea69"),
        "the revision a folder gives: {:?}",
        engine.status
    );
    let first = ns.versions().await;
    for made in [
        "ConfigMap/afe-config",
        "Deployment/afe-serve",
        "Deployment/afe-worker",
        "Service/afe-api",
    ] {
        assert!(first.iter().any(|(o, _)| o == made), "{made} in {first:?}");
    }
    ns.reconcile().await;
    let second = ns.versions().await;
    ns.delete().await;
    assert_eq!(second, first, "the second reconcile wrote nothing");
}

#[tokio::test]
async fn a_foreign_object_is_left_as_it_was_and_named_on_a_real_server() {
    let ns = Namespace::new("conflict").await;
    ns.create(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "afe-api", "labels": {"team": "web"}},
        "spec": {"ports": [{"port": 8443}]},
    }))
    .await;
    let services = ns.api("v1", "Service", "services");
    let before = services
        .get("afe-api")
        .await
        .unwrap()
        .metadata
        .resource_version;
    ns.install_example().await;
    ns.reconcile().await;
    let after = services
        .get("afe-api")
        .await
        .unwrap()
        .metadata
        .resource_version;
    let engine = ns.engine().await;
    let events = ns
        .api("events.k8s.io/v1", "Event", "events")
        .list(&Default::default())
        .await
        .unwrap();
    let deployments = ns.api("apps/v1", "Deployment", "deployments");
    let serve = deployments.get_opt("afe-serve").await.unwrap();
    ns.delete().await;
    assert_eq!(after, before, "the foreign Service is untouched");
    let (status, reason, message) = condition(&engine, "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ResourceConflict")
    );
    assert!(message.contains("Service/afe-api"), "{message}");
    assert!(
        events.items.iter().any(|e| {
            let e = serde_json::to_value(e).unwrap();
            e["reason"] == "ResourceConflict"
                && e["note"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("Service/afe-api")
        }),
        "an Event names it"
    );
    assert!(serve.is_some(), "the rest is made");
}
