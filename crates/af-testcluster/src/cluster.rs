//! A control plane and its node for a test binary: the control plane started by
//! `scripts/control-plane` (its data in a temporary folder, stopped when the test process ends,
//! however it ends), the node started on a thread of its own, and the cluster's add-ons a
//! kubelet-less cluster needs written with the admin's identity: the `kube-dns` Service and its
//! Endpoints, and the `kubernetes` Service's Endpoints — both the node's gateway, where its DNS
//! and its relay to the API server listen.
//!
//! There is no skipping: a test that needs the cluster and cannot have it fails, saying what to
//! install (`scripts/control-plane install`, which `.ci/install` runs).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::node::{API_RELAY_PORT, Node, NodeConfig, pods::admit};

/// The Services' range, as scripts/control-plane gives the API server.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

/// The cluster's resolver's ClusterIP (`kube-system/kube-dns`), as kind and kubeadm have it.
pub const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);

/// How the test wants its cluster.
#[derive(Clone, Debug)]
pub struct Options {
    /// Docker networks every Pod is attached to: the test's outside.
    pub uplinks: Vec<String>,
    /// Names the cluster DNS answers.
    pub dns_records: BTreeMap<String, Ipv4Addr>,
    /// The sysctls Pods may set.
    pub safe_sysctls: Vec<String>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            uplinks: Vec::new(),
            dns_records: BTreeMap::new(),
            safe_sysctls: admit::SAFE_SYSCTLS.iter().map(|s| s.to_string()).collect(),
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
        }
    }
}

/// A running control plane and node. Dropping it stops both and removes what they made.
#[derive(Debug)]
pub struct TestCluster {
    /// The control plane's folder (PKI, data, logs, kubeconfigs).
    pub dir: PathBuf,
    /// The admin's kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    pub cluster_id: String,
    pub node_name: String,
    /// The node's side of the Pod network.
    pub gateway: Ipv4Addr,
    /// The Pod network's Docker network.
    pub pod_network: String,
    /// The image every Pod's holder runs (the engine image).
    pub engine_image: String,
    node: Option<NodeThread>,
}

#[derive(Debug)]
struct NodeThread {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script() -> PathBuf {
    repository().join("scripts/control-plane")
}

/// `scripts/control-plane ARGS`, its standard output.
fn control_plane(args: &[&str]) -> Result<String, String> {
    let output = std::process::Command::new("bash")
        .arg(script())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("running scripts/control-plane: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "scripts/control-plane {} failed: {}\n(install it with `scripts/control-plane install`, as root; .ci/install runs it)",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

impl TestCluster {
    /// One cluster for the whole test binary, with the default options; the control plane stops
    /// when the binary ends. Panics, saying why, when it cannot be had.
    pub fn shared() -> &'static TestCluster {
        // The failure too is kept: every test of the binary says it, none starts another.
        static SHARED: OnceLock<Result<TestCluster, String>> = OnceLock::new();
        match SHARED.get_or_init(|| TestCluster::start(Options::default())) {
            Ok(cluster) => cluster,
            Err(err) => panic!("the tests' Kubernetes cluster: {err}"),
        }
    }

    /// Starts a control plane and a node; blocks until both are ready (from any thread, a
    /// runtime's too: the work is done on a thread of its own).
    pub fn start(options: Options) -> Result<TestCluster, String> {
        std::thread::spawn(move || TestCluster::start_here(options))
            .join()
            .map_err(|_| "starting the tests' cluster panicked".to_string())?
    }

    fn start_here(options: Options) -> Result<TestCluster, String> {
        static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let engine_image = engine_image()?;
        let dir = std::env::temp_dir().join(format!(
            "af-testcluster-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let owner = std::process::id().to_string();
        let kubeconfig = PathBuf::from(control_plane(&[
            "start",
            &dir.to_string_lossy(),
            "--owner",
            &owner,
        ])?);
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .map(|s| s.trim().to_string())
                .map_err(|e| format!("{}: {e}", dir.join(name).display()))
        };
        let cluster_id = read("id")?;
        let node_name = read("node-name")?;
        let server = read("server")?;
        let api_server: SocketAddr = server
            .trim_start_matches("https://")
            .parse()
            .map_err(|e| format!("the API server's address {server:?}: {e}"))?;
        let config = NodeConfig {
            name: node_name.clone(),
            cluster_id: cluster_id.clone(),
            kubeconfig: dir.join("node.kubeconfig"),
            proxy_kubeconfig: dir.join("kube-proxy.kubeconfig"),
            cluster_ca: dir.join("pki/ca.crt"),
            api_server,
            pause_image: engine_image.clone(),
            pause_command: vec!["hold".to_string()],
            cpu_millis: options.cpu_millis,
            memory_bytes: options.memory_bytes,
            max_pods: 110,
            safe_sysctls: options.safe_sysctls.clone(),
            uplinks: options.uplinks.clone(),
            dns_records: options.dns_records.clone(),
            data_dir: dir.join("node"),
            domain: "cluster.local".to_string(),
            service_cidr: SERVICE_CIDR.to_string(),
            cluster_dns: IpAddr::V4(CLUSTER_DNS),
        };
        let (thread, gateway, pod_network) = match run_node(config) {
            Ok(started) => started,
            Err(err) => {
                let _ = control_plane(&["stop", &dir.to_string_lossy()]);
                return Err(err);
            }
        };
        let cluster = TestCluster {
            dir,
            kubeconfig,
            cluster_id,
            node_name,
            gateway,
            pod_network,
            engine_image,
            node: Some(thread),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            cluster.add_ons().await?;
            cluster.schedulable().await
        })?;
        Ok(cluster)
    }

    /// Waits until the scheduler may place pods on the node: the node lifecycle controller taints
    /// a node `not-ready` until it has seen it Ready, and a pod made before that is Unschedulable.
    async fn schedulable(&self) -> Result<(), String> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client().await?);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let node = nodes
                .get(&self.node_name)
                .await
                .map_err(|e| format!("reading Node {}: {e}", self.node_name))?;
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| !t.is_empty());
            if ready && !tainted {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "Node {} was not ready and untainted within 120 s: {:?}",
                    self.node_name, node.spec
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    /// A client with the admin's identity.
    pub async fn client(&self) -> Result<kube::Client, String> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .map_err(|e| format!("{}: {e}", self.kubeconfig.display()))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        kube::Client::try_from(config).map_err(|e| e.to_string())
    }

