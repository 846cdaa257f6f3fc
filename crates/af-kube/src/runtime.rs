//! The Kubernetes runtime: `up`, `down` and `status` of an environment on a cluster, in the
//! order the guarantee needs (seed 000, with the sidecar before the probe, issue 27): version
//! check → fit check → namespace → policies → every Service, the sidecar's first (its ClusterIP is
//! every pod's resolver; with netlock the Services' addresses are all a pod may send to) →
//! sidecar → containment probe (whose positive control is the sidecar) → the start waves of
//! `depends_on`, each its migrations, its Deployments, their readiness (as the local runtime
//! starts them) → ingresses. Everything is rendered by [`crate::render`] and applied server-side
//! with one field manager, so a second `up` sends the same objects and changes nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;

use af_manifest::{DatabaseProvider, EnvironmentId, ImageSource, Manifest};
use af_runtime::{
    Capabilities, Capability, ContainmentSummary, Environment, EnvironmentStatus, LogLine,
    LogStream, ProgressEvent, ProgressSink, Runtime, RuntimeError, RuntimeErrorKind, ServiceStatus,
    Step, UpReport,
};
use af_sidecar_api::SidecarConfig;
use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Api;
use kube::api::{ListParams, LogParams, Patch, PatchParams};

use crate::apply::Patience;
use crate::apply::{
    FIELD_MANAGER, fit, job, namespace, objects, probe, prune, published, readiness,
};
use crate::images::{Loader, load_command, loader_for, on_every_node};
use crate::render::names::{ROLE_LABEL, SERVICE_LABEL, SIDECAR, namespace as namespace_name};
use crate::render::{
    CaptureInput, Cluster, Object, RenderError, RenderInput, Rendered, render,
    stand_in_service_ips, with_bundle,
};

/// Where the last containment verdict is kept, for `af status`: on the namespace, which a
/// workload cannot write (no pod has a service account token).
pub const VERDICT_ANNOTATION: &str = "dev.antifailure.containment";

/// The address rendering uses before the sidecar's Service has its ClusterIP (for the fit check,
/// which reads only sizes).
const STAND_IN: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 53));

/// What a cluster cannot do itself: build images from `build:` contexts, and copy images into its
/// nodes. The CLI supplies one that uses the local Docker daemon and the k3d or kind command.
#[async_trait]
pub trait ImageWork: Send + Sync {
    /// Builds `service`'s context (relative to `manifest_dir`); the local image's reference.
    async fn build(
        &self,
        manifest_name: &str,
        service: &str,
        manifest_dir: &std::path::Path,
        context: &std::path::Path,
        dockerfile: &std::path::Path,
    ) -> Result<String, RuntimeError>;
    /// Runs a copy command ([`crate::images::load_command`]).
    async fn load(&self, command: &[String]) -> Result<(), RuntimeError>;
    /// The id of the daemon images are built on, if it can be asked.
    async fn daemon_id(&self) -> Option<String>;
    /// The engine image, built on that daemon if it is not there yet.
    async fn ensure_engine_image(&self) -> Result<(), RuntimeError>;
}

pub struct KubeRuntime {
    client: kube::Client,
    /// How images reach this cluster's nodes, told by the context's name.
    loader: Loader,
    image_work: Option<std::sync::Arc<dyn ImageWork>>,
    /// Where the ingress controller is reached (k3d's loopback port, say); by default each preview
    /// host's own address.
    ingress_address: Option<std::net::SocketAddr>,
    /// Which context and cluster this changes, said before `up` changes anything.
    target: String,
    namespace_prefix: String,
    engine_image: String,
    probe_targets: Vec<String>,
    /// What rendering needs of the cluster; `None`: read off it at each `up`
    /// ([`crate::apply::cluster::discover`]), the only command that renders.
    cluster: Option<Cluster>,
    /// The one Kubernetes version older than the floor that `up` may use, with a warning
    /// ([`crate::apply::version::ALLOW_VARIABLE`]).
    allowed_version: Option<String>,
    /// How long `up` waits for a workload to become ready ([`readiness::PATIENCE`]).
    readiness: Patience,
    capabilities: Capabilities,
}

impl std::fmt::Debug for KubeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRuntime")
            .field("target", &self.target)
            .field("namespace_prefix", &self.namespace_prefix)
            .finish()
    }
}

impl KubeRuntime {
    /// A runtime over `client`. `target` names the context and cluster for the person.
    pub fn new(
        client: kube::Client,
        context: &str,
        target: String,
        namespace_prefix: String,
        engine_image: String,
        probe_targets: Vec<String>,
        cluster: Cluster,
    ) -> KubeRuntime {
        KubeRuntime {
            client,
            loader: loader_for(context),
            image_work: None,
            ingress_address: None,
            target,
            namespace_prefix,
            engine_image,
            probe_targets,
            cluster: Some(cluster),
            allowed_version: None,
            readiness: readiness::PATIENCE,
            capabilities: Capabilities::new(
                "kubernetes",
                [
                    Capability::Environments,
                    Capability::Migrations,
                    Capability::CronSchedules,
                    Capability::HealthPaths,
                    Capability::HealthMustSucceed,
                    Capability::PreviewUrls,
                    Capability::NetLog,
                    Capability::Inbox,
                    Capability::WebhookTrigger,
                    Capability::HttpsCapture,
                ],
            ),
        }
    }

