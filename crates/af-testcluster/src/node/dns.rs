//! The cluster's DNS, as the node serves it (on the Pod network's gateway, behind the `kube-dns`
//! Service): `<service>.<namespace>.svc.<domain>` is the Service's ClusterIP, the names a test
//! gives the node are the addresses it gives them, any other name in the cluster's domain does
//! not exist, and a name outside it is refused — a cluster's resolver would forward it to the
//! node's own, and this node has none that leads anywhere.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use af_wire::dns_wire::{self, RCODE_REFUSED, TYPE_A};
use k8s_openapi::api::core::v1::Service;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::services::ServiceView;

/// What the cluster's DNS says of a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The name's address (an A answer; an AAAA question gets an empty NOERROR).
    Address(Ipv4Addr),
    /// In the cluster's domain, and not there: NXDOMAIN.
    NoSuchName,
    /// Outside the cluster's domain: REFUSED.
    Refused,
}

const RCODE_NXDOMAIN: u8 = 3;

/// The answer for `name` (lower case, no trailing dot).
pub fn answer(
    name: &str,
    domain: &str,
    services: &[Service],
    records: &BTreeMap<String, Ipv4Addr>,
) -> Answer {
    if let Some(ip) = records.get(name) {
        return Answer::Address(*ip);
    }
    let Some(inside) = name
        .strip_suffix(domain)
        .and_then(|rest| rest.strip_suffix('.'))
    else {
        return if name == domain {
            Answer::NoSuchName
        } else {
            Answer::Refused
        };
    };
    let labels: Vec<&str> = inside.split('.').collect();
    if let [service, namespace, "svc"] = labels.as_slice() {
        let found = services.iter().find(|s| {
            s.metadata.name.as_deref() == Some(*service)
                && s.metadata.namespace.as_deref() == Some(*namespace)
        });
        if let Some(ip) = found.and_then(|s| {
            s.spec
                .as_ref()?
                .cluster_ip
                .as_deref()?
                .parse::<Ipv4Addr>()
                .ok()
        }) {
            return Answer::Address(ip);
        }
    }
    Answer::NoSuchName
}

/// The response to one query, or `None` for bytes that are not one.
fn respond(
    query: &[u8],
    domain: &str,
    view: &ServiceView,
    records: &BTreeMap<String, Ipv4Addr>,
) -> Option<Vec<u8>> {
    let question = match dns_wire::read_query(query) {
        Ok(question) => question,
        Err(unreadable) => return unreadable.id.map(dns_wire::format_error),
    };
    let name = question.name_text();
    Some(match answer(&name, domain, &view.services(), records) {
        Answer::Address(ip) if question.qtype == TYPE_A => {
            question.address_response(Some(ip), None, 5)
        }
        Answer::Address(_) => question.empty_response(0),
        Answer::NoSuchName => question.empty_response(RCODE_NXDOMAIN),
        Answer::Refused => question.empty_response(RCODE_REFUSED),
    })
}

/// Serves DNS on `address` (UDP and TCP) until dropped.
pub async fn serve(
    address: IpAddr,
    domain: String,
    view: ServiceView,
    records: BTreeMap<String, Ipv4Addr>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let at = SocketAddr::new(address, 53);
    let udp = tokio::net::UdpSocket::bind(at)
        .await
        .map_err(|e| format!("the cluster DNS on udp {at}: {e}"))?;
    let tcp = tokio::net::TcpListener::bind(at)
        .await
        .map_err(|e| format!("the cluster DNS on tcp {at}: {e}"))?;
    let shared = std::sync::Arc::new((domain, view, records));
    let udp_shared = shared.clone();
    let udp_task = async move {
        let mut buffer = vec![0u8; 4096];
        loop {
            let Ok((len, from)) = udp.recv_from(&mut buffer).await else {
                continue;
            };
            let (domain, view, records) = &*udp_shared;
            if let Some(reply) = respond(&buffer[..len], domain, view, records) {
                let _ = udp.send_to(&reply, from).await;
            }
        }
    };
    let tcp_task = async move {
        loop {
            let Ok((mut stream, _)) = tcp.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                loop {
                    let Ok(len) = stream.read_u16().await else {
                        return;
                    };
                    let mut query = vec![0u8; usize::from(len)];
                    if stream.read_exact(&mut query).await.is_err() {
                        return;
                    }
                    let (domain, view, records) = &*shared;
                    let Some(reply) = respond(&query, domain, view, records) else {
                        return;
                    };
                    let Ok(reply_len) = u16::try_from(reply.len()) else {
                        return;
                    };
                    if stream.write_u16(reply_len).await.is_err()
                        || stream.write_all(&reply).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    };
    Ok(tokio::spawn(async move {
        tokio::join!(udp_task, tcp_task);
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_answer_in_the_domain_and_nothing_outside_it_is_answered() {
        let services: Vec<Service> = vec![
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "worker", "namespace": "af-shop"},
                "spec": {"clusterIP": "10.96.7.8"}
            }))
            .unwrap(),
        ];
        let records = BTreeMap::from([(
            "origin.conformance.test".to_string(),
            Ipv4Addr::new(198, 51, 100, 10),
        )]);
        let ask = |name: &str| answer(name, "cluster.local", &services, &records);
        assert_eq!(
            ask("worker.af-shop.svc.cluster.local"),
            Answer::Address(Ipv4Addr::new(10, 96, 7, 8))
        );
        assert_eq!(ask("worker.other.svc.cluster.local"), Answer::NoSuchName);
        assert_eq!(ask("cluster.local"), Answer::NoSuchName);
        assert_eq!(
            ask("origin.conformance.test"),
            Answer::Address(Ipv4Addr::new(198, 51, 100, 10))
        );
        assert_eq!(ask("example.com"), Answer::Refused);
        assert_eq!(ask("evilcluster.local"), Answer::Refused);
    }
}
