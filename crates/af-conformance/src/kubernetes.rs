//! The Kubernetes runtime's harness, for a disposable k3d cluster (`scripts/k8s-conformance`
//! makes one; nothing else is touched). The outside is the same set of Docker-side hosts as the
//! local harness ([`Outside`]). k3d's nodes are containers on the same daemon, so each node is
//! attached to every outside network: what the environment's policies let out (the sidecar alone)
//! reaches those hosts through its node, as it would reach the internet. The names the fixtures
//! allow (the origin, the rebinding name) are given to the cluster's resolver in a server block of
//! k3s's `coredns-custom` ConfigMap. The positive control is the Docker-side container on every
//! outside network (the hosts answer); that the cluster itself routes to them is proved once, at
//! the start, by a pod with no policy over it.
//!
//! Not run on this project's CI (it has no cluster); written against k3s v1.33 and k3d v5.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use af_kube::apply::Patience;
use af_kube::apply::probe::run_to_output;
use af_kube::images::{DockerImageWork, Loader, load_command};
use af_kube::render::names::{
    ROLE_LABEL, SERVICE_LABEL, SIDECAR, WORKLOAD_LABEL, namespace as namespace_name, ownership,
};
use af_kube::runtime::ImageWork;
use af_kube::{KubeRuntime, render::ports};
use af_manifest::EnvironmentId;
use af_runtime::Runtime;
use async_trait::async_trait;
use bollard::Docker;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, PodSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};

use crate::harness::{Harness, ORIGIN_NAME, REBIND_NAME, RouteOutcome};
use crate::outside::{Outside, asked_outcomes, probe_args};
use crate::text;

/// The prefix of the suite's environments' namespaces.
const NAMESPACE_PREFIX: &str = "afc";
/// The harness's own field manager, for the one object it adds to the cluster's configuration.
const FIELD_MANAGER: &str = "af-conformance";
/// How long `up` waits for readiness in a run: a behaviour has four minutes in all, and one
/// proves that a service never ready stops `up` (af's own patience is five).
const READINESS_TIMEOUT: Duration = Duration::from_secs(60);
/// The Kubernetes version of the project's control plane, which af is told to allow.
const CONTROL_PLANE_VERSION: &str = "1.20";
/// The key of the resolver's server block; k3s imports `*.server` keys of `coredns-custom`.
const RESOLVER_KEY: &str = "af-conformance.server";
/// A pod of the harness: the image is on every node, the routes take seconds.
const POD_PATIENCE: Patience = Patience {
    timeout: Duration::from_secs(120),
    interval: Duration::from_secs(1),
};

pub struct KubeHarness {
    docker: Docker,
    client: kube::Client,
    runtime: KubeRuntime,
    image: String,
    outside: Outside,
    /// The k3d node containers attached to the outside networks.
    nodes: Vec<String>,
    /// The control plane and node the harness started itself, when it runs on them
    /// ([`KubeHarness::start_control_plane`]): stopped at [`Harness::close`].
    control_plane: std::sync::Mutex<Option<af_testcluster::TestCluster>>,
    /// The harness's own namespace (the positive control's pods).
    own_namespace: String,
    scratch: PathBuf,
}