    /// Connects through the kubeconfig (`KUBECONFIG`, or `~/.kube/config`): `context`, or the
    /// current one; the cluster's resolver and ingress controller are read off it at `up`
    /// ([`crate::apply::cluster::discover`]).
    pub async fn connect(
        context: Option<&str>,
        namespace_prefix: String,
        engine_image: String,
        probe_targets: Vec<String>,
    ) -> Result<KubeRuntime, RuntimeError> {
        let kubeconfig = kube::config::Kubeconfig::read()
            .map_err(|e| crate::error::unexpected("reading the kubeconfig", e))?;
        KubeRuntime::connect_with(
            kubeconfig,
            context,
            namespace_prefix,
            engine_image,
            probe_targets,
        )
        .await
    }

    /// [`KubeRuntime::connect`] through the given kubeconfig.
    pub async fn connect_with(
        kubeconfig: kube::config::Kubeconfig,
        context: Option<&str>,
        namespace_prefix: String,
        engine_image: String,
        probe_targets: Vec<String>,
    ) -> Result<KubeRuntime, RuntimeError> {
        let options = kube::config::KubeConfigOptions {
            context: context.map(str::to_string),
            ..Default::default()
        };
        let chosen = context
            .map(str::to_string)
            .or(kubeconfig.current_context.clone())
            .unwrap_or_default();
        let cluster_name = kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == chosen)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone())
            .unwrap_or_default();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| {
                crate::error::unexpected(format!("using kubeconfig context {chosen:?}"), e)
            })?;
        let target = format!(
            "context {chosen} (cluster {cluster_name}, {})",
            config.cluster_url
        );
        let client = crate::client_of(config)
            .map_err(|e| crate::error::api("connecting to the cluster", e))?;
        let mut runtime = KubeRuntime::new(
            client,
            &chosen,
            target,
            namespace_prefix,
            engine_image,
            probe_targets,
            Cluster::default(),
        );
        runtime.cluster = None;
        runtime.allowed_version = std::env::var(crate::apply::version::ALLOW_VARIABLE)
            .ok()
            .filter(|v| !v.is_empty());
        Ok(runtime)
    }

    /// Waits at most `timeout` for a workload to become ready (AF-RUN-063 after it).
    pub fn with_readiness_timeout(mut self, timeout: std::time::Duration) -> KubeRuntime {
        self.readiness.timeout = timeout;
        self
    }

    /// Lets `up` go on with Kubernetes `version` (`1.20`), older than the floor, warning each time.
    pub fn with_allowed_version(mut self, version: &str) -> KubeRuntime {
        self.allowed_version = Some(version.to_string());
        self
    }

    /// Builds and copies images with `work` (the local daemon, k3d or kind).
    pub fn with_image_work(mut self, work: std::sync::Arc<dyn ImageWork>) -> KubeRuntime {
        self.image_work = Some(work);
        self
    }

    /// Asks preview URLs through `address` (the ingress controller) instead of their hosts'.
    pub fn with_ingress_address(mut self, address: std::net::SocketAddr) -> KubeRuntime {
        self.ingress_address = Some(address);
        self
    }

    /// How images reach this cluster's nodes.
    pub fn loader(&self) -> &Loader {
        &self.loader
    }

    /// How images reach the nodes for this `up`: by the context's name (k3d, kind), or — when the
    /// nodes all say they run on the daemon af builds with — nothing to copy.
    async fn loader_now(&self) -> Loader {
        if self.loader != Loader::Registry {
            return self.loader.clone();
        }
        let Some(work) = &self.image_work else {
            return Loader::Registry;
        };
        let Some(daemon) = work.daemon_id().await else {
            return Loader::Registry;
        };
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        if crate::images::on_this_daemon(&nodes, &daemon) {
            Loader::SameDaemon
        } else {
            Loader::Registry
        }
    }

    /// Each service's image reference, building `build:` contexts where the nodes can be given
    /// what is built; a `build:` a cluster cannot be given is AF-RUN-044.
    async fn images(
        &self,
        environment: &Environment,
        loader: &Loader,
    ) -> Result<BTreeMap<String, String>, RuntimeError> {
        let mut images = BTreeMap::new();
        for service in environment.manifest.services.values() {
            let image = match (&service.source, &self.image_work, loader) {
                (ImageSource::Image(reference), _, _) => reference.clone(),
                (
                    ImageSource::Build {
                        context,
                        dockerfile,
                    },
                    Some(work),
                    Loader::K3d(_) | Loader::Kind(_) | Loader::SameDaemon,
                ) => {
                    work.build(
                        &environment.manifest.name,
                        &service.name,
                        &environment.manifest_dir,
                        context,
                        dockerfile,
                    )
                    .await?
                }
                (ImageSource::Build { .. }, _, _) => {
                    return Err(self
                        .capabilities
                        .unsupported(Capability::ClusterImageBuilds));
                }
            };
            images.insert(service.name.clone(), image);
        }
        Ok(images)
    }

    /// Copies the images af built (and the engine image) into the nodes of a k3d or kind cluster,
    /// skipping what every node already has; `true` when anything was copied. Nodes of af's own
    /// daemon need the engine image built there, and no copy. Images a manifest names with
    /// `image:` are the nodes' to pull, as on any cluster.
    async fn load(
        &self,
        environment: &Environment,
        images: &BTreeMap<String, String>,
        loader: &Loader,
    ) -> Result<bool, RuntimeError> {
        let Some(work) = &self.image_work else {
            return Ok(false);
        };
        match loader {
            Loader::Registry => return Ok(false),
            Loader::SameDaemon => {
                work.ensure_engine_image().await?;
                return Ok(false);
            }
            Loader::K3d(_) | Loader::Kind(_) => work.ensure_engine_image().await?,
        }
        // Nodes that cannot be listed are copied to regardless.
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let mut wanted = vec![&self.engine_image];
        wanted.extend(
            environment
                .manifest
                .services
                .values()
                .filter(|s| matches!(s.source, ImageSource::Build { .. }))
                .filter_map(|s| images.get(&s.name)),
        );
        wanted.dedup();
        let mut copied = false;
        for image in wanted {
            if on_every_node(&nodes, image) {
                continue;
            }
            if let Some(command) = load_command(loader, image) {
                work.load(&command).await?;
                copied = true;
            }
        }
        Ok(copied)
    }

    fn namespace(&self, id: &EnvironmentId) -> String {
        namespace_name(&self.namespace_prefix, id)
    }

    /// What this runtime cannot do for `manifest`, refused before anything is created.
    fn refuse_unsupported(&self, manifest: &Manifest) -> Result<(), RuntimeError> {
        match manifest.database.as_ref().map(|d| &d.provider) {
            Some(DatabaseProvider::Container { .. }) => {
                return Err(self.capabilities.unsupported(Capability::ContainerDatabase));
            }
            Some(DatabaseProvider::External { .. }) => {
                return Err(self.capabilities.unsupported(Capability::ExternalDatabase));
            }
            None => {}
        }
        Ok(())
    }

    fn rendered(
        &self,
        cluster: &Cluster,
        environment: &Environment,
        images: &BTreeMap<String, String>,
        (sidecar_ip, service_ips): (IpAddr, &BTreeMap<String, IpAddr>),
        (token, capture): (&str, Option<CaptureInput<'_>>),
    ) -> Result<Rendered, RuntimeError> {
        let commands = BTreeMap::new();
        // Into the namespace this runtime manages (its prefix), which `status` and `down` read
        // without a manifest: a caller whose manifest says another prefix (the conformance
        // harness's fixtures say none) must not split an environment across two namespaces.
        let mut manifest = environment.manifest.clone();
        manifest.runtime.namespace_prefix = self.namespace_prefix.clone();
        render(&RenderInput {
            manifest: &manifest,
            env: &environment.id,
            sidecar_ip,
            service_ips,
            engine_image: &self.engine_image,
            images,
            image_commands: &commands,
            probe_targets: &self.probe_targets,
            control_token: token,
            cluster,
            capture,
        })
        .map_err(|e| render_failure(&self.capabilities, e))
    }

    /// Applies a Service: the ClusterIP the cluster gave it, and whether it was written.
    async fn apply_service(&self, service: &Service) -> Result<(IpAddr, bool), RuntimeError> {
        let (applied, wrote) =
            objects::apply(self.client.clone(), &Object::Service(service.clone())).await?;
        let ip = match &applied {
            Object::Service(s) => s.spec.as_ref().and_then(|spec| spec.cluster_ip.clone()),
            _ => None,
        }
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| {
            crate::error::unexpected(
                format!(
                    "reading the ClusterIP of {}/{}",
                    service.metadata.namespace.as_deref().unwrap_or_default(),
                    service.metadata.name.as_deref().unwrap_or_default()
                ),
                "the cluster assigned none",
            )
        })?;
        Ok((ip, wrote))
    }

    /// Applies `objects` in order; `true` when any was written.
    async fn apply_all(
        &self,
        objects: impl IntoIterator<Item = Object>,
    ) -> Result<bool, RuntimeError> {
        let mut wrote = false;
        for object in objects {
            wrote |= objects::apply(self.client.clone(), &object).await?.1;
        }
        Ok(wrote)
    }

    /// The sidecar's current configuration, if there is one. A cluster that cannot be asked is an
    /// error, never "none": `up` would make a new token and capture CA, replacing the sidecar and
    /// breaking every service's trust in the CA it was given.
    async fn current_config(&self, namespace: &str) -> Result<Option<String>, RuntimeError> {
        let secret = Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get_opt(crate::render::names::SIDECAR_CONFIG)
            .await
            .map_err(|e| {
                crate::error::api(
                    format!(
                        "reading {namespace}/{}",
                        crate::render::names::SIDECAR_CONFIG
                    ),
                    e,
                )
            })?;
        Ok(secret
            .and_then(|s| s.data)
            .and_then(|mut data| data.remove(crate::render::CONFIG_KEY))
            .and_then(|config| String::from_utf8(config.0).ok()))
    }

    /// One request to the sidecar's control API, through a port-forward to its pod (the API
    /// listens on the pod's loopback only: no other pod can reach it).
    async fn control(
        &self,
        id: &EnvironmentId,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<String, RuntimeError> {
        let namespace = self.namespace(id);
        let operation = format!("{method} {path} on the sidecar's control API in {namespace}");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let sidecar = pods
            .list(&ListParams::default().labels(&format!("{ROLE_LABEL}=sidecar")))
            .await
            .map_err(|e| crate::error::api(operation.clone(), e))?
            .items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .and_then(|p| p.metadata.name)
            .ok_or_else(|| {
                crate::error::unexpected(
                    operation.clone(),
                    "no running sidecar pod (is the environment up?)",
                )
            })?;
        // A configuration that cannot be read says why; one without a token says so.
        let text = self.current_config(&namespace).await?.ok_or_else(|| {
            crate::error::unexpected(
                operation.clone(),
                "the sidecar has no configuration Secret (is the environment up?)",
            )
        })?;
        let config = SidecarConfig::from_text(&text)
            .map_err(|e| crate::error::unexpected(operation.clone(), e))?;
        let token = config.inline_token().map(str::to_string).ok_or_else(|| {
            crate::error::unexpected(
                operation.clone(),
                "the sidecar's configuration has no token",
            )
        })?;
        let mut forward = pods
            .portforward(&sidecar, &[crate::render::ports::CONTROL])
            .await
            .map_err(|e| crate::error::api(operation.clone(), e))?;
        let stream = forward
            .take_stream(crate::render::ports::CONTROL)
            .ok_or_else(|| {
                crate::error::unexpected(operation.clone(), "the port-forward gave no stream")
            })?;
        let answer =
            af_sidecar_api::control_client::request(stream, &token, method, path, body).await;
        forward.abort();
        answer
            .map(|(_, body)| body)
            .map_err(|e| crate::error::unexpected(operation, e))
    }

    /// Keeps `verdict` on the namespace for `af status`.
    async fn record_verdict(
        &self,
        namespace: &Namespace,
        verdict: &ContainmentSummary,
    ) -> Result<(), RuntimeError> {
        let mut annotated = namespace.clone();
        annotated.metadata.annotations = Some(BTreeMap::from([(
            VERDICT_ANNOTATION.to_string(),
            serde_json::to_string(verdict).map_err(|e| RuntimeErrorKind::Internal {
                operation: "recording the probe's verdict".into(),
                detail: e.to_string(),
            })?,
        )]));
        let name = annotated.metadata.name.clone().unwrap_or_default();
        Api::<Namespace>::all(self.client.clone())
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&annotated),
            )
            .await
            .map(drop)
            .map_err(|e| {
                crate::error::api(
                    format!("recording the containment verdict on namespace {name}"),
                    e,
                )
            })
    }

    /// The values of af's environment the services read (`from_env`), into their Secret.
    fn with_values(secret: &Secret) -> Result<Secret, RuntimeError> {
        let keys = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::render::FILLED_FROM_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        let mut values = BTreeMap::new();
        for key in keys.split(',').filter(|k| !k.is_empty()) {
            // Checked before anything was created; unset since then.
            let value =
                std::env::var(key).map_err(|_| af_runtime::RuntimeErrorKind::EnvValueMissing {
                    missing: vec![format!("{key}, which a service takes")],
                })?;
            values.insert(key.to_string(), value);
        }
        let mut filled = secret.clone();
        filled.string_data = Some(values);
        Ok(filled)
    }
}

