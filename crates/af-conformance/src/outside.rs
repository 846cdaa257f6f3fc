//! The "outside" every harness makes on the Docker daemon: internal networks of its own, each with
//! one host at an address chosen to stand for something a workload must not reach (TEST-NET
//! public hosts, 169.254.169.254, a private-range operator host, IPv6 hosts) or may reach only
//! through the sidecar (an HTTP origin), and the positive control: a container attached to all of
//! them. Also the probe's arguments aimed at those hosts, and the reading of its verdict.

use std::collections::BTreeMap;

use af_docker::test_hosts::{Arrivals, HostSpec, OutsideHost, Program};
use af_docker::{one_shot, teardown};
use af_manifest::EnvironmentId;
use bollard::Docker;

use crate::harness::{
    EXTERNAL_DATABASE_NAME, ORIGIN_NAME, OutsideAddresses, REBIND_NAME, RouteOutcome,
};
use crate::text;

#[derive(Debug)]
pub struct Outside {
    pub addresses: OutsideAddresses,
    pub public: OutsideHost,
    pub operator: OutsideHost,
    pub origin: OutsideHost,
    /// The metadata hosts (v4 and v6) and the global IPv6 host.
    pub others: Vec<OutsideHost>,
    /// Labels the positive control's holder.
    pub own: EnvironmentId,
    /// The positive control: a holder on every outside network.
    pub control: String,
    docker: Docker,
    /// The engine image the hosts and the probes run.
    image: String,
}

impl Outside {
    /// Creates the hosts and the positive control; `tag` keeps them apart from another run's.
    pub async fn create(docker: &Docker, image: &str, tag: &str) -> Result<Outside, String> {
        let host = |name: &str, subnet: &str, program| {
            HostSpec::new(&format!("{tag}-{name}"), subnet, program)
        };
        let public = host("public", "203.0.113.0/24", Program::Server);
        let mut metadata = host("metadata", "169.254.169.0/24", Program::Server);
        metadata.host_number = 254;
        let mut operator = host("operator", "10.214.77.0/24", Program::Server);
        operator.aliases = vec![REBIND_NAME.to_string(), EXTERNAL_DATABASE_NAME.to_string()];
        let mut global6 = host("v6", "198.18.5.0/24", Program::Server);
        global6.v6 = Some(("2001:db8:5::/64".into(), "10".into()));
        // Not 192.0.2.0/24 for its IPv4 side, which a machine's own network may be (this kind's
        // is): its counters are read from the machine over that side.
        let mut metadata6 = host("metadata6", "198.18.6.0/24", Program::Server);
        metadata6.v6 = Some(("fd00:ec2::/64".into(), "254".into()));
        let mut origin = host("origin", "198.51.100.0/24", Program::Origin);
        origin.aliases = vec![ORIGIN_NAME.to_string()];

        let mut made = Vec::new();
        for spec in [public, metadata, operator, global6, metadata6, origin] {
            match OutsideHost::create(docker, image, &spec).await {
                Ok(created) => made.push(created),
                Err(err) => {
                    for host in &made {
                        host.remove(docker).await;
                    }
                    return Err(err.to_string());
                }
            }
        }
        let [public, metadata, operator, global6, metadata6, origin] =
            <[OutsideHost; 6]>::try_from(made).map_err(|_| "six hosts".to_string())?;
        let addresses = OutsideAddresses {
            public: public.ip.clone(),
            metadata: metadata.ip.clone(),
            operator: operator.ip.clone(),
            global_v6: global6.ip6.clone().unwrap_or_default(),
            metadata_v6: metadata6.ip6.clone().unwrap_or_default(),
        };
        let own = EnvironmentId::derive("afc", &format!("harness-{tag}-{}", std::process::id()));
        let mut outside = Outside {
            addresses,
            public,
            operator,
            origin,
            others: vec![metadata, global6, metadata6],
            own,
            control: String::new(),
            docker: docker.clone(),
            image: image.to_string(),
        };
        let control = one_shot::start_holder(
            docker,
            &outside.own,
            "control",
            image,
            &outside.public.network,
        )
        .await;
        match control {
            Ok(control) => outside.control = control,
            Err(err) => {
                outside.remove().await;
                return Err(err.to_string());
            }
        }
        for host in outside.hosts().skip(1) {
            if let Err(err) = host.attach(docker, &outside.control, &[]).await {
                outside.remove().await;
                return Err(err.to_string());
            }
        }
        Ok(outside)
    }

    /// Every host, the public one first.
    pub fn hosts(&self) -> impl Iterator<Item = &OutsideHost> {
        [&self.public, &self.operator, &self.origin]
            .into_iter()
            .chain(self.others.iter())
    }