impl std::fmt::Debug for KubeHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeHarness")
            .field("runtime", &self.runtime)
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl KubeHarness {
    /// Connects through the kubeconfig's current context, which must be a k3d cluster's; makes
    /// the outside, attaches the nodes to it, gives the resolver the fixtures' names and copies
    /// the engine image into the nodes. `tag` keeps the harness's objects apart.
    pub async fn start(tag: &str) -> Result<KubeHarness, String> {
        let (docker, image, outside) = outside(tag).await?;
        let mut harness = match KubeHarness::connect(docker.clone(), image, outside, tag).await {
            Ok(harness) => harness,
            Err((outside, err)) => {
                outside.remove().await;
                return Err(err);
            }
        };
        if let Err(err) = harness.prepare_cluster().await {
            harness.close().await;
            return Err(err);
        }
        Ok(harness)
    }

    /// The project's own cluster (issue 47): Kubernetes 1.20's control plane from Debian's
    /// source (`scripts/control-plane`) and the tests' node (crates/af-testcluster), started here
    /// with every pod attached to the outside — as a cluster's nodes route to the internet — and
    /// the fixtures' names in the cluster's DNS. The node enforces no NetworkPolicy: the run is
    /// one of netlock's. af is told the cluster's version is allowed
    /// (`AF_KUBERNETES_ALLOW_VERSION`), and builds on the daemon the node runs on.
    pub async fn start_control_plane(tag: &str) -> Result<KubeHarness, String> {
        let (docker, image, outside) = outside(tag).await?;
        let harness = match KubeHarness::on_control_plane(docker, image, outside, tag).await {
            Ok(harness) => harness,
            Err((outside, err)) => {
                outside.remove().await;
                return Err(err);
            }
        };
        if let Err(err) = harness.own_namespace_and_reach().await {
            harness.close().await;
            return Err(err);
        }
        Ok(harness)
    }

    async fn on_control_plane(
        docker: Docker,
        image: String,
        outside: Outside,
        tag: &str,
    ) -> Result<KubeHarness, (Outside, String)> {
        let started = async {
            let parse = |ip: &str| ip.parse().map_err(|e| format!("{ip}: {e}"));
            let options = af_testcluster::cluster::Options {
                uplinks: outside.hosts().map(|h| h.network.clone()).collect(),
                dns_records: BTreeMap::from([
                    (ORIGIN_NAME.to_string(), parse(&outside.origin.ip)?),
                    (REBIND_NAME.to_string(), parse(&outside.operator.ip)?),
                ]),
                // The roster's environments stand side by side (the shared ones through the
                // whole run): the node says it has room for all of them. It limits each
                // container as asked; their sum is the machine's to carry.
                cpu_millis: 64_000,
                memory_bytes: 64 << 30,
                ..Default::default()
            };
            let cluster =
                tokio::task::spawn_blocking(move || af_testcluster::TestCluster::start(options))
                    .await
                    .map_err(text)??;
            let client = cluster.client().await?;
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&cluster.kubeconfig).map_err(text)?;
            let runtime = KubeRuntime::connect_with(
                kubeconfig,
                None,
                NAMESPACE_PREFIX.to_string(),
                image.clone(),
                outside.probe_targets(),
            )
            .await
            .map_err(text)?
            .with_allowed_version(CONTROL_PLANE_VERSION)
            .with_readiness_timeout(READINESS_TIMEOUT)
            .with_image_work(std::sync::Arc::new(DockerImageWork::new(docker.clone())));
            let scratch =
                std::env::temp_dir().join(format!("af-conformance-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&scratch).map_err(text)?;
            Ok::<_, String>((cluster, client, runtime, scratch))
        };
        match started.await {
            Ok((cluster, client, runtime, scratch)) => Ok(KubeHarness {
                docker,
                client,
                runtime,
                image,
                outside,
                nodes: Vec::new(),
                control_plane: std::sync::Mutex::new(Some(cluster)),
                own_namespace: format!("afc-harness-{tag}"),
                scratch,
            }),
            Err(err) => Err((outside, err)),
        }
    }

    async fn connect(
        docker: Docker,
        image: String,
        outside: Outside,
        tag: &str,
    ) -> Result<KubeHarness, (Outside, String)> {
        let runtime = match KubeRuntime::connect(
            None,
            NAMESPACE_PREFIX.to_string(),
            image.clone(),
            outside.probe_targets(),
        )
        .await
        {
            Ok(runtime) => runtime,
            Err(err) => return Err((outside, err.to_string())),
        };
        if !matches!(runtime.loader(), Loader::K3d(_)) {
            return Err((
                outside,
                "the Kubernetes harness needs the current context to be a k3d cluster's (scripts/k8s-conformance makes one)".to_string(),
            ));
        }
        let runtime = match std::env::var("AF_INGRESS_ADDRESS")
            .ok()
            .and_then(|a| a.parse().ok())
        {
            Some(address) => runtime.with_ingress_address(address),
            None => runtime,
        };
        let runtime = runtime
            .with_readiness_timeout(READINESS_TIMEOUT)
            .with_image_work(std::sync::Arc::new(DockerImageWork::new(docker.clone())));
        let config = match kube::Config::infer().await {
            Ok(config) => config,
            Err(err) => return Err((outside, err.to_string())),
        };
        let client = match af_kube::client_of(config) {
            Ok(client) => client,
            Err(err) => return Err((outside, err.to_string())),
        };
        let scratch =
            std::env::temp_dir().join(format!("af-conformance-{tag}-{}", std::process::id()));
        if let Err(err) = std::fs::create_dir_all(&scratch) {
            return Err((outside, err.to_string()));
        }
        Ok(KubeHarness {
            docker,
            client,
            runtime,
            image,
            outside,
            nodes: Vec::new(),
            control_plane: std::sync::Mutex::new(None),
            own_namespace: format!("afc-harness-{tag}"),
            scratch,
        })
    }

    fn cluster_name(&self) -> String {
        match self.runtime.loader() {
            Loader::K3d(name) => name.clone(),
            _ => String::new(),
        }
    }

    /// Nodes on the outside networks, the fixtures' names in the resolver, the engine image on
    /// the nodes, the harness's namespace.
    async fn prepare_cluster(&mut self) -> Result<(), String> {
        let cluster = self.cluster_name();
        let options = bollard::query_parameters::ListContainersOptions {
            all: false,
            filters: Some(std::collections::HashMap::from([(
                "label".to_string(),
                vec![format!("k3d.cluster={cluster}")],
            )])),
            ..Default::default()
        };
        let nodes: Vec<String> = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(text)?
            .into_iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .and_then(|l| l.get("k3d.role"))
                    .is_some_and(|r| r == "server" || r == "agent")
            })
            .filter_map(|c| {
                c.names
                    .and_then(|n| n.first().map(|n| n.trim_start_matches('/').to_string()))
            })
            .collect();
        if nodes.is_empty() {
            return Err(format!("no node containers of k3d cluster {cluster}"));
        }
        for node in &nodes {
            for host in self.outside.hosts() {
                host.attach(&self.docker, node, &[]).await.map_err(text)?;
            }
            self.nodes.push(node.clone());
        }
        self.give_resolver_names().await?;
        if let Some(command) = load_command(self.runtime.loader(), &self.image) {
            DockerImageWork::new(self.docker.clone())
                .load(&command)
                .await
                .map_err(text)?;
        }
        self.own_namespace_and_reach().await
    }

    /// The harness's namespace, and the proof that the cluster routes to the outside.
    async fn own_namespace_and_reach(&self) -> Result<(), String> {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(self.own_namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(text)?;
        self.check_cluster_reaches_outside().await
    }

    /// A pod with no policy over it must reach the public host: otherwise the nodes have no route
    /// to the outside and every containment behaviour would pass for the wrong reason.
    async fn check_cluster_reaches_outside(&self) -> Result<(), String> {
        let route = format!("cluster-route=tcp:{}:3128", self.outside.addresses.public);
        let spec = PodSpec {
            automount_service_account_token: Some(false),
            ..Default::default()
        };
        let outcomes = self
            .probe_pod(
                &self.own_namespace,
                spec,
                Default::default(),
                std::slice::from_ref(&route),
            )
            .await?;
        match outcomes.first() {
            Some(outcome) if outcome.outcome == "escaped" => Ok(()),
            other => Err(format!(
                "a pod with no policy cannot reach the outside host {} ({other:?}): the nodes have no route to the outside, so containment would be judged on nothing",
                self.outside.addresses.public
            )),
        }
    }

    /// The origin's and the rebinding name's addresses, in a server block of `coredns-custom`;
    /// CoreDNS reads its imports when it starts, so its pods are replaced and waited for.
    async fn give_resolver_names(&self) -> Result<(), String> {
        let block = format!(
            "conformance.test:53 {{\n    hosts {{\n        {} {ORIGIN_NAME}\n        {} {REBIND_NAME}\n    }}\n}}\n",
            self.outside.origin.ip, self.outside.operator.ip
        );
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-system");
        let patch = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns-custom", "namespace": "kube-system"},
            "data": {RESOLVER_KEY: block},
        });
        configmaps
            .patch(
                "coredns-custom",
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(text)?;
        self.restart_resolver().await
    }

    async fn restart_resolver(&self) -> Result<(), String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "kube-system");
        let selector = ListParams::default().labels("k8s-app=kube-dns");
        pods.delete_collection(&DeleteParams::default(), &selector)
            .await
            .map_err(text)?;
        for _ in 0..120 {
            let ready = pods
                .list(&selector)
                .await
                .map_err(text)?
                .items
                .iter()
                .any(|pod| {
                    pod.metadata.deletion_timestamp.is_none()
                        && pod
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                });
            if ready {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Err("the cluster's resolver did not come back within 120 s".to_string())
    }

    /// `routes` tried by a pod in `namespace` built on `spec` ([`probe_pod`]), labelled `labels`.
    async fn probe_pod(
        &self,
        namespace: &str,
        spec: PodSpec,
        labels: BTreeMap<String, String>,
        routes: &[String],
    ) -> Result<Vec<RouteOutcome>, String> {
        let args = probe_args(&self.outside.addresses, routes);
        let pod = probe_pod(namespace, spec, labels, &self.image, args);
        let (_, output) = run_to_output(self.client.clone(), namespace, &pod, POD_PATIENCE)
            .await
            .map_err(text)?;
        asked_outcomes(&output, routes)
    }

    fn runs_on_control_plane(&self) -> bool {
        self.control_plane
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// What [`KubeHarness::start`] changed in a k3d cluster, undone: the resolver's block, the
    /// nodes' attachments to the outside.
    async fn undo_k3d(&self) {
        // Our key out of the resolver's configuration: applied with no data, our manager owns none.
        let empty = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns-custom", "namespace": "kube-system"},
        });
        let _ = Api::<ConfigMap>::namespaced(self.client.clone(), "kube-system")
            .patch(
                "coredns-custom",
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&empty),
            )
            .await;
        for node in &self.nodes {
            for host in self.outside.hosts() {
                let _ = self
                    .docker
                    .disconnect_network(
                        &host.network,
                        bollard::models::NetworkDisconnectRequest {
                            container: node.clone(),
                            force: Some(true),
                        },
                    )
                    .await;
            }
        }
    }

    fn env_namespace(id: &EnvironmentId) -> String {
        namespace_name(NAMESPACE_PREFIX, id)
    }

    async fn pods_of(&self, id: &EnvironmentId, selector: &str) -> Result<Vec<Pod>, String> {
        Api::<Pod>::namespaced(self.client.clone(), &KubeHarness::env_namespace(id))
            .list(&ListParams::default().labels(selector))
            .await
            .map(|l| l.items)
            .map_err(text)
    }
}