/// What a rendering failure is to the person: a cron service without a command is what this
/// runtime cannot do (AF-RUN-044, saying to write one); the rest are af's own fault (AF-RUN-064),
/// never the platform's.
fn render_failure(capabilities: &Capabilities, e: RenderError) -> RuntimeError {
    match e {
        RenderError::CronCommandUnknown(_) => {
            capabilities.unsupported(Capability::CronWithoutCommand)
        }
        RenderError::NoImage(_) | RenderError::Unserializable(_) => RuntimeErrorKind::Internal {
            operation: "rendering the environment".into(),
            detail: e.to_string(),
        }
        .into(),
    }
}

/// The addresses the cluster gave the environment's Services.
struct Addresses {
    /// The sidecar Service's ClusterIP: every pod's resolver and proxy.
    sidecar: IpAddr,
    /// Each service's ClusterIP, by name.
    services: BTreeMap<String, IpAddr>,
}

/// The sidecar's secrets for this `up`: kept from its current configuration, or new.
struct SidecarSecrets {
    token: String,
    capture_ca: Option<af_runtime::capture_trust::CaptureCaPem>,
    /// The machine's trust store, read only when there is a CA to bundle it with.
    system_store: Option<String>,
}

/// The phases of `up`, in order.
impl KubeRuntime {
    /// Which cluster, before the first question to it (an error that follows names it), and that
    /// its API server is one af supports; what it is, as far as rendering needs to know.
    async fn which_cluster(&self, progress: &dyn ProgressSink) -> Result<Cluster, RuntimeError> {
        progress.emit(ProgressEvent::Notice {
            message: format!("af up is about to change {}", self.target),
        });
        if let Some(warning) =
            crate::apply::version::check(&self.client, self.allowed_version.as_deref()).await?
        {
            progress.emit(ProgressEvent::Notice { message: warning });
        }
        Ok(match &self.cluster {
            Some(cluster) => cluster.clone(),
            None => {
                let (cluster, notes) = crate::apply::cluster::discover(self.client.clone()).await;
                for message in notes {
                    progress.emit(ProgressEvent::Notice { message });
                }
                cluster
            }
        })
    }

