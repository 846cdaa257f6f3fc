//! What rendering needs to know of the cluster, read off it: the resolver's address (the
//! `kube-dns` Service's ClusterIP: 10.96.0.10 on kind, 10.43.0.10 on k3s) and the namespace the
//! ingress controller runs in (`ingress-nginx`, or `kube-system` where k3s runs traefik). What
//! cannot be read keeps the usual default, and the notes say so.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::Api;

use crate::render::Cluster;

/// The cluster as rendering sees it, and a note for each value that could not be read.
pub async fn discover(client: kube::Client) -> (Cluster, Vec<String>) {
    let mut cluster = Cluster::default();
    let mut notes = Vec::new();
    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    match services.get_opt("kube-dns").await {
        Ok(Some(service)) => {
            match service
                .spec
                .and_then(|s| s.cluster_ip)
                .and_then(|ip| ip.parse().ok())
            {
                Some(ip) => cluster.dns = std::net::SocketAddr::new(ip, 53),
                None => notes.push(format!(
                    "kube-system/kube-dns has no ClusterIP; using {} as the cluster's resolver",
                    cluster.dns
                )),
            }
        }
        Ok(None) => notes.push(format!(
            "no kube-system/kube-dns Service; using {} as the cluster's resolver",
            cluster.dns
        )),
        Err(err) => notes.push(format!(
            "cannot read kube-system/kube-dns ({err}); using {} as the cluster's resolver",
            cluster.dns
        )),
    }
    let nginx = Api::<Namespace>::all(client.clone())
        .get_opt(&cluster.ingress_namespace)
        .await;
    let traefik = Api::<Deployment>::namespaced(client, "kube-system")
        .get_opt("traefik")
        .await;
    match (nginx, traefik) {
        (Ok(Some(_)), _) => {}
        (_, Ok(Some(_))) => cluster.ingress_namespace = "kube-system".to_string(),
        _ => notes.push(format!(
            "no ingress controller found (neither the {} namespace nor kube-system/traefik); web services are let in from {}",
            cluster.ingress_namespace, cluster.ingress_namespace
        )),
    }
    (cluster, notes)
}
