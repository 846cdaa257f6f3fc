//! Hosts that stand for "the outside" in tests and in the conformance suite: a container on an
//! internal network the caller makes, at an address the caller chooses (TEST-NET, 169.254.169.254,
//! a private range, IPv6 documentation or ULA prefixes), running the engine image as a TCP, DNS
//! and UDP server (`serve`) or as the conformance agent (an HTTP origin). No packet sent to them
//! can leave the machine, which is the point: tests never aim at real outside addresses.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use af_sidecar_api::SidecarConfig;
use af_sidecar_api::config::{ControlConfig, DnsConfig, Listeners, LogConfig};
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, Ipam, IpamConfig,
    NetworkCreateRequest, NetworkingConfig,
};

use crate::error::{DockerError, internal, platform};

/// What the host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `af-proxy serve`: an HTTP proxy on 3128 (any TCP connection is answered), DNS on 53, and a
    /// listener on 853 where a DNS-over-TLS resolver would be.
    Server,
    /// `af-proxy agent` on 8080: an HTTP origin answering `/boot`, `/seen` and the rest.
    Origin,
}

/// Where and what the host is.
#[derive(Clone, Debug)]
pub struct HostSpec {
    /// Unique within the caller's run: names the network and the host.
    pub tag: String,
    /// An IPv4 /24; the host is at `.host_number`.
    pub subnet: String,
    pub host_number: u8,
    /// A dual-stack network: an IPv6 /64 and the host's interface identifier (`"10"` gives
    /// `<prefix>::10`).
    pub v6: Option<(String, String)>,
    /// Names the host answers to on its network (Docker's resolver answers them to containers
    /// attached to it).
    pub aliases: Vec<String>,
    pub program: Program,
}

impl HostSpec {
    pub fn new(tag: &str, subnet: &str, program: Program) -> HostSpec {
        HostSpec {
            tag: tag.to_string(),
            subnet: subnet.to_string(),
            host_number: 10,
            v6: None,
            aliases: Vec::new(),
            program,
        }
    }
}

/// A running outside host and its network.
#[derive(Clone, Debug)]
pub struct OutsideHost {
    pub ip: String,
    pub ip6: Option<String>,
    pub network: String,
    pub host: String,
}

/// The control token of every [`Program::Server`] host.
const SERVER_TOKEN: &str = "outside-token-0123456789";

/// Where a [`Program::Server`] host's control API listens: on its own network, so that the
/// machine (the bridge's gateway) reads what arrived there.
const SERVER_CONTROL_PORT: u16 = 9901;

/// The sidecar program's configuration for a [`Program::Server`] host. Its counters
/// (`af_egress_connections_total`, `af_egress_dns_queries_total`) count every TCP connection and
/// DNS query that reaches it: where a route is judged ([`OutsideHost::arrivals`]).
fn server_config(any: IpAddr) -> Result<String, DockerError> {
    let mut config = SidecarConfig::new(
        "outside",
        Listeners {
            proxy: Some(SocketAddr::new(any, 3128)),
            dns: Some(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 53))),
            smtp: vec![SocketAddr::new(any, 853)],
            ..Listeners::default()
        },
        ControlConfig::inline(
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, SERVER_CONTROL_PORT)),
            SERVER_TOKEN.to_string(),
        ),
    );
    config.dns = Some(DnsConfig::answering(
        Some(Ipv4Addr::new(203, 0, 113, 10)),
        None,
    ));
    config.log = LogConfig::at("/tmp/decisions.jsonl");
    config
        .to_text()
        .map_err(|e| internal("writing the outside host's configuration", e))
}

/// What reached a [`Program::Server`] host: TCP connections accepted (on 3128 and 853) and DNS
/// queries received (on 53, UDP and TCP, readable or not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrivals {
    pub connections: u64,
    pub dns_queries: u64,
}

impl Arrivals {
    /// Reads the counters out of the host's `/metrics` text.
    pub fn from_metrics(metrics: &str) -> Arrivals {
        let sum = |name: &str| -> u64 {
            metrics
                .lines()
                .filter(|line| !line.starts_with('#'))
                .filter(|line| {
                    line.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
                })
                .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        };
        Arrivals {
            connections: sum("af_egress_connections_total"),
            dns_queries: sum("af_egress_dns_queries_total"),
        }
    }
}