    /// The kubectl built with the control plane.
    pub fn kubectl(&self) -> PathBuf {
        control_plane(&["env", &self.dir.to_string_lossy()])
            .ok()
            .and_then(|env| {
                env.lines()
                    .find_map(|l| l.strip_prefix("AF_CONTROL_PLANE_BIN=").map(PathBuf::from))
            })
            .map(|bin| bin.join("kubectl"))
            .unwrap_or_else(|| PathBuf::from("kubectl"))
    }

    /// The cluster DNS Service and the two Services' endpoints at the node's gateway.
    async fn add_ons(&self) -> Result<(), String> {
        let client = self.client().await?;
        let apply = PatchParams::apply("af-testcluster").force();
        let gateway = self.gateway.to_string();
        let dns = Service {
            metadata: ObjectMeta {
                name: Some("kube-dns".into()),
                namespace: Some("kube-system".into()),
                labels: Some(BTreeMap::from([("k8s-app".into(), "kube-dns".into())])),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(CLUSTER_DNS.to_string()),
                ports: Some(vec![
                    ServicePort {
                        name: Some("dns".into()),
                        port: 53,
                        protocol: Some("UDP".into()),
                        ..Default::default()
                    },
                    ServicePort {
                        name: Some("dns-tcp".into()),
                        port: 53,
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        Api::<Service>::namespaced(client.clone(), "kube-system")
            .patch("kube-dns", &apply, &Patch::Apply(&dns))
            .await
            .map_err(|e| format!("the kube-dns Service: {e}"))?;
        let endpoints = |namespace: &str, name: &str, ports: Vec<EndpointPort>| Endpoints {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            subsets: Some(vec![EndpointSubset {
                addresses: Some(vec![EndpointAddress {
                    ip: gateway.clone(),
                    ..Default::default()
                }]),
                ports: Some(ports),
                ..Default::default()
            }]),
        };
        let port = |name: &str, port: u16, protocol: &str| EndpointPort {
            name: Some(name.into()),
            port: i32::from(port),
            protocol: Some(protocol.into()),
            ..Default::default()
        };
        Api::<Endpoints>::namespaced(client.clone(), "kube-system")
            .patch(
                "kube-dns",
                &apply,
                &Patch::Apply(&endpoints(
                    "kube-system",
                    "kube-dns",
                    vec![port("dns", 53, "UDP"), port("dns-tcp", 53, "TCP")],
                )),
            )
            .await
            .map_err(|e| format!("the kube-dns Endpoints: {e}"))?;
        Api::<Endpoints>::namespaced(client, "default")
            .patch(
                "kubernetes",
                &apply,
                &Patch::Apply(&endpoints(
                    "default",
                    "kubernetes",
                    vec![port("https", API_RELAY_PORT, "TCP")],
                )),
            )
            .await
            .map_err(|e| format!("the kubernetes Endpoints: {e}"))?;
        Ok(())
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            let _ = node.stop.send(());
            let _ = node.thread.join();
        }
        let _ = control_plane(&["stop", &self.dir.to_string_lossy()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The engine image (`AF_PROXY_IMAGE`, or built from the static af-proxy): every Pod's holder.
fn engine_image() -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let docker = af_docker::connect().await.map_err(|e| e.to_string())?;
        af_docker::engine_image::ensure(&docker)
            .await
            .map_err(|e| e.to_string())
    })
}

/// Runs the node on a thread (and runtime) of its own; its handle, gateway and Pod network.
fn run_node(config: NodeConfig) -> Result<(NodeThread, Ipv4Addr, String), String> {
    let (started, ready) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("af-testnode".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = started.send(Err(err.to_string()));
                    return;
                }
            };
            runtime.block_on(async move {
                match Node::start(config).await {
                    Ok(node) => {
                        let _ = started.send(Ok((node.gateway(), node.network().name.clone())));
                        let _ = stopped.await;
                        node.stop().await;
                    }
                    Err(err) => {
                        let _ = started.send(Err(err));
                    }
                }
            });
        })
        .map_err(|e| e.to_string())?;
    let (gateway, network) = ready
        .recv()
        .map_err(|_| "the node's thread ended before the node started".to_string())??;
    Ok((NodeThread { stop, thread }, gateway, network))
}
