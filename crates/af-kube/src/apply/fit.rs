//! The fit check against the cluster: read the nodes and the pods placed on them, then the pure
//! arithmetic of [`crate::fit`]. A cluster that will not let af list nodes or pods (namespace-scoped
//! access) cannot be checked: that is said on the progress channel and the environment goes
//! through, rather than refusing every cluster where af has narrow rights.

use af_runtime::{ProgressEvent, ProgressSink, RuntimeError, RuntimeErrorKind};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;

use crate::fit::{Instance, node_room, others_pods, shortfalls};

/// What reading the cluster gave.
enum Read<T> {
    Listed(Vec<T>),
    /// Not allowed (403): says what could not be listed.
    Forbidden(String),
}

async fn list<K>(api: Api<K>, what: &str) -> Result<Read<K>, RuntimeError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(Read::Listed(list.items)),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(Read::Forbidden(format!(
            "af may not list {what} on this cluster ({})",
            status.message
        ))),
        Err(err) => Err(crate::error::api(
            format!("listing {what} for the fit check"),
            err,
        )),
    }
}

/// `Ok` when `instances` can fit (or when the cluster cannot be read, said on `progress`);
/// AF-RUN-047 naming every shortfall otherwise. The pods already in the environment's
/// `namespace` are not counted as used: an `up` replaces or keeps them, it never adds to them.
pub async fn check(
    client: kube::Client,
    instances: &[Instance],
    namespace: &str,
    progress: &dyn ProgressSink,
) -> Result<(), RuntimeError> {
    let nodes = list(Api::<Node>::all(client.clone()), "nodes").await?;
    let pods = list(Api::<Pod>::all(client), "pods").await?;
    let (nodes, pods) = match (nodes, pods) {
        (Read::Listed(nodes), Read::Listed(pods)) => (nodes, pods),
        (Read::Forbidden(why), _) | (_, Read::Forbidden(why)) => {
            progress.emit(ProgressEvent::Notice {
                message: format!(
                    "the fit check did not run: {why}; the scheduler alone will place the environment"
                ),
            });
            return Ok(());
        }
    };
    let others = others_pods(pods, namespace);
    let rooms: Vec<_> = nodes.iter().map(|node| node_room(node, &others)).collect();
    let found = shortfalls(&rooms, instances);
    if found.is_empty() {
        Ok(())
    } else {
        Err(RuntimeErrorKind::DoesNotFit { shortfalls: found }.into())
    }
}