    /// The fit check, before anything exists: sizes do not depend on the Services' addresses, so
    /// the environment is rendered with stand-ins for them. The rendering, for what follows.
    async fn fit(
        &self,
        cluster: &Cluster,
        environment: &Environment,
        images: &BTreeMap<String, String>,
        progress: &dyn ProgressSink,
    ) -> Result<Rendered, RuntimeError> {
        let stand_ins = stand_in_service_ips(&environment.manifest);
        let sized = self.rendered(
            cluster,
            environment,
            images,
            (STAND_IN, &stand_ins),
            ("", None),
        )?;
        af_runtime::run_step(
            progress,
            Step::FitCheck,
            "the environment's sizes against the free room",
            fit::check(
                self.client.clone(),
                &crate::fit::instances(&sized),
                &self.namespace(&environment.id),
                progress,
            ),
        )
        .await?;
        Ok(sized)
    }

    /// The images copied into a k3d or kind cluster's nodes before anything needs them, the
    /// namespace, and its policies (default deny, the sidecar the only way out), with those an
    /// earlier manifest needed removed before the probe judges the namespace. Whether anything
    /// was written.
    async fn namespace_and_policies(
        &self,
        environment: &Environment,
        (images, loader): (&BTreeMap<String, String>, &Loader),
        sized: &Rendered,
        progress: &dyn ProgressSink,
    ) -> Result<bool, RuntimeError> {
        let client = self.client.clone();
        let name = self.namespace(&environment.id);
        let copied = af_runtime::run_step(
            progress,
            Step::Images,
            "copying images into the nodes",
            self.load(environment, images, loader),
        )
        .await?;
        let made = af_runtime::run_step(progress, Step::Namespace, &name, {
            namespace::ensure(
                client.clone(),
                &sized.namespace,
                &environment.id,
                Patience::default(),
            )
        })
        .await?;
        let policed = af_runtime::run_step(
            progress,
            Step::Policies,
            "default deny, and the sidecar as the only way out",
            async {
                let policies: Vec<Object> = sized
                    .policies
                    .iter()
                    .cloned()
                    .map(Object::NetworkPolicy)
                    .collect();
                let wrote = self.apply_all(policies.clone()).await?;
                // A policy an earlier manifest needed (the ingress controller's, say) would let
                // more in than this one allows: it goes before the probe judges the namespace.
                let removed = prune::remove_stale(
                    client.clone(),
                    &name,
                    &environment.id,
                    &[prune::Kind::NetworkPolicy],
                    &prune::desired(&policies),
                )
                .await?;
                Ok::<_, RuntimeError>(wrote | removed)
            },
        )
        .await?;
        Ok(copied | made | policed)
    }