/// The daemon, the engine image (built there when missing) and the outside made with it.
async fn outside(tag: &str) -> Result<(Docker, String, Outside), String> {
    let docker = af_docker::connect().await.map_err(text)?;
    let image = af_docker::engine_image::ensure(&docker)
        .await
        .map_err(text)?;
    let outside = Outside::create(&docker, &image, tag).await?;
    Ok((docker, image, outside))
}

/// A pod on `spec` (a service's template, or nothing) whose one container is the engine's probe
/// with `args`: of its init containers only the netlock step, which is the service's rules as
/// much as its policies are (a service's gate is left out: it waits for a sidecar that may be
/// stopped), never restarted, the first container's security context kept.
pub fn probe_pod(
    namespace: &str,
    spec: PodSpec,
    labels: BTreeMap<String, String>,
    image: &str,
    args: Vec<String>,
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("af-conformance-probe".to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: spec
                .init_containers
                .clone()
                .map(|init| {
                    init.into_iter()
                        .filter(|c| c.name == af_kube::render::names::NETLOCK)
                        .collect::<Vec<_>>()
                })
                .filter(|kept| !kept.is_empty()),
            restart_policy: Some("Never".to_string()),
            containers: vec![Container {
                name: "af-probe".to_string(),
                image: Some(image.to_string()),
                image_pull_policy: Some("IfNotPresent".to_string()),
                args: Some(args),
                security_context: spec
                    .containers
                    .first()
                    .and_then(|c| c.security_context.clone()),
                ..Default::default()
            }],
            ..spec
        }),
        ..Default::default()
    }
}

