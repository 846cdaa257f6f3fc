//! What the cluster serves, asked before anything of those kinds is touched: KEDA's ScaledObject
//! and CloudNativePG's Cluster are optional, and a watch or a request on a kind the server does
//! not know fails forever. One request per API group version; a 404 means "not installed".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;

use crate::reconcile::ReconcileError;

pub const KEDA: (&str, &str) = ("keda.sh/v1alpha1", "scaledobjects");
pub const CLOUDNATIVE_PG: (&str, &str) = ("postgresql.cnpg.io/v1", "clusters");

/// The optional kinds the cluster serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    pub keda: bool,
    pub cloudnative_pg: bool,
}

/// Whether `list` names the resource `plural`.
pub fn serves(list: &APIResourceList, plural: &str) -> bool {
    list.resources.iter().any(|r| r.name == plural)
}

async fn served(
    client: &Client,
    (group_version, plural): (&str, &str),
) -> Result<bool, ReconcileError> {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => Ok(serves(&list, plural)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(err) => Err(ReconcileError::Api {
            operation: format!("say whether it serves {group_version}"),
            detail: err.to_string(),
        }),
    }
}

pub async fn facts(client: &Client) -> Result<Facts, ReconcileError> {
    Ok(Facts {
        keda: served(client, KEDA).await?,
        cloudnative_pg: served(client, CLOUDNATIVE_PG).await?,
    })
}