    /// The Services, the sidecar's and then every service's: the sidecar's ClusterIP is every
    /// pod's resolver and proxy, and with netlock their addresses are the only ones a pod may send
    /// to. A Service runs nothing, and a name resolves before anything calls it.
    async fn service_addresses(&self, sized: &Rendered) -> Result<(Addresses, bool), RuntimeError> {
        let (sidecar, mut changed) = self.apply_service(&sized.sidecar_service).await?;
        let mut services = BTreeMap::new();
        for service in &sized.services {
            let (ip, wrote) = self.apply_service(service).await?;
            changed |= wrote;
            services.insert(service.metadata.name.clone().unwrap_or_default(), ip);
        }
        Ok((Addresses { sidecar, services }, changed))
    }

    /// The token and the capture CA the sidecar already has are kept: a new token would replace
    /// the sidecar every up, a new CA every service (they trust the one they were given). A
    /// configuration af wrote that no longer reads is one the sidecar cannot serve either: it is
    /// replaced whole. An API error reading it stops `up` (`current_config`).
    async fn sidecar_secrets(
        &self,
        namespace: &str,
        environment: &Environment,
    ) -> Result<SidecarSecrets, RuntimeError> {
        let current = self
            .current_config(namespace)
            .await?
            .and_then(|text| SidecarConfig::from_text(&text).ok());
        let token = match current.as_ref().and_then(SidecarConfig::inline_token) {
            Some(token) => token.to_string(),
            None => af_sidecar_api::new_control_token()
                .map_err(|e| crate::error::unexpected("making the control token", e))?,
        };
        let capture_ca = if environment.manifest.egress.needs_capture_ca() {
            Some(
                match current.as_ref().and_then(SidecarConfig::inline_capture_ca) {
                    Some(ca) => ca,
                    None => af_sidecar_api::new_ca(environment.id.as_str()).map_err(|e| {
                        crate::error::unexpected("making the environment's capture CA", e)
                    })?,
                },
            )
        } else {
            None
        };
        let system_store = capture_ca
            .as_ref()
            .and_then(|_| af_runtime::capture_trust::system_bundle());
        Ok(SidecarSecrets {
            token,
            capture_ca,
            system_store,
        })
    }

    /// The sidecar's configuration and Deployment, waited ready. Whether anything was written.
    async fn sidecar(
        &self,
        namespace: &str,
        rendered: &Rendered,
        progress: &dyn ProgressSink,
    ) -> Result<bool, RuntimeError> {
        af_runtime::run_step(progress, Step::Sidecar, "the egress sidecar", async {
            let wrote = self
                .apply_all([
                    Object::Secret(rendered.sidecar_config.clone()),
                    Object::Deployment(rendered.sidecar.clone()),
                ])
                .await?;
            readiness::wait(
                self.client.clone(),
                namespace,
                &[SIDECAR.to_string()],
                self.readiness,
            )
            .await?;
            Ok::<_, RuntimeError>(wrote)
        })
        .await
    }