/// The labels of a pod under exactly a service's policies: the environment's, the workload mark
/// the policies select on, and a role no controller selects (a ReplicaSet would adopt a pod
/// with its service's labels, and delete it as one too many).
pub fn service_rules_labels(id: &EnvironmentId) -> BTreeMap<String, String> {
    let mut labels = ownership(id);
    labels.insert(WORKLOAD_LABEL.to_string(), "true".to_string());
    labels.insert(ROLE_LABEL.to_string(), "conformance-probe".to_string());
    labels
}

#[async_trait]
impl Harness for KubeHarness {
    fn runtime(&self) -> &dyn Runtime {
        &self.runtime
    }

    fn engine_image(&self) -> &str {
        &self.image
    }

    fn outside_hosts(&self) -> &Outside {
        &self.outside
    }

    fn scratch_dir(&self) -> &Path {
        &self.scratch
    }

    async fn try_in_service(
        &self,
        id: &EnvironmentId,
        service: &str,
        routes: &[String],
    ) -> Result<Vec<RouteOutcome>, String> {
        // The service's own pod rules (its template: resolver, security, labels the policies
        // select on), without its gate — the sidecar it waits for is stopped — and with a role no
        // controller selects, so no ReplicaSet adopts the pod.
        // A service's Deployment is named after it (its labels are the environment's: the
        // service's name is on its pods).
        let namespace = KubeHarness::env_namespace(id);
        let template = Api::<Deployment>::namespaced(self.client.clone(), &namespace)
            .get_opt(service)
            .await
            .map_err(text)?
            .and_then(|d| d.spec.map(|s| s.template))
            .ok_or_else(|| format!("no Deployment of service {service} in {namespace}"))?;
        let spec = template.spec.unwrap_or_default();
        self.probe_pod(&namespace, spec, service_rules_labels(id), routes)
            .await
    }

