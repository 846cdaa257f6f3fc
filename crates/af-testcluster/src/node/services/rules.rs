//! ClusterIP routing as netfilter rules (pure): for every Service port with ready endpoints, a
//! DNAT of the ClusterIP and port to one endpoint, chosen at random with equal chances (as
//! kube-proxy's iptables mode does), in one chain of the `nat` table that packets from the Pod
//! network enter on their way out of the Pods. Applied whole with `iptables-restore --noflush`,
//! which replaces the chain atomically. A ClusterIP with no ready endpoint has no rule: its
//! packets go nowhere (the Pod network has no route off the machine) where kube-proxy would
//! reject them.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::core::v1::{Endpoints, Service};

/// The chain of the node of control plane `cluster_id`.
pub fn chain(cluster_id: &str) -> String {
    format!("AFN-{cluster_id}")
}

/// One Service port's routing: the ClusterIP and port, and the endpoints' addresses and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub protocol: String,
    pub cluster_ip: String,
    pub port: i32,
    pub endpoints: Vec<(String, i32)>,
}

/// The routes of `services` over `endpoints` (by `namespace/name`).
pub fn routes(services: &[Service], endpoints: &[Endpoints]) -> Vec<Route> {
    let by_name: BTreeMap<(String, String), &Endpoints> = endpoints
        .iter()
        .map(|e| {
            (
                (
                    e.metadata.namespace.clone().unwrap_or_default(),
                    e.metadata.name.clone().unwrap_or_default(),
                ),
                e,
            )
        })
        .collect();
    let mut out = Vec::new();
    for service in services {
        let key = (
            service.metadata.namespace.clone().unwrap_or_default(),
            service.metadata.name.clone().unwrap_or_default(),
        );
        let Some(spec) = service.spec.as_ref() else {
            continue;
        };
        let Some(ip) = spec
            .cluster_ip
            .as_deref()
            .filter(|ip| !ip.is_empty() && *ip != "None")
        else {
            continue;
        };
        let subsets = by_name
            .get(&key)
            .and_then(|e| e.subsets.clone())
            .unwrap_or_default();
        for port in spec.ports.iter().flatten() {
            let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".to_string());
            if protocol != "TCP" && protocol != "UDP" {
                continue;
            }
            let mut targets = Vec::new();
            for subset in &subsets {
                let ports = subset.ports.clone().unwrap_or_default();
                // The endpoint port of the same name; a Service with one unnamed port has
                // endpoints with one unnamed port.
                let matching = ports.iter().find(|p| {
                    p.name.as_deref().unwrap_or_default()
                        == port.name.as_deref().unwrap_or_default()
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                });
                let Some(target) = matching else { continue };
                for address in subset.addresses.iter().flatten() {
                    targets.push((address.ip.clone(), target.port));
                }
            }
            targets.sort();
            targets.dedup();
            out.push(Route {
                protocol: protocol.clone(),
                cluster_ip: ip.to_string(),
                port: port.port,
                endpoints: targets,
            });
        }
    }
    out.sort_by(|a, b| {
        (&a.cluster_ip, a.port, &a.protocol).cmp(&(&b.cluster_ip, b.port, &b.protocol))
    });
    out
}

/// The `iptables-restore` input that replaces `chain` with `routes`.
pub fn restore_input(chain: &str, routes: &[Route]) -> String {
    let mut text = format!("*nat\n:{chain} - [0:0]\n");
    for route in routes {
        let protocol = route.protocol.to_lowercase();
        let count = route.endpoints.len();
        for (index, (ip, port)) in route.endpoints.iter().enumerate() {
            let _ = write!(
                text,
                "-A {chain} -d {}/32 -p {protocol} -m {protocol} --dport {}",
                route.cluster_ip, route.port
            );
            let remaining = count - index;
            if remaining > 1 {
                // One in `remaining`: each endpoint is equally likely overall.
                let _ = write!(
                    text,
                    " -m statistic --mode random --probability {:.11}",
                    1.0 / remaining as f64
                );
            }
            let _ = writeln!(text, " -j DNAT --to-destination {ip}:{port}");
        }
    }
    text.push_str("COMMIT\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn every_port_with_ready_endpoints_is_routed_to_each_of_them_with_equal_chances() {
        let services: Vec<Service> = vec![
            from(serde_json::json!({
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"clusterIP": "10.96.3.4", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
            })),
            from(serde_json::json!({
                "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                "spec": {"clusterIP": "10.96.0.10", "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}
                ]}
            })),
            from(serde_json::json!({
                "metadata": {"name": "idle", "namespace": "shop"},
                "spec": {"clusterIP": "10.96.3.9", "ports": [{"port": 80}]}
            })),
            from(serde_json::json!({
                "metadata": {"name": "headless", "namespace": "shop"},
                "spec": {"clusterIP": "None", "ports": [{"port": 80}]}
            })),
        ];
        let endpoints: Vec<Endpoints> = vec![
            from(serde_json::json!({
                "metadata": {"name": "web", "namespace": "shop"},
                "subsets": [{"addresses": [{"ip": "10.244.0.5"}, {"ip": "10.244.0.6"}, {"ip": "10.244.0.7"}],
                             "notReadyAddresses": [{"ip": "10.244.0.8"}],
                             "ports": [{"name": "http", "port": 8080}]}]
            })),
            from(serde_json::json!({
                "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                "subsets": [{"addresses": [{"ip": "10.244.0.1"}],
                             "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}]
            })),
        ];
        let routes = routes(&services, &endpoints);
        assert_eq!(routes.len(), 4, "{routes:?}");
        let text = restore_input("AFN-c0ffee", &routes);
        assert_eq!(
            text,
            "*nat\n:AFN-c0ffee - [0:0]\n\
             -A AFN-c0ffee -d 10.96.0.10/32 -p tcp -m tcp --dport 53 -j DNAT --to-destination 10.244.0.1:53\n\
             -A AFN-c0ffee -d 10.96.0.10/32 -p udp -m udp --dport 53 -j DNAT --to-destination 10.244.0.1:53\n\
             -A AFN-c0ffee -d 10.96.3.4/32 -p tcp -m tcp --dport 80 -m statistic --mode random --probability 0.33333333333 -j DNAT --to-destination 10.244.0.5:8080\n\
             -A AFN-c0ffee -d 10.96.3.4/32 -p tcp -m tcp --dport 80 -m statistic --mode random --probability 0.50000000000 -j DNAT --to-destination 10.244.0.6:8080\n\
             -A AFN-c0ffee -d 10.96.3.4/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.244.0.7:8080\n\
             COMMIT\n"
        );
    }
}