impl OutsideHost {
    /// Creates the network (replacing a leftover of the same name) and starts the host.
    pub async fn create(
        docker: &Docker,
        image: &str,
        spec: &HostSpec,
    ) -> Result<OutsideHost, DockerError> {
        let ip = format!(
            "{}.{}",
            spec.subnet
                .rsplit_once('.')
                .map_or(spec.subnet.as_str(), |(net, _)| net),
            spec.host_number
        );
        let ip6 = spec.v6.as_ref().map(|(subnet6, host6)| {
            let prefix = subnet6
                .split_once("::")
                .map_or(subnet6.as_str(), |(prefix, _)| prefix);
            format!("{prefix}::{host6}")
        });
        let network = format!("af-test-{}-{}-outside", spec.tag, std::process::id());
        let host = format!("{network}-host");
        let outside = OutsideHost {
            ip: ip.clone(),
            ip6: ip6.clone(),
            network: network.clone(),
            host: host.clone(),
        };
        outside.remove(docker).await;
        let subnets =
            std::iter::once(spec.subnet.clone()).chain(spec.v6.iter().map(|(s, _)| s.clone()));
        docker
            .create_network(NetworkCreateRequest {
                name: network.clone(),
                driver: Some("bridge".into()),
                internal: Some(true),
                enable_ipv6: Some(spec.v6.is_some()),
                ipam: Some(Ipam {
                    config: Some(
                        subnets
                            .map(|subnet| IpamConfig {
                                subnet: Some(subnet),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .map_err(|e| platform(format!("creating the test network {network}"), e))?;
        // `[::]` listens on both families (Linux's default for a v6 socket without V6ONLY).
        let any = if spec.v6.is_some() {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        let cmd = match spec.program {
            Program::Server => vec![
                "serve".to_string(),
                "--config-text".to_string(),
                server_config(any)?,
            ],
            Program::Origin => vec![
                "agent".to_string(),
                "--listen".to_string(),
                SocketAddr::new(any, 8080).to_string(),
            ],
        };
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            // Port 53 needs root; the engine image runs as 1337 otherwise.
            user: Some("0".into()),
            cmd: Some(cmd),
            host_config: Some(HostConfig {
                network_mode: Some(network.clone()),
                ..Default::default()
            }),
            networking_config: Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    network.clone(),
                    EndpointSettings {
                        aliases: Some(spec.aliases.clone()),
                        ipam_config: Some(EndpointIpamConfig {
                            ipv4_address: Some(ip),
                            ipv6_address: ip6,
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                )])),
            }),
            ..Default::default()
        };
        docker
            .create_container(
                Some(bollard::query_parameters::CreateContainerOptions {
                    name: Some(host.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(|e| platform(format!("creating the test host {host}"), e))?;
        docker
            .start_container(
                &host,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| platform(format!("starting the test host {host}"), e))?;
        Ok(outside)
    }

    /// Attaches `container` to this host's network, optionally under `aliases`.
    pub async fn attach(
        &self,
        docker: &Docker,
        container: &str,
        aliases: &[String],
    ) -> Result<(), DockerError> {
        docker
            .connect_network(
                &self.network,
                bollard::models::NetworkConnectRequest {
                    container: container.to_string(),
                    endpoint_config: Some(EndpointSettings {
                        aliases: Some(aliases.to_vec()),
                        ..Default::default()
                    }),
                },
            )
            .await
            .map_err(|e| platform(format!("attaching {container} to {}", self.network), e))
    }

    /// What has reached this host so far (a [`Program::Server`] host), read from its counters
    /// over its control API from the machine, which is its network's gateway.
    pub async fn arrivals(&self) -> Result<Arrivals, String> {
        let address = format!("{}:{SERVER_CONTROL_PORT}", self.ip);
        let stream = tokio::net::TcpStream::connect(&address)
            .await
            .map_err(|e| format!("the outside host's counters at {address}: {e}"))?;
        let (_, metrics) =
            af_sidecar_api::control_client::request(stream, SERVER_TOKEN, "GET", "/metrics", "")
                .await
                .map_err(|e| format!("the outside host's counters at {address}: {e}"))?;
        Ok(Arrivals::from_metrics(&metrics))
    }

    /// Removes the host and its network; what is already gone is fine.
    pub async fn remove(&self, docker: &Docker) {
        let _ = docker
            .remove_container(
                &self.host,
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
        let _ = docker.remove_network(&self.network).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_summed_over_every_label() {
        let metrics = "# HELP af_egress_connections_total x\naf_egress_connections_total 7\naf_egress_connections_open 2\naf_egress_dns_queries_total{outcome=\"answered\"} 3\naf_egress_dns_queries_total{outcome=\"malformed\"} 1\n";
        assert_eq!(
            Arrivals::from_metrics(metrics),
            Arrivals {
                connections: 7,
                dns_queries: 4
            }
        );
    }
}
