//! The node: registered with the API server under its own identity (`system:node:NAME`, so the
//! Node authorizer and NodeRestriction judge it as a kubelet), heartbeating, running the Pods
//! bound to it ([`pods`]), routing ClusterIPs ([`services`]), answering the cluster DNS ([`dns`]),
//! relaying the `kubernetes` Service to the API server on loopback, and serving the API the API
//! server proxies exec, logs and port-forward to ([`api`]).
//!
//! The Pod network is a Docker network of the node's, `internal` (no route off the machine),
//! whose gateway is the node's side of it: the cluster DNS and the API server relay listen there,
//! and the `kube-dns` and `kubernetes` Services' Endpoints (written by [`crate::cluster`]) point
//! there. A test's "outside" networks (`uplinks`) are attached to every Pod, as a cluster's nodes
//! route to the internet: what gets there is what the Pod's own rules let through.

mod api;
pub mod dns;
mod netns;
pub mod pods;
pub mod quantity;
pub mod registration;
pub mod services;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node as NodeObject;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

/// How the node is set up.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The Node's name; its client certificate is `system:node:NAME`.
    pub name: String,
    /// The control plane's id (`scripts/control-plane`): every Docker object carries it.
    pub cluster_id: String,
    /// The node's kubeconfig (its own identity).
    pub kubeconfig: PathBuf,
    /// kube-proxy's kubeconfig: the Service routing reads Endpoints, which a kubelet may not.
    pub proxy_kubeconfig: PathBuf,
    /// The cluster's CA: the node serves only clients it signed.
    pub cluster_ca: PathBuf,
    /// The API server, which the `kubernetes` Service reaches through the node's relay.
    pub api_server: SocketAddr,
    /// The image and command of every Pod's holder (a program that waits for SIGTERM).
    pub pause_image: String,
    pub pause_command: Vec<String>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub max_pods: u32,
    /// The sysctls a Pod may set ([`pods::admit::SAFE_SYSCTLS`], or 1.20's).
    pub safe_sysctls: Vec<String>,
    /// Docker networks every Pod is attached to besides the Pod network: a test's outside.
    pub uplinks: Vec<String>,
    /// Names the cluster DNS answers beside the Services'.
    pub dns_records: BTreeMap<String, Ipv4Addr>,
    /// Where Pods' volumes and files are made.
    pub data_dir: PathBuf,
    pub domain: String,
    /// The Services' range (`--service-cluster-ip-range`), routed into every Pod by way of the node.
    pub service_cidr: String,
    /// The `kube-dns` Service's ClusterIP, every `ClusterFirst` Pod's resolver.
    pub cluster_dns: IpAddr,
}

/// The node's Pod network.
#[derive(Clone, Debug)]
pub struct PodNetwork {
    pub name: String,
    /// The Linux bridge behind it (`br-<id>`), whose traffic the ClusterIP chain sees.
    pub bridge: String,
    pub subnet: String,
    /// The node's own address on it.
    pub gateway: Ipv4Addr,
}

/// What every part of the node uses.
pub struct Shared {
    pub config: NodeConfig,
    pub client: kube::Client,
    pub docker: Docker,
    pub network: PodNetwork,
    pub services: services::ServiceView,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("network", &self.network)
            .finish()
    }
}

/// A running node. Its tasks stop when it is dropped; [`Node::stop`] also removes what it made.
#[derive(Debug)]
pub struct Node {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The port the node relays to the API server on, on the Pod network's gateway.
pub const API_RELAY_PORT: u16 = 6443;

impl Node {
    /// The Pod network's gateway: where the cluster DNS (port 53) and the API server relay
    /// ([`API_RELAY_PORT`]) are.
    pub fn gateway(&self) -> Ipv4Addr {
        self.shared.network.gateway
    }

    pub fn network(&self) -> &PodNetwork {
        &self.shared.network
    }

    pub fn config(&self) -> &NodeConfig {
        &self.shared.config
    }

    /// Starts a node: the Pod network, the routing chain, the DNS, the relay, its API, its
    /// registration and heartbeat, its Pods.
    pub async fn start(config: NodeConfig) -> Result<Node, String> {
        let docker =
            Docker::connect_with_local_defaults().map_err(|e| format!("the Docker daemon: {e}"))?;
        let info = docker
            .info()
            .await
            .map_err(|e| format!("the Docker daemon: {e}"))?;
        let network = pod_network(&docker, &config).await?;
        let client = client_of(&config.kubeconfig).await?;
        let chain = services::rules::chain(&config.cluster_id);
        services::install(&chain, &network.bridge).await?;
        let (view, routing) = services::start(client_of(&config.proxy_kubeconfig).await?, chain);
        let shared = Arc::new(Shared {
            config,
            client,
            docker,
            network,
            services: view,
        });
        let mut tasks = vec![routing];
        tasks.push(
            dns::serve(
                IpAddr::V4(shared.network.gateway),
                shared.config.domain.clone(),
                shared.services.clone(),
                shared.config.dns_records.clone(),
            )
            .await?,
        );
        tasks.push(relay(shared.network.gateway, shared.config.api_server).await?);
        let (port, serving) = api::serve(shared.clone()).await?;
        tasks.push(serving);
        let facts = registration::NodeFacts {
            name: shared.config.name.clone(),
            cpu_millis: shared.config.cpu_millis,
            memory_bytes: shared.config.memory_bytes,
            max_pods: shared.config.max_pods,
            kubelet_port: port,
            docker_daemon: info.id.clone().unwrap_or_default(),
            docker_version: info.server_version.clone().unwrap_or_default(),
            kernel: info.kernel_version.clone().unwrap_or_default(),
        };
        register(&shared.client, &facts).await?;
        tasks.push(tokio::spawn(heartbeat(shared.client.clone(), facts)));
        tasks.push(tokio::spawn(pods::supervise(shared.clone())));
        Ok(Node { shared, tasks })
    }