    /// The runtime's own containment probe aims at the same hosts: never at real addresses.
    pub fn probe_targets(&self) -> Vec<String> {
        let a = &self.addresses;
        [
            ("--public-tcp", format!("{}:3128", a.public)),
            ("--public-dns", format!("{}:53", a.public)),
            ("--metadata", format!("{}:3128", a.metadata)),
            ("--metadata-v6", format!("[{}]:3128", a.metadata_v6)),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .collect()
    }

    /// What has reached each host that counts it (every host but the origin), by its addresses
    /// (IPv4, and IPv6 where it has one): where a route is judged.
    pub async fn arrivals(&self) -> Result<BTreeMap<String, Arrivals>, String> {
        let mut counted = BTreeMap::new();
        for host in std::iter::once(&self.public)
            .chain([&self.operator])
            .chain(self.others.iter())
        {
            let arrived = host.arrivals().await?;
            counted.insert(host.ip.clone(), arrived);
            if let Some(ip6) = &host.ip6 {
                counted.insert(ip6.clone(), arrived);
            }
        }
        Ok(counted)
    }

    /// `routes` tried from the positive control.
    pub async fn try_from_control(&self, routes: &[String]) -> Result<Vec<RouteOutcome>, String> {
        probe_in_container(
            &self.docker,
            &self.image,
            &self.own,
            &self.control,
            &self.addresses,
            routes,
        )
        .await
    }

    /// Removes the hosts and the positive control.
    pub async fn remove(&self) {
        let _ = teardown::down(&self.docker, &self.own).await;
        for host in self.hosts() {
            host.remove(&self.docker).await;
        }
    }
}

/// `af-proxy probe` with `routes`; its standard routes aim at the public host so that nothing is
/// aimed at a real address.
pub fn probe_args(outside: &OutsideAddresses, routes: &[String]) -> Vec<String> {
    let public = &outside.public;
    let mut args: Vec<String> = vec!["probe".into(), "--timeout-ms".into(), "1500".into()];
    for (flag, value) in [
        ("--public-tcp", format!("{public}:3128")),
        ("--public-dns", format!("{public}:53")),
        ("--metadata", format!("{}:3128", outside.metadata)),
        ("--metadata-v6", format!("[{}]:3128", outside.metadata_v6)),
        ("--platform-api", format!("{public}:2375")),
    ] {
        args.extend([flag.to_string(), value]);
    }
    for route in routes {
        args.extend(["--route".to_string(), route.clone()]);
    }
    args
}

/// The outcomes of the asked `routes` in a probe's output (its last line is the verdict).
pub fn asked_outcomes(output: &str, routes: &[String]) -> Result<Vec<RouteOutcome>, String> {
    let verdict: serde_json::Value =
        serde_json::from_str(output.lines().last().unwrap_or_default())
            .map_err(|e| format!("{e}: {output}"))?;
    let all: Vec<RouteOutcome> = serde_json::from_value(verdict["routes"].clone()).map_err(text)?;
    let asked: Vec<&str> = routes
        .iter()
        .map(|r| r.split('=').next().unwrap_or_default())
        .collect();
    Ok(all
        .into_iter()
        .filter(|r| asked.contains(&r.route.as_str()))
        .collect())
}

/// [`probe_args`] run in the network namespace of the Docker container `holder`.
pub async fn probe_in_container(
    docker: &Docker,
    image: &str,
    env: &EnvironmentId,
    holder: &str,
    outside: &OutsideAddresses,
    routes: &[String],
) -> Result<Vec<RouteOutcome>, String> {
    let spec = one_shot::OneShot {
        role: "conformance-probe".into(),
        image: image.to_string(),
        args: probe_args(outside, routes),
        network_mode: format!("container:{holder}"),
        ..Default::default()
    };
    let finished = one_shot::run(docker, env, &spec).await.map_err(text)?;
    asked_outcomes(&format!("{}{}", finished.stderr, finished.stdout), routes)
}

/// What `routes` (`NAME=KIND:ADDRESS`) add to the hosts' counters when they arrive, by host
/// address: a TCP connection for a `tcp` or `http` route to a port a host serves (3128, 853, 53),
/// a DNS query for a `dns` or `udp` route to port 53. Other routes (ICMP, ports nothing serves,
/// hosts that do not count) add nothing: they are judged by their answer alone.
pub fn expected_arrivals(routes: &[String]) -> BTreeMap<String, Arrivals> {
    let mut expected: BTreeMap<String, Arrivals> = BTreeMap::new();
    for route in routes {
        let Some((_, target)) = route.split_once('=') else {
            continue;
        };
        let Some((kind, address)) = target.split_once(':') else {
            continue;
        };
        let Ok(address) = address.parse::<std::net::SocketAddr>() else {
            continue;
        };
        let entry = expected.entry(address.ip().to_string()).or_default();
        match (kind, address.port()) {
            ("tcp" | "http", 3128 | 853 | 53) => entry.connections += 1,
            ("dns" | "udp", 53) => entry.dns_queries += 1,
            _ => {}
        }
    }
    expected
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_expected_where_they_land() {
        let routes = [
            "e1=tcp:203.0.113.10:3128".to_string(),
            "e2=dns:203.0.113.10:53".to_string(),
            "e9=udp:203.0.113.10:53".to_string(),
            "e5=tcp:[2001:db8:5::10]:3128".to_string(),
            "e8=icmp:203.0.113.10".to_string(),
            "api=tcp:203.0.113.10:2375".to_string(),
        ];
        let expected = expected_arrivals(&routes);
        assert_eq!(
            expected["203.0.113.10"],
            Arrivals {
                connections: 1,
                dns_queries: 2
            }
        );
        assert_eq!(expected["2001:db8:5::10"].connections, 1);
    }
}
