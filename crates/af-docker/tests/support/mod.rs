//! What the Docker tests share: test hosts on networks the tests make, and cleanup.

#![allow(dead_code, reason = "each test file uses its own part")]

use std::collections::HashMap;

use af_docker::teardown;
use af_manifest::EnvironmentId;
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, Ipam, IpamConfig,
    NetworkCreateRequest, NetworkingConfig,
};

/// The test's own "outside": an internal network at TEST-NET-3 with one host on it running the
/// sidecar program as a TCP and DNS server. Removed when dropped.
pub struct Outside {
    pub ip: String,
    /// The host's IPv6 address, on a dual-stack outside network.
    pub ip6: Option<String>,
    pub docker: Docker,
    pub network: String,
    pub host: String,
}

impl Outside {
    /// A host at `.10` of `subnet` (a /24) on an internal network of its own.
    pub async fn create(docker: &Docker, image: &str, tag: &str, subnet: &str) -> Outside {
        Self::create_at(docker, image, tag, subnet, 10).await
    }

    /// A host at `.<host_number>` of `subnet` (a /24).
    pub async fn create_at(
        docker: &Docker,
        image: &str,
        tag: &str,
        subnet: &str,
        host_number: u8,
    ) -> Outside {
        Self::create_with(docker, image, tag, subnet, host_number, None).await
    }

    /// A host at `.10` of `subnet` and at `subnet6`'s address `<prefix>::<host6>` (a /64), on a
    /// dual-stack network; it serves on both families.
    pub async fn create_dual_stack(
        docker: &Docker,
        image: &str,
        tag: &str,
        subnet: &str,
        subnet6: &str,
        host6: &str,
    ) -> Outside {
        Self::create_with(docker, image, tag, subnet, 10, Some((subnet6, host6))).await
    }

    async fn create_with(
        docker: &Docker,
        image: &str,
        tag: &str,
        subnet: &str,
        host_number: u8,
        v6: Option<(&str, &str)>,
    ) -> Outside {
        let ip6 = v6.map(|(subnet6, host6)| {
            let prefix = subnet6
                .split_once("::")
                .map_or(subnet6, |(prefix, _)| prefix);
            format!("{prefix}::{host6}")
        });
        let ip = format!(
            "{}.{host_number}",
            subnet.rsplit_once('.').map_or(subnet, |(net, _)| net)
        );
        let network = format!("af-test-{tag}-{}-public", std::process::id());
        let host = format!("{network}-host");
        let _ = docker
            .remove_container(
                &host,
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
        let _ = docker.remove_network(&network).await;
        docker
            .create_network(NetworkCreateRequest {
                name: network.clone(),
                driver: Some("bridge".into()),
                internal: Some(true),
                enable_ipv6: Some(v6.is_some()),
                ipam: Some(Ipam {
                    config: Some(
                        std::iter::once(subnet)
                            .chain(v6.map(|(subnet6, _)| subnet6))
                            .map(|subnet| IpamConfig {
                                subnet: Some(subnet.to_string()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .expect("the test's outside network");
        // `[::]` listens on both families (Linux's default for a v6 socket without V6ONLY).
        let any = if v6.is_some() { "[::]" } else { "0.0.0.0" };
        let config = &format!(
            "environment: outside\npolicy: {{}}\nlisten: {{proxy: '{any}:3128', dns: 0.0.0.0:53}}\ndns: {{answer_v4: 203.0.113.10}}\ncontrol: {{listen: 127.0.0.1:9901, token: outside-token-0123456789}}\nlog: {{path: /var/log/af/decisions.jsonl}}\n"
        );
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            user: Some("0".into()),
            cmd: Some(vec![
                "serve".into(),
                "--config".into(),
                "/etc/af/outside.yaml".into(),
            ]),
            host_config: Some(HostConfig {
                network_mode: Some(network.clone()),
                ..Default::default()
            }),
            networking_config: Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    network.clone(),
                    EndpointSettings {
                        ipam_config: Some(EndpointIpamConfig {
                            ipv4_address: Some(ip.clone()),
                            ipv6_address: ip6.clone(),
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
            .expect("the outside host");
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(config.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        archive
            .append_data(&mut header, "etc/af/outside.yaml", config.as_bytes())
            .unwrap();
        let options = bollard::query_parameters::UploadToContainerOptions {
            path: "/".into(),
            ..Default::default()
        };
        docker
            .upload_to_container(
                &host,
                Some(options),
                bollard::body_full(archive.into_inner().unwrap().into()),
            )
            .await
            .expect("the outside host's configuration");
        docker
            .start_container(
                &host,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .expect("the outside host starts");
        Outside {
            ip,
            ip6,
            docker: docker.clone(),
            network,
            host,
        }
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let (docker, network, host) =
            (self.docker.clone(), self.network.clone(), self.host.clone());
        // Drop cannot await; a short runtime of its own removes the test's objects.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let _ = docker
                    .remove_container(
                        &host,
                        Some(bollard::query_parameters::RemoveContainerOptions {
                            force: true,
                            ..Default::default()
                        }),
                    )
                    .await;
                let _ = docker.remove_network(&network).await;
            });
        })
        .join()
        .unwrap();
    }
}

/// Removes an environment's labelled objects when a test ends, however it ends.
pub struct Teardown(pub Docker, pub EnvironmentId);

impl Drop for Teardown {
    fn drop(&mut self) {
        let (docker, env) = (self.0.clone(), self.1.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _ = runtime.block_on(teardown::down(&docker, &env));
        })
        .join()
        .unwrap();
    }
}