    fn adapt(&self, manifest: &mut af_manifest::Manifest) {
        // The project's node enforces no NetworkPolicy (seed 000's decorative-policy cluster):
        // every pod is locked by netlock, which is what this run proves holds.
        if self.runs_on_control_plane() {
            manifest.runtime.netlock = true;
        }
    }

    async fn after_up(&self, _id: &EnvironmentId) -> Result<(), String> {
        // The sidecar reaches the outside through its node, attached at the start.
        Ok(())
    }

    async fn plant_foreign(&self, id: &EnvironmentId) -> Result<(), String> {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(KubeHarness::env_namespace(id)),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .map(drop)
            .map_err(text)
    }

    async fn foreign_present(&self, id: &EnvironmentId) -> Result<bool, String> {
        let found = Api::<Namespace>::all(self.client.clone())
            .get_opt(&KubeHarness::env_namespace(id))
            .await
            .map_err(text)?;
        Ok(found.is_some_and(|ns| {
            let labels = ns.metadata.labels.unwrap_or_default();
            !ownership(id).iter().all(|(k, v)| labels.get(k) == Some(v))
        }))
    }

    async fn remove_foreign(&self, id: &EnvironmentId) -> Result<(), String> {
        Api::<Namespace>::all(self.client.clone())
            .delete(&KubeHarness::env_namespace(id), &DeleteParams::default())
            .await
            .map(drop)
            .map_err(text)
    }

    async fn leftovers(&self, id: &EnvironmentId) -> Result<Vec<String>, String> {
        let selector: Vec<String> = ownership(id)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        Ok(Api::<Namespace>::all(self.client.clone())
            .list(&ListParams::default().labels(&selector.join(",")))
            .await
            .map_err(text)?
            .items
            .into_iter()
            .filter_map(|ns| ns.metadata.name.map(|n| format!("namespace/{n}")))
            .collect())
    }