    /// The containment probe, after the sidecar: its positive control is that it reaches the
    /// sidecar (a namespace with no working network would deny every route), and the sidecar runs
    /// no workload code. Nothing else runs before the verdict, which is kept on the namespace.
    async fn contain(
        &self,
        namespace: &str,
        rendered: &Rendered,
        progress: &dyn ProgressSink,
    ) -> Result<(), RuntimeError> {
        let verdict = af_runtime::run_step(
            progress,
            Step::Probe,
            "every escape route, under a service's rules",
            probe::run(
                self.client.clone(),
                namespace,
                &rendered.probe,
                probe::PATIENCE,
            ),
        )
        .await?;
        if verdict.window_ms > 0 {
            progress.emit(ProgressEvent::Notice {
                message: format!(
                    "this cluster let a new pod out for {} ms after it started, before its policies held (the probe waited for them); every service's startup gate holds its workload back through that window",
                    verdict.window_ms
                ),
            });
        }
        self.record_verdict(&rendered.namespace, &verdict).await
    }

    /// What the services read besides the manifest: the values they take from af's environment,
    /// and the capture CA's trust bundle. Whether anything was written.
    async fn service_values(
        &self,
        rendered: &Rendered,
        system_store: Option<&str>,
    ) -> Result<bool, RuntimeError> {
        let mut changed = false;
        if let Some(secret) = &rendered.service_env {
            changed |= self
                .apply_all([Object::Secret(Self::with_values(secret)?)])
                .await?;
        }
        if let Some(trust) = &rendered.capture_trust {
            changed |= self
                .apply_all([Object::ConfigMap(with_bundle(trust, system_store))])
                .await?;
        }
        Ok(changed)
    }

    /// The services in the waves `depends_on` makes, as the local runtime starts them: a
    /// service's migration once the services it depends on are ready, then the service, ready
    /// before the next wave. Whether anything was written.
    async fn services(
        &self,
        namespace: &str,
        rendered: &Rendered,
        progress: &dyn ProgressSink,
    ) -> Result<bool, RuntimeError> {
        let client = self.client.clone();
        let mut changed = false;
        for wave in rendered.waves() {
            for migration in &wave.migrations {
                let detail = migration.metadata.name.clone().unwrap_or_default();
                changed |= af_runtime::run_step(progress, Step::Migrations, &detail, {
                    job::run(client.clone(), namespace, migration, job::PATIENCE)
                })
                .await?;
            }
            let deployments: Vec<Object> = wave
                .deployments
                .iter()
                .map(|d| Object::Deployment((*d).clone()))
                .collect();
            let names: Vec<String> = wave
                .deployments
                .iter()
                .filter_map(|d| d.metadata.name.clone())
                .collect();
            changed |= af_runtime::run_step(
                progress,
                Step::Services,
                &names.join(", "),
                self.apply_all(deployments),
            )
            .await?;
            af_runtime::run_step(
                progress,
                Step::Readiness,
                &format!("every replica of {}", names.join(", ")),
                readiness::wait(client.clone(), namespace, &names, self.readiness),
            )
            .await?;
        }
        Ok(changed)
    }

    /// The ingresses; what an earlier manifest had and this one does not, removed once the
    /// services it has are up (as the local runtime does); and, with a domain, each web service's
    /// URL waited until the ingress routes it. Whether anything was written or removed.
    async fn publish(
        &self,
        environment: &Environment,
        namespace: &str,
        rendered: &Rendered,
        progress: &dyn ProgressSink,
    ) -> Result<bool, RuntimeError> {
        let mut changed = self
            .apply_all(rendered.ingresses.iter().cloned().map(Object::Ingress))
            .await?;
        changed |= prune::remove_stale(
            self.client.clone(),
            namespace,
            &environment.id,
            &prune::AFTER_SERVICES,
            &prune::desired(&rendered.in_apply_order()),
        )
        .await?;
        if let Some(domain) = environment.manifest.runtime.domain.as_deref() {
            for service in environment
                .manifest
                .services
                .values()
                .filter(|s| s.web && s.port.is_some())
            {
                let host = format!("{}-{}.{domain}", environment.id, service.name);
                let path = service
                    .health_path
                    .clone()
                    .unwrap_or_else(|| "/".to_string());
                af_runtime::run_step(
                    progress,
                    Step::Readiness,
                    &format!("http://{host}{path} routed by the ingress"),
                    published::wait(&host, &path, self.ingress_address, published::PATIENCE),
                )
                .await?;
            }
        }
        Ok(changed)
    }
}