    /// Stops the node's tasks and removes its Pods' containers, its chain and its network.
    pub async fn stop(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        let shared = &self.shared;
        let filters = std::collections::HashMap::from([(
            "label".to_string(),
            vec![format!(
                "{}={}",
                crate::CLUSTER_LABEL,
                shared.config.cluster_id
            )],
        )]);
        let listed = shared
            .docker
            .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            }))
            .await
            .unwrap_or_default();
        for container in listed {
            if let Some(id) = container.id {
                let _ = shared
                    .docker
                    .remove_container(
                        &id,
                        Some(bollard::query_parameters::RemoveContainerOptions {
                            force: true,
                            v: true,
                            ..Default::default()
                        }),
                    )
                    .await;
            }
        }
        services::uninstall(
            &services::rules::chain(&shared.config.cluster_id),
            &shared.network.bridge,
        )
        .await;
        let _ = shared.docker.remove_network(&shared.network.name).await;
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A client with the identity of `kubeconfig`.
async fn client_of(kubeconfig: &std::path::Path) -> Result<kube::Client, String> {
    let read = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(read, &Default::default())
        .await
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

/// The node's Pod network: an internal Docker network on the first free /24 of 10.244.0.0/16.
async fn pod_network(docker: &Docker, config: &NodeConfig) -> Result<PodNetwork, String> {
    let name = format!("afn-{}", config.cluster_id);
    let mut last_error = String::new();
    for third in 0..=255u8 {
        let subnet = format!("10.244.{third}.0/24");
        let gateway = Ipv4Addr::new(10, 244, third, 1);
        let request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".to_string()),
            internal: Some(true),
            ipam: Some(Ipam {
                config: Some(vec![IpamConfig {
                    subnet: Some(subnet.clone()),
                    gateway: Some(gateway.to_string()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            labels: Some(std::collections::HashMap::from([(
                crate::CLUSTER_LABEL.to_string(),
                config.cluster_id.clone(),
            )])),
            ..Default::default()
        };
        match docker.create_network(request).await {
            Ok(created) => {
                let id = created.id;
                return Ok(PodNetwork {
                    name,
                    bridge: format!("br-{}", &id[..id.len().min(12)]),
                    subnet,
                    gateway,
                });
            }
            Err(err) => last_error = err.to_string(),
        }
    }
    Err(format!(
        "no free /24 in 10.244.0.0/16 for the Pod network: {last_error}"
    ))
}

/// Relays TCP from the Pod network's gateway to the API server on loopback: what the
/// `kubernetes` Service's endpoint is.
async fn relay(gateway: Ipv4Addr, api: SocketAddr) -> Result<tokio::task::JoinHandle<()>, String> {
    let at = SocketAddr::from((gateway, API_RELAY_PORT));
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .map_err(|e| format!("the API server relay on {at}: {e}"))?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(api).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }))
}

/// Creates the Node (or takes over one of its name) and writes its status.
async fn register(client: &kube::Client, facts: &registration::NodeFacts) -> Result<(), String> {
    let nodes: Api<NodeObject> = Api::all(client.clone());
    match nodes
        .create(&PostParams::default(), &registration::node(facts))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => return Err(format!("registering Node {}: {err}", facts.name)),
    }
    write_status(client, facts).await
}

async fn write_status(
    client: &kube::Client,
    facts: &registration::NodeFacts,
) -> Result<(), String> {
    let nodes: Api<NodeObject> = Api::all(client.clone());
    let current = nodes
        .get(&facts.name)
        .await
        .map_err(|e| format!("reading Node {}: {e}", facts.name))?;
    let status = registration::status(facts, current.status.as_ref(), Timestamp::now());
    nodes
        .patch_status(
            &facts.name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await
        .map(drop)
        .map_err(|e| format!("writing the status of Node {}: {e}", facts.name))
}

/// Renews the Lease and the status every ten seconds, as a kubelet does.
async fn heartbeat(client: kube::Client, facts: registration::NodeFacts) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    loop {
        let lease = registration::lease(&facts.name, Timestamp::now());
        if let Err(err) = leases
            .patch(
                &facts.name,
                &PatchParams::apply("af-testnode").force(),
                &Patch::Apply(&lease),
            )
            .await
        {
            tracing::warn!("renewing the node's Lease: {err}");
        }
        if let Err(err) = write_status(&client, &facts).await {
            tracing::warn!("{err}");
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}