    async fn stop_sidecar(&self, id: &EnvironmentId) -> Result<(), String> {
        // Gone, as after a crash with nothing to restart it.
        Api::<Deployment>::namespaced(self.client.clone(), &KubeHarness::env_namespace(id))
            .patch(
                SIDECAR,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
            )
            .await
            .map_err(text)?;
        for _ in 0..120 {
            if self
                .pods_of(id, &format!("{ROLE_LABEL}=sidecar"))
                .await?
                .is_empty()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Err("the sidecar's pod was still there 120 s after scaling it to none".to_string())
    }

    async fn service_address(&self, id: &EnvironmentId, service: &str) -> Result<String, String> {
        self.pods_of(id, &format!("{SERVICE_LABEL}={service}"))
            .await?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .find_map(|p| p.status.and_then(|s| s.pod_ip))
            .ok_or_else(|| format!("no pod of service {service} has an address"))
    }

    async fn control_api(&self, id: &EnvironmentId) -> Result<(String, bool), String> {
        // A workload would aim at the sidecar pod's address; the API listens on its loopback, and
        // answers the operator through a port-forward (the runtime's own way to it).
        let sidecar_ip = self
            .pods_of(id, &format!("{ROLE_LABEL}=sidecar"))
            .await?
            .into_iter()
            .find_map(|p| p.status.and_then(|s| s.pod_ip))
            .ok_or("the sidecar pod has no address")?;
        let answers = self
            .runtime
            .net_log(id, &af_runtime::DecisionQuery::default())
            .await
            .is_ok();
        Ok((format!("{sidecar_ip}:{}", ports::CONTROL), answers))
    }

    async fn platform_api(&self, _id: &EnvironmentId) -> Result<(String, bool), String> {
        let service = Api::<Service>::namespaced(self.client.clone(), "default")
            .get("kubernetes")
            .await
            .map_err(text)?;
        let ip = service
            .spec
            .and_then(|s| s.cluster_ip)
            .ok_or("the kubernetes Service has no ClusterIP")?;
        let answers = self.client.apiserver_version().await.is_ok();
        Ok((format!("{ip}:443"), answers))
    }

    async fn close(&self) {
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.own_namespace, &DeleteParams::default())
            .await;
        let control_plane = self
            .control_plane
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match control_plane {
            // Stopped before the outside is removed: its pods are attached to the outside's
            // networks. Stopping it waits on its node's thread and its script.
            Some(cluster) => {
                let _ = tokio::task::spawn_blocking(move || drop(cluster)).await;
            }
            None => self.undo_k3d().await,
        }
        self.outside.remove().await;
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodDNSConfig, SecurityContext};

    #[test]
    fn a_probe_pod_keeps_the_service_rules_and_its_lock_and_drops_the_gate() {
        let template = PodSpec {
            dns_policy: Some("None".into()),
            dns_config: Some(PodDNSConfig {
                nameservers: Some(vec!["10.43.7.7".into()]),
                ..Default::default()
            }),
            automount_service_account_token: Some(false),
            init_containers: Some(vec![
                Container {
                    name: af_kube::render::names::NETLOCK.into(),
                    ..Default::default()
                },
                Container {
                    name: "af-gate".into(),
                    ..Default::default()
                },
            ]),
            containers: vec![Container {
                name: "app".into(),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            restart_policy: Some("Always".into()),
            ..Default::default()
        };
        let id = EnvironmentId::derive("afc", "x");
        let pod = probe_pod(
            "ns",
            template,
            service_rules_labels(&id),
            "img",
            vec!["probe".into()],
        );
        let spec = pod.spec.unwrap();
        let init: Vec<String> = spec
            .init_containers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(init, [af_kube::render::names::NETLOCK], "its lock, no gate");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.dns_policy.as_deref(), Some("None"));
        assert_eq!(
            spec.dns_config.unwrap().nameservers.unwrap(),
            ["10.43.7.7"],
            "the service's resolver"
        );
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.containers.len(), 1);
        let probe = &spec.containers[0];
        assert_eq!(probe.image.as_deref(), Some("img"));
        assert_eq!(
            probe
                .security_context
                .as_ref()
                .and_then(|c| c.allow_privilege_escalation),
            Some(false)
        );
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels.get(WORKLOAD_LABEL).map(String::as_str), Some("true"));
        assert_eq!(
            labels.get(ROLE_LABEL).map(String::as_str),
            Some("conformance-probe"),
            "no controller's selector"
        );
        assert!(ownership(&id).iter().all(|(k, v)| labels.get(k) == Some(v)));
    }
}
