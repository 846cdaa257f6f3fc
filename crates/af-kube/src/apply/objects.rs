//! Server-side apply of rendered objects, with one field manager: a second `up` of the same
//! manifest sends the same objects and changes nothing; a changed one changes only what differs.

use af_runtime::{RuntimeError, RuntimeErrorKind};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::FIELD_MANAGER;
use crate::render::Object;

async fn patch<K>(api: Api<K>, object: &K) -> Result<K, RuntimeError>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|err| {
        RuntimeErrorKind::PlatformFailed {
            operation: format!("applying {} {name}", K::kind(&())),
            detail: err.to_string(),
        }
        .into()
    })
}

fn namespace_of(meta: &kube::api::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

/// Applies one object; returns it as the cluster has it now (a Service with its ClusterIP).
pub async fn apply(client: kube::Client, object: &Object) -> Result<Object, RuntimeError> {
    Ok(match object {
        Object::Namespace(o) => Object::Namespace(patch(Api::all(client), o).await?),
        Object::NetworkPolicy(o) => Object::NetworkPolicy(
            patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?,
        ),
        Object::Pod(o) => {
            Object::Pod(patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?)
        }
        Object::Secret(o) => {
            Object::Secret(patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?)
        }
        Object::Service(o) => {
            Object::Service(patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?)
        }
        Object::Deployment(o) => {
            Object::Deployment(patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?)
        }
        Object::Job(o) => {
            Object::Job(patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?)
        }
        Object::Ingress(o) => {
            Object::Ingress(patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?)
        }
    })
}