/// The environment's status from what the API server holds: per service Deployment (the sidecar's
/// is not a service), its ready replicas against its wanted ones, the limits of a running pod of
/// it (what the cluster runs, not what was sent), and the hosts its Ingress routes; the verdict
/// kept on the namespace.
fn assemble_status(
    id: &EnvironmentId,
    containment: Option<af_runtime::ContainmentSummary>,
    deployments: &[Deployment],
    pods: &[Pod],
    ingresses: &[Ingress],
) -> EnvironmentStatus {
    let services = deployments
        .iter()
        .filter(|d| d.metadata.name.as_deref() != Some(SIDECAR))
        .map(|deployment| {
            let service = deployment.metadata.name.clone().unwrap_or_default();
            // The applied size, read off a running pod of the service: what the cluster runs,
            // not what was sent.
            let applied = pods
                .iter()
                .find(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(SERVICE_LABEL))
                        == Some(&service)
                })
                .map(crate::fit::pod_limits);
            let urls = ingresses
                .iter()
                .filter(|i| i.metadata.name.as_deref() == Some(service.as_str()))
                .flat_map(|i| i.spec.clone().and_then(|s| s.rules).unwrap_or_default())
                .filter_map(|rule| rule.host.map(|host| format!("http://{host}")))
                .collect();
            ServiceStatus {
                name: service,
                ready: u32::try_from(
                    deployment
                        .status
                        .as_ref()
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0),
                )
                .unwrap_or(0),
                wanted: u32::try_from(
                    deployment
                        .spec
                        .as_ref()
                        .and_then(|s| s.replicas)
                        .unwrap_or(1),
                )
                .unwrap_or(0),
                applied_cpu_millis: applied
                    .and_then(|a| a.cpu_millis.map(|c| u64::try_from(c).unwrap_or(u64::MAX))),
                applied_memory_bytes: applied
                    .and_then(|a| a.memory_bytes.map(|m| u64::try_from(m).unwrap_or(u64::MAX))),
                urls,
            }
        })
        .collect();
    EnvironmentStatus {
        id: id.clone(),
        services,
        containment,
        // A container database is refused on Kubernetes (AF-RUN-044), an external one has no
        // branch.
        database: None,
        external_database: None,
    }
}

#[async_trait]
impl Runtime for KubeRuntime {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// `up` in the seed's order: the cluster, the images, the fit check, the namespace and its
    /// policies, the Services' addresses, the sidecar, the containment probe, then the services
    /// by waves, their ingresses, and what the manifest no longer has.
    async fn up(
        &self,
        environment: &Environment,
        progress: &dyn ProgressSink,
    ) -> Result<UpReport, RuntimeError> {
        self.refuse_unsupported(&environment.manifest)?;
        af_runtime::require_env_values(&environment.manifest)?;
        let cluster = self.which_cluster(progress).await?;
        let loader = self.loader_now().await;
        let images = af_runtime::run_step(
            progress,
            Step::Images,
            "the services' images",
            self.images(environment, &loader),
        )
        .await?;
        let sized = self.fit(&cluster, environment, &images, progress).await?;
        let name = self.namespace(&environment.id);
        // Whether this up wrote anything beyond the probe's own pod and verdict.
        let mut changed = self
            .namespace_and_policies(environment, (&images, &loader), &sized, progress)
            .await?;
        let (addresses, wrote) = self.service_addresses(&sized).await?;
        changed |= wrote;
        let secrets = self.sidecar_secrets(&name, environment).await?;
        let capture = secrets.capture_ca.as_ref().map(|ca| CaptureInput {
            ca,
            with_system_store: secrets.system_store.is_some(),
        });
        let rendered = self.rendered(
            &cluster,
            environment,
            &images,
            (addresses.sidecar, &addresses.services),
            (&secrets.token, capture),
        )?;
        changed |= self.sidecar(&name, &rendered, progress).await?;
        self.contain(&name, &rendered, progress).await?;
        changed |= self
            .service_values(&rendered, secrets.system_store.as_deref())
            .await?;
        changed |= self.services(&name, &rendered, progress).await?;
        changed |= self
            .publish(environment, &name, &rendered, progress)
            .await?;
        let status = self.status(&environment.id).await?;
        for service in &status.services {
            for url in &service.urls {
                progress.emit(ProgressEvent::Url {
                    service: service.name.clone(),
                    url: url.clone(),
                });
            }
        }
        Ok(UpReport {
            unchanged: !changed,
            status,
        })
    }

    async fn down(
        &self,
        id: &EnvironmentId,
        progress: &dyn ProgressSink,
    ) -> Result<(), RuntimeError> {
        let name = self.namespace(id);
        af_runtime::run_step(progress, Step::Teardown, &format!("namespace {name}"), {
            namespace::delete(self.client.clone(), &name, id, Patience::default())
        })
        .await
    }

