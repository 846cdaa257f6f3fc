//! Server-side apply of rendered objects, with one field manager: a second `up` of the same
//! manifest sends the same objects and changes nothing; a changed one changes only what differs.

use af_runtime::RuntimeError;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::FIELD_MANAGER;
use crate::render::Object;

/// Whether `current` already says everything `desired` says (every field of `desired` present
/// with the same value; what the cluster added, such as status and defaults, is ignored).
pub fn contains(current: &serde_json::Value, desired: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => desired
            .iter()
            .all(|(key, value)| current.get(key).is_some_and(|c| contains(c, value))),
        (Value::Array(current), Value::Array(desired)) => {
            current.len() == desired.len()
                && current.iter().zip(desired).all(|(c, d)| contains(c, d))
        }
        (current, desired) => current == desired,
    }
}

/// Applies `object` unless the cluster already has it as desired; `true` when it wrote.
async fn patch<K>(api: Api<K>, object: &K) -> Result<(K, bool), RuntimeError>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    if let Ok(Some(current)) = api.get_opt(&name).await {
        // Two objects that cannot both be written out are not known to be equal: apply.
        if let (Ok(have), Ok(want)) = (serde_json::to_value(&current), serde_json::to_value(object))
            && contains(&have, &want)
        {
            return Ok((current, false));
        }
    }
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|applied| (applied, true))
    .map_err(|err| crate::error::api(format!("applying {} {name}", K::kind(&())), err))
}

/// A Secret's `stringData` as `data`, which is how the cluster keeps and returns it: so a Secret
/// already there as desired compares equal.
fn with_data(secret: &k8s_openapi::api::core::v1::Secret) -> k8s_openapi::api::core::v1::Secret {
    let mut out = secret.clone();
    if let Some(strings) = out.string_data.take() {
        let data = out.data.get_or_insert_with(Default::default);
        for (key, value) in strings {
            data.insert(key, k8s_openapi::ByteString(value.into_bytes()));
        }
    }
    out
}

fn namespace_of(meta: &kube::api::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

/// Applies one object unless the cluster already has it as desired; returns it as the cluster has
/// it now (a Service with its ClusterIP) and whether anything was written.
pub async fn apply(client: kube::Client, object: &Object) -> Result<(Object, bool), RuntimeError> {
    Ok(match object {
        Object::Namespace(o) => {
            let (o, wrote) = patch(Api::all(client), o).await?;
            (Object::Namespace(o), wrote)
        }
        Object::NetworkPolicy(o) => {
            let (o, wrote) = patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?;
            (Object::NetworkPolicy(o), wrote)
        }
        Object::Pod(o) => {
            let (o, wrote) = patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?;
            (Object::Pod(o), wrote)
        }
        Object::Secret(o) => {
            let o = &with_data(o);
            let (o, wrote) = patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?;
            (Object::Secret(o), wrote)
        }
        Object::ConfigMap(o) => {
            let (o, wrote) = patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?;
            (Object::ConfigMap(o), wrote)
        }
        Object::Service(o) => {
            let (o, wrote) = patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?;
            (Object::Service(o), wrote)
        }
        Object::Deployment(o) => {
            let (o, wrote) = patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?;
            (Object::Deployment(o), wrote)
        }
        Object::Job(o) => {
            let (o, wrote) = patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?;
            (Object::Job(o), wrote)
        }
        Object::Ingress(o) => {
            let (o, wrote) = patch(Api::namespaced(client, &namespace_of(&o.metadata)), o).await?;
            (Object::Ingress(o), wrote)
        }
    })
}
