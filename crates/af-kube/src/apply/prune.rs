//! Removing what an earlier `up` made and the manifest no longer asks for: a service dropped (its
//! Deployment, Service, Ingress), a migration removed, captures turned off (the trust bundle), no
//! more values from af's environment (their Secret), no more `domain` (the ingress controller's
//! policy). Only objects carrying the environment's labels are considered, so anything else in
//! the namespace is left alone.

use std::collections::BTreeSet;

use af_manifest::EnvironmentId;
use af_runtime::RuntimeError;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde::de::DeserializeOwned;

use crate::render::{Object, names};

/// The kinds `up` makes inside the namespace. (The probe's Pod is removed by its own step; the
/// namespace is `down`'s.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    NetworkPolicy,
    Service,
    Secret,
    ConfigMap,
    Deployment,
    Job,
    Ingress,
}

/// Every kind but the policies, which are pruned on their own before the probe runs (a policy the
/// manifest no longer asks for may allow more than it should, and the probe judges what is there).
pub const AFTER_SERVICES: [Kind; 6] = [
    Kind::Service,
    Kind::Secret,
    Kind::ConfigMap,
    Kind::Deployment,
    Kind::Job,
    Kind::Ingress,
];

/// (kind, name) of each object of a prunable kind among `objects`.
pub fn desired<'a>(objects: impl IntoIterator<Item = &'a Object>) -> BTreeSet<(Kind, String)> {
    objects
        .into_iter()
        .filter_map(|object| {
            let (kind, meta) = match object {
                Object::NetworkPolicy(o) => (Kind::NetworkPolicy, &o.metadata),
                Object::Service(o) => (Kind::Service, &o.metadata),
                Object::Secret(o) => (Kind::Secret, &o.metadata),
                Object::ConfigMap(o) => (Kind::ConfigMap, &o.metadata),
                Object::Deployment(o) => (Kind::Deployment, &o.metadata),
                Object::Job(o) => (Kind::Job, &o.metadata),
                Object::Ingress(o) => (Kind::Ingress, &o.metadata),
                Object::Namespace(_) | Object::Pod(_) => return None,
            };
            Some((kind, meta.name.clone()?))
        })
        .collect()
}

/// Of the objects found (ours, of `kind`), those to remove: every one not desired.
pub fn stale(kind: Kind, found: Vec<String>, desired: &BTreeSet<(Kind, String)>) -> Vec<String> {
    found
        .into_iter()
        .filter(|name| !desired.contains(&(kind, name.clone())))
        .collect()
}

/// Removes the environment's objects of `kinds` in `namespace` that are not `desired`; whether it
/// removed anything.
pub async fn remove_stale(
    client: kube::Client,
    namespace: &str,
    env: &EnvironmentId,
    kinds: &[Kind],
    desired: &BTreeSet<(Kind, String)>,
) -> Result<bool, RuntimeError> {
    let selector = names::ownership(env)
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",");
    let api = Kinded {
        client,
        namespace,
        selector: &selector,
    };
    let mut removed = false;
    for &kind in kinds {
        removed |= match kind {
            Kind::NetworkPolicy => api.prune::<NetworkPolicy>(kind, desired).await?,
            Kind::Service => api.prune::<Service>(kind, desired).await?,
            Kind::Secret => api.prune::<Secret>(kind, desired).await?,
            Kind::ConfigMap => api.prune::<ConfigMap>(kind, desired).await?,
            Kind::Deployment => api.prune::<Deployment>(kind, desired).await?,
            Kind::Job => api.prune::<Job>(kind, desired).await?,
            Kind::Ingress => api.prune::<Ingress>(kind, desired).await?,
        };
    }
    Ok(removed)
}

/// One namespace's objects carrying our labels, of any kind.
struct Kinded<'a> {
    client: kube::Client,
    namespace: &'a str,
    selector: &'a str,
}

impl Kinded<'_> {
    async fn prune<K>(
        &self,
        kind: Kind,
        desired: &BTreeSet<(Kind, String)>,
    ) -> Result<bool, RuntimeError>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
        let failed = |doing: String, err: kube::Error| crate::error::api(doing, err);
        let found = api
            .list(&ListParams::default().labels(self.selector))
            .await
            .map_err(|e| {
                failed(
                    format!("listing {}s in {}", K::kind(&()), self.namespace),
                    e,
                )
            })?
            .items
            .into_iter()
            .filter_map(|o| o.meta().name.clone())
            .collect();
        let stale = stale(kind, found, desired);
        for name in &stale {
            // Background: a Deployment's ReplicaSets and pods, a Job's pods, go with it.
            match api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {}
                // Gone meanwhile: what was wanted.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => {
                    return Err(failed(
                        format!(
                            "removing {} {}/{name}, which the manifest no longer has",
                            K::kind(&()),
                            self.namespace
                        ),
                        err,
                    ));
                }
            }
        }
        Ok(!stale.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_ours_and_not_desired_is_stale() {
        let desired = BTreeSet::from([
            (Kind::Deployment, "web".to_string()),
            (Kind::Service, "report".to_string()),
        ]);
        assert_eq!(
            stale(
                Kind::Deployment,
                vec!["web".into(), "report".into()],
                &desired
            ),
            vec!["report".to_string()],
            "a Service named report does not keep a Deployment named report"
        );
        assert!(stale(Kind::Service, vec!["report".into()], &desired).is_empty());
    }
}