    async fn status(&self, id: &EnvironmentId) -> Result<EnvironmentStatus, RuntimeError> {
        let name = self.namespace(id);
        let namespace = Api::<Namespace>::all(self.client.clone())
            .get_opt(&name)
            .await
            .map_err(|e| crate::error::api(format!("reading namespace {name}"), e))?;
        let Some(namespace) = namespace
            .filter(|n| namespace::state_of(Some(n), id) != namespace::NamespaceState::Foreign)
        else {
            return Ok(EnvironmentStatus {
                id: id.clone(),
                services: Vec::new(),
                containment: None,
                database: None,
                external_database: None,
            });
        };
        let containment = namespace
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(VERDICT_ANNOTATION))
            .and_then(|text| serde_json::from_str(text).ok());
        let deployments = Api::<Deployment>::namespaced(self.client.clone(), &name)
            .list(&ListParams::default().labels(af_runtime::MANAGED_LABEL))
            .await
            .map_err(|e| crate::error::api(format!("listing the Deployments of {name}"), e))?;
        let pods = Api::<Pod>::namespaced(self.client.clone(), &name)
            .list(&ListParams::default().labels(&format!("{ROLE_LABEL}=service")))
            .await
            .map_err(|e| crate::error::api(format!("listing the pods of {name}"), e))?;
        let ingresses = Api::<Ingress>::namespaced(self.client.clone(), &name)
            .list(&ListParams::default())
            .await
            .map_err(|e| crate::error::api(format!("listing the Ingresses of {name}"), e))?;
        Ok(assemble_status(
            id,
            containment,
            &deployments.items,
            &pods.items,
            &ingresses.items,
        ))
    }

    async fn net_log(
        &self,
        id: &EnvironmentId,
        query: &af_runtime::DecisionQuery,
    ) -> Result<Vec<af_runtime::DecisionRecord>, RuntimeError> {
        let path = af_sidecar_api::control_client::decisions_path(query);
        let body = self.control(id, "GET", &path, "").await?;
        af_sidecar_api::control_client::read_decisions(&body)
            .map_err(|e| crate::error::unexpected("reading the decision log", e))
    }

    async fn inbox(&self, id: &EnvironmentId) -> Result<Vec<af_runtime::InboxEntry>, RuntimeError> {
        let body = self.control(id, "GET", "/v1/inbox", "").await?;
        af_sidecar_api::control_client::read_inbox(&body)
            .map_err(|e| crate::error::unexpected("reading the inbox", e))
    }

    async fn trigger_webhook(
        &self,
        id: &EnvironmentId,
        request: &af_runtime::WebhookRequest,
    ) -> Result<af_runtime::WebhookDelivery, RuntimeError> {
        let body = serde_json::to_string(request)
            .map_err(|e| crate::error::internal("writing the webhook", e))?;
        let answer = self.control(id, "POST", "/v1/webhooks", &body).await?;
        af_sidecar_api::control_client::read_delivery(&answer)
            .map_err(|e| crate::error::unexpected("reading the webhook's delivery", e))
    }

    async fn logs(
        &self,
        id: &EnvironmentId,
        service: &str,
        follow: bool,
    ) -> Result<LogStream, RuntimeError> {
        use futures_util::{AsyncBufReadExt, StreamExt};
        let name = self.namespace(id);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &name);
        let listed = pods
            .list(
                &ListParams::default()
                    .labels(&format!("{SERVICE_LABEL}={service},{ROLE_LABEL}=service")),
            )
            .await
            .map_err(|e| crate::error::api(format!("listing the pods of {service}"), e))?;
        let mut streams = Vec::new();
        for pod in listed.items {
            let instance = pod.metadata.name.clone().unwrap_or_default();
            let params = LogParams {
                container: Some(service.to_string()),
                follow,
                ..Default::default()
            };
            let reader = pods
                .log_stream(&instance, &params)
                .await
                .map_err(|e| crate::error::api(format!("reading the log of {instance}"), e))?;
            let lines = reader.lines().map(move |line| {
                line.map(|line| LogLine {
                    instance: instance.clone(),
                    line,
                })
                .map_err(|e| crate::error::unexpected("reading a pod's log", e))
            });
            streams.push(lines.boxed());
        }
        // Every instance's lines as they come.
        Ok(Box::pin(futures_util::stream::select_all(streams)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_each_service_deployment_with_its_pods_limits_and_its_ingress_hosts() {
        fn from<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
            serde_json::from_value(value).unwrap()
        }
        let deployments: Vec<Deployment> = vec![
            from(
                serde_json::json!({"metadata": {"name": "web"}, "spec": {"replicas": 2, "selector": {}, "template": {}}, "status": {"readyReplicas": 1}}),
            ),
            from(
                serde_json::json!({"metadata": {"name": SIDECAR}, "spec": {"replicas": 1, "selector": {}, "template": {}}}),
            ),
            from(
                serde_json::json!({"metadata": {"name": "worker"}, "spec": {"selector": {}, "template": {}}}),
            ),
        ];
        let pods: Vec<Pod> = vec![from(serde_json::json!({
            "metadata": {"name": "web-1", "labels": {SERVICE_LABEL: "web"}},
            "spec": {"containers": [{"name": "web", "resources": {"limits": {"cpu": "250m", "memory": "128Mi"}}}]}
        }))];
        let ingresses: Vec<Ingress> = vec![from(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"rules": [{"host": "shop-main-web.preview.example"}]}
        }))];
        let id = EnvironmentId::derive("shop", "main");
        let status = assemble_status(&id, None, &deployments, &pods, &ingresses);
        let names: Vec<&str> = status.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["web", "worker"], "the sidecar is not a service");
        let web = &status.services[0];
        assert_eq!((web.ready, web.wanted), (1, 2));
        assert_eq!(
            (web.applied_cpu_millis, web.applied_memory_bytes),
            (Some(250), Some(128 << 20))
        );
        assert_eq!(web.urls, ["http://shop-main-web.preview.example"]);
        let worker = &status.services[1];
        assert_eq!(
            (worker.ready, worker.wanted, worker.applied_cpu_millis),
            (0, 1, None)
        );
    }

    #[test]
    fn a_rendering_failure_is_the_manifests_to_fix_or_afs_own_never_the_platforms() {
        let capabilities = Capabilities::new("kubernetes", [Capability::CronSchedules]);
        let cron = render_failure(
            &capabilities,
            RenderError::CronCommandUnknown("report".into()),
        );
        assert_eq!(cron.code(), af_runtime::RunCode::Unsupported);
        assert!(cron.to_string().contains("write `command:`"), "{cron}");
        for bug in [
            RenderError::NoImage("web".into()),
            RenderError::Unserializable("the egress policy: x".into()),
        ] {
            let err = render_failure(&capabilities, bug);
            assert_eq!(err.code(), af_runtime::RunCode::Internal, "{err}");
            assert!(err.help().contains("report it"), "{}", err.help());
        }
    }
}
