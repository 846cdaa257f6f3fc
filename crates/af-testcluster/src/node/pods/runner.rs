//! One Pod's life on the node: admitted or refused; its images found (never pulled); its volumes
//! and files made; its holder started on the Pod network (and the test's outside networks); its
//! init containers run in order, each to completion; its containers started and restarted as
//! `restartPolicy` says, with the kubelet's back-off (the first restart at once, then 10 s doubling
//! to five minutes); its probes run; its status written whenever it changes. When the Pod is
//! deleted its containers are stopped within its grace period, everything of it is removed, and
//! the node deletes the Pod for good, as a kubelet confirms a deletion.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, KillContainerOptions, ListContainersOptions,
    RemoveContainerOptions, StopContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodStatus, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::admit;
use super::create::{self, Backing, ContainerInputs, Kind, PodContext, PodFiles};
use super::env;
use super::probes::{self, Tally};
use super::status::{ContainerRecord, PodState, State, Termination, pod_status};
use crate::node::Shared;

/// The kubelet's crash back-off: 10 s, doubling, at most five minutes.
const BACKOFF_START: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A container that ran this long starts its back-off afresh.
const BACKOFF_RESET: Duration = Duration::from_secs(600);
/// How soon a step that failed for a reason that may pass (a Secret not there yet) is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// How a Pod's life on the node ended.
#[derive(Debug)]
enum Ending {
    /// Deleted with a grace period: stop its containers within it, then delete it for good.
    Deleted { grace: i64 },
    /// Gone from the API already: remove what is left.
    Gone,
}

/// Runs `pod` until it is deleted; `updates` carries each new version of it, and closes when the
/// Pod is gone from the API.
pub async fn run(shared: Arc<Shared>, updates: watch::Receiver<Pod>) {
    let pod = updates.borrow().clone();
    let mut runner = Runner::new(shared, pod, updates.clone());
    let ending = tokio::select! {
        () = runner.life() => wait_for_deletion(updates).await,
        ending = wait_for_deletion(updates.clone()) => ending,
    };
    runner.teardown(ending).await;
}

async fn wait_for_deletion(mut updates: watch::Receiver<Pod>) -> Ending {
    loop {
        let grace = {
            let pod = updates.borrow_and_update();
            pod.metadata.deletion_timestamp.as_ref().map(|_| {
                pod.metadata
                    .deletion_grace_period_seconds
                    .or_else(|| pod.spec.as_ref()?.termination_grace_period_seconds)
                    .unwrap_or(30)
            })
        };
        if let Some(grace) = grace {
            return Ending::Deleted { grace };
        }
        if updates.changed().await.is_err() {
            return Ending::Gone;
        }
    }
}

/// A container the node runs, and what it needs to decide about it.
#[derive(Debug, Default)]
struct Live {
    /// The Docker id of the current instance.
    id: Option<String>,
    /// When to (re)start it; `None`: not waiting to.
    start_at: Option<Instant>,
    backoff: Option<Duration>,
    startup: Option<Tally>,
    liveness: Option<Tally>,
    readiness: Option<Tally>,
}

struct Runner {
    shared: Arc<Shared>,
    pod: Pod,
    updates: watch::Receiver<Pod>,
    context: PodContext,
    policy: String,
    state: PodState,
    written: Option<PodStatus>,
    dir: PathBuf,
    volumes: BTreeMap<String, Backing>,
    files: Option<PodFiles>,
    pod_ip: Option<IpAddr>,
}

impl Runner {
    fn new(shared: Arc<Shared>, pod: Pod, updates: watch::Receiver<Pod>) -> Runner {
        let context = PodContext::of(&pod, &shared.config.cluster_id, &shared.config.name);
        let spec = pod.spec.clone().unwrap_or_default();
        let records = |containers: &[Container], waiting: &str| {
            containers
                .iter()
                .map(|c| {
                    ContainerRecord::new(&c.name, c.image.as_deref().unwrap_or_default(), waiting)
                })
                .collect::<Vec<_>>()
        };
        let init = spec.init_containers.clone().unwrap_or_default();
        let waiting = if init.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let state = PodState {
            init: records(&init, "PodInitializing"),
            containers: records(&spec.containers, waiting),
            host_ip: "127.0.0.1".to_string(),
            ..Default::default()
        };
        let dir = shared.config.data_dir.join("pods").join(&context.uid);
        Runner {
            policy: spec.restart_policy.unwrap_or_else(|| "Always".to_string()),
            shared,
            pod,
            updates,
            context,
            state,
            written: None,
            dir,
            volumes: BTreeMap::new(),
            files: None,
            pod_ip: None,
        }
    }

    fn spec(&self) -> k8s_openapi::api::core::v1::PodSpec {
        self.pod.spec.clone().unwrap_or_default()
    }

    /// Writes the status `state` makes, when it differs from the last one written.
    async fn publish(&mut self) {
        let latest = self.updates.borrow().clone();
        let mut previous = self.written.clone().unwrap_or_default();
        let scheduled: Vec<_> = latest
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ == "PodScheduled")
            .collect();
        let mut conditions = previous.conditions.take().unwrap_or_default();
        conditions.retain(|c| c.type_ != "PodScheduled");
        conditions.extend(scheduled);
        previous.conditions = Some(conditions);
        previous.qos_class = latest.status.as_ref().and_then(|s| s.qos_class.clone());
        let status = pod_status(&previous, &self.state, &self.policy, Timestamp::now());
        if self.written.as_ref() == Some(&status) {
            return;
        }
        let pods: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.context.namespace);
        let patch = serde_json::json!({ "status": status });
        match pods
            .patch_status(
                &self.context.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => self.written = Some(status),
            Err(err) => tracing::warn!(
                "the node could not write the status of {}/{}: {err}",
                self.context.namespace,
                self.context.name
            ),
        }
    }

    /// The Pod's life until it has nothing more to run (then it waits to be deleted).
    async fn life(&mut self) {
        if let Err(refusal) = admit::admit(&self.pod, &self.shared.config.safe_sysctls) {
            self.state.refused = Some(refusal);
            self.publish().await;
            return;
        }
        self.state.start_time = Some(Timestamp::now());
        self.publish().await;
        self.images().await;
        self.prepare().await;
        if !self.initialize().await {
            return;
        }
        self.run_containers().await;
    }

    /// Waits until every image of the Pod is on the daemon. The node never pulls: a missing image
    /// is `ErrImageNeverPull` under `imagePullPolicy: Never`, `ErrImagePull` and then
    /// `ImagePullBackOff` otherwise, as a kubelet whose pull fails says it.
    async fn images(&mut self) {
        let spec = self.spec();
        let mut attempt = 0u32;
        loop {
            let mut missing = false;
            let all = spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| (true, c))
                .chain(spec.containers.iter().map(|c| (false, c)));
            let mut index = [0usize, 0usize];
            for (init, container) in all {
                let slot = usize::from(!init);
                let i = index[slot];
                index[slot] += 1;
                let image = container.image.clone().unwrap_or_default();
                if self.shared.docker.inspect_image(&image).await.is_ok() {
                    continue;
                }
                missing = true;
                let never = container.image_pull_policy.as_deref() == Some("Never");
                let (reason, message) = if never {
                    (
                        "ErrImageNeverPull",
                        format!(
                            "Container image {image:?} is not present with pull policy of Never"
                        ),
                    )
                } else if attempt == 0 {
                    (
                        "ErrImagePull",
                        format!(
                            "image {image:?} is not on the node, and the tests' node pulls nothing (no registry is reachable here): build or load it on this machine's Docker daemon"
                        ),
                    )
                } else {
                    (
                        "ImagePullBackOff",
                        format!("Back-off pulling image {image:?}"),
                    )
                };
                let record = if init {
                    &mut self.state.init[i]
                } else {
                    &mut self.state.containers[i]
                };
                record.state = State::waiting(reason, Some(message));
            }
            if !missing {
                return;
            }
            self.publish().await;
            attempt += 1;
            tokio::time::sleep(BACKOFF_START.min(RETRY * attempt)).await;
        }
    }

    /// The Pod's folder, volumes, holder and files, retried until they can be made.
    async fn prepare(&mut self) {
        loop {
            match self.try_prepare().await {
                Ok(()) => return,
                Err(message) => {
                    for record in self
                        .state
                        .containers
                        .iter_mut()
                        .chain(self.state.init.iter_mut())
                    {
                        record.state = State::waiting("ContainerCreating", Some(message.clone()));
                    }
                    self.publish().await;
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    async fn try_prepare(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        self.volumes = super::volumes::make(
            self.shared.client.clone(),
            &self.shared.docker,
            &self.context,
            &self.pod,
            &self.dir,
        )
        .await?;
        let ip = self.holder().await?;
        let files = PodFiles {
            resolv_conf: self.dir.join("resolv.conf"),
            hosts: self.dir.join("hosts"),
            hostname: self.dir.join("hostname"),
        };
        let config = &self.shared.config;
        for (path, text) in [
            (
                &files.resolv_conf,
                create::resolv_conf(&self.pod, config.cluster_dns, &config.domain),
            ),
            (&files.hosts, create::hosts(&self.pod, &ip.to_string())),
            (
                &files.hostname,
                format!("{}\n", create::hostname(&self.pod)),
            ),
        ] {
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        self.files = Some(files);
        self.pod_ip = Some(ip);
        self.state.pod_ip = Some(ip.to_string());
        Ok(())
    }

    /// Starts the holder (once) on the Pod network and the outside networks; the Pod's address.
    async fn holder(&self) -> Result<IpAddr, String> {
        let docker = &self.shared.docker;
        let name = self.context.holder();
        if docker
            .inspect_container(&name, None::<InspectContainerOptions>)
            .await
            .is_err()
        {
            let resolv = create::resolv_conf(
                &self.pod,
                self.shared.config.cluster_dns,
                &self.shared.config.domain,
            );
            let nameservers = resolv
                .lines()
                .filter_map(|l| l.strip_prefix("nameserver "))
                .map(str::to_string)
                .collect();
            let body = create::holder(
                &self.pod,
                &self.context,
                (
                    &self.shared.config.pause_image,
                    &self.shared.config.pause_command,
                ),
                &self.shared.network.name,
                nameservers,
            );
            docker
                .create_container(
                    Some(CreateContainerOptions {
                        name: Some(name.clone()),
                        ..Default::default()
                    }),
                    body,
                )
                .await
                .map_err(|e| format!("creating the Pod's sandbox: {e}"))?;
            for uplink in &self.shared.config.uplinks {
                docker
                    .connect_network(
                        uplink,
                        bollard::models::NetworkConnectRequest {
                            container: name.clone(),
                            ..Default::default()
                        },
                    )
                    .await
                    .map_err(|e| format!("attaching the Pod's sandbox to {uplink}: {e}"))?;
            }
            docker
                .start_container(
                    &name,
                    None::<bollard::query_parameters::StartContainerOptions>,
                )
                .await
                .map_err(|e| format!("starting the Pod's sandbox: {e}"))?;
        }
        let inspected = docker
            .inspect_container(&name, None::<InspectContainerOptions>)
            .await
            .map_err(|e| format!("reading the Pod's sandbox: {e}"))?;
        let pid = inspected.state.as_ref().and_then(|s| s.pid).unwrap_or(0);
        let ip = inspected
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|n| n.get(&self.shared.network.name).cloned())
            .and_then(|e| e.ip_address)
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| "the Pod's sandbox has no address on the Pod network".to_string())?;
        // The Services' addresses by way of the node, whichever network the default route takes
        // (a Pod attached to the outside may have its default route there), as a CNI routes them.
        route_services(
            pid,
            &self.shared.config.service_cidr,
            self.shared.network.gateway,
        )
        .await?;
        Ok(ip)
    }

    /// The record of container `index` of `kind`.
    fn record(&mut self, kind: Kind, index: usize) -> &mut ContainerRecord {
        match kind {
            Kind::Init => &mut self.state.init[index],
            _ => &mut self.state.containers[index],
        }
    }

    fn container_spec(&self, kind: Kind, index: usize) -> Container {
        let spec = self.spec();
        match kind {
            Kind::Init => spec.init_containers.unwrap_or_default()[index].clone(),
            _ => spec.containers[index].clone(),
        }
    }

    /// The environment `container` gets, read now (a Secret made since is seen).
    async fn environment(&self, container: &Container) -> Result<Vec<(String, String)>, String> {
        let (secrets, config_maps) = env::referenced(container);
        let mut sources = env::Sources::default();
        let namespace = &self.context.namespace;
        for name in secrets {
            if let Ok(Some(secret)) =
                Api::<Secret>::namespaced(self.shared.client.clone(), namespace)
                    .get_opt(&name)
                    .await
            {
                sources.secrets.insert(name, secret);
            }
        }
        for name in config_maps {
            if let Ok(Some(map)) =
                Api::<ConfigMap>::namespaced(self.shared.client.clone(), namespace)
                    .get_opt(&name)
                    .await
            {
                sources.config_maps.insert(name, map);
            }
        }
        let links = self.spec().enable_service_links != Some(false);
        let services = env::service_variables(&self.shared.services.services(), namespace, links);
        let pod_ip = self.pod_ip.map(|ip| ip.to_string()).unwrap_or_default();
        env::resolve(
            &self.pod,
            container,
            &sources,
            &services,
            (&pod_ip, "127.0.0.1"),
        )
    }

    /// Creates and starts a new instance of container `index` of `kind`: its Docker id, or the
    /// waiting reason and message when it cannot.
    async fn start(&mut self, kind: Kind, index: usize) -> Result<String, (String, String)> {
        let container = self.container_spec(kind, index);
        let config_error = |m: String| ("CreateContainerConfigError".to_string(), m);
        let env = self.environment(&container).await.map_err(config_error)?;
        let image = container.image.clone().unwrap_or_default();
        let inspected = self
            .shared
            .docker
            .inspect_image(&image)
            .await
            .map_err(|e| ("ErrImagePull".to_string(), e.to_string()))?;
        let image_user = inspected
            .config
            .as_ref()
            .and_then(|c| c.user.clone())
            .unwrap_or_default();
        let files = self
            .files
            .clone()
            .ok_or_else(|| config_error("the Pod has no files yet".into()))?;
        let mounts = create::mounts(&container, &self.volumes, &files).map_err(config_error)?;
        let instance = u32::try_from(self.record(kind, index).restarts).unwrap_or(0);
        let body = create::container(
            &self.pod,
            &self.context,
            &container,
            ContainerInputs {
                kind,
                instance,
                env,
                mounts,
                image_user: &image_user,
            },
        )
        .map_err(config_error)?;
        let name = self.context.container_name(&container.name, instance);
        let docker = &self.shared.docker;
        // A leftover of the same instance (a start that failed half-way) goes first.
        remove(docker, &name).await;
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(|e| ("CreateContainerError".to_string(), e.to_string()))?;
        if let Err(err) = docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
        {
            return Err(("RunContainerError".to_string(), err.to_string()));
        }
        // Instances before the previous one are of no more use (`previous` logs read the last).
        if instance >= 2 {
            remove(
                docker,
                &self.context.container_name(&container.name, instance - 2),
            )
            .await;
        }
        let record = self.record(kind, index);
        record.container_id = Some(format!("docker://{}", created.id));
        record.image_id = format!("docker://{}", inspected.id.unwrap_or_default());
        record.state = State::Running {
            started_at: Timestamp::now(),
        };
        Ok(created.id)
    }

    /// Runs the init containers in order, each to completion; `false` when the Pod failed.
    async fn initialize(&mut self) -> bool {
        let count = self.state.init.len();
        for index in 0..count {
            let mut backoff: Option<Duration> = None;
            loop {
                let id = match self.start(Kind::Init, index).await {
                    Ok(id) => id,
                    Err((reason, message)) => {
                        self.record(Kind::Init, index).state =
                            State::waiting(&reason, Some(message));
                        self.publish().await;
                        tokio::time::sleep(RETRY).await;
                        continue;
                    }
                };
                self.publish().await;
                let ended = wait_exit(&self.shared.docker, &id).await;
                let failed = ended.exit_code != 0;
                self.record(Kind::Init, index).state = State::Terminated(ended.clone());
                if !failed {
                    self.publish().await;
                    break;
                }
                if self.policy == "Never" {
                    // The Pod fails; its containers never start.
                    for record in &mut self.state.containers {
                        record.state = State::waiting("PodInitializing", None);
                    }
                    self.publish().await;
                    return false;
                }
                let wait = next_backoff(&mut backoff, ended.started_at, ended.finished_at);
                let message = back_off_message(wait, &self.state.init[index].name, &self.context);
                let record = self.record(Kind::Init, index);
                record.last = Some(ended);
                record.restarts += 1;
                record.state = State::waiting("CrashLoopBackOff", Some(message));
                self.publish().await;
                tokio::time::sleep(wait).await;
            }
        }
        true
    }

    /// Starts the containers and keeps them as the policy says until the Pod is deleted.
    async fn run_containers(&mut self) {
        let spec = self.spec();
        let count = spec.containers.len();
        let (exits, mut exited) = mpsc::unbounded_channel::<(usize, String, Termination)>();
        let mut live: Vec<Live> = (0..count)
            .map(|_| Live {
                start_at: Some(Instant::now()),
                ..Default::default()
            })
            .collect();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            let now = Instant::now();
            for (index, entry) in live.iter_mut().enumerate() {
                if entry.start_at.is_some_and(|at| at <= now) {
                    entry.start_at = None;
                    self.launch(index, &spec.containers[index], entry, &exits)
                        .await;
                }
            }
            self.probe(&spec.containers, &mut live).await;
            self.publish().await;
            tokio::select! {
                Some((index, id, ended)) = exited.recv() => {
                    if live[index].id.as_deref() != Some(id.as_str()) {
                        continue;
                    }
                    self.exited(index, ended, &mut live[index]);
                }
                _ = tick.tick() => {}
            }
        }
    }

    /// Starts container `index` (described by `container`), its probes' schedules and the task
    /// that reports its end; a container that cannot start is tried again shortly.
    async fn launch(
        &mut self,
        index: usize,
        container: &Container,
        live: &mut Live,
        exits: &mpsc::UnboundedSender<(usize, String, Termination)>,
    ) {
        match self.start(Kind::App, index).await {
            Ok(id) => {
                let started = Instant::now();
                let tally = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
                    probe.as_ref().map(|p| Tally::new(p, started))
                };
                live.startup = tally(&container.startup_probe);
                live.liveness = tally(&container.liveness_probe);
                live.readiness = tally(&container.readiness_probe);
                live.id = Some(id.clone());
                let record = self.record(Kind::App, index);
                record.started = container.startup_probe.is_none();
                record.ready = record.started && container.readiness_probe.is_none();
                let docker = self.shared.docker.clone();
                let exits = exits.clone();
                tokio::spawn(async move {
                    let ended = wait_exit(&docker, &id).await;
                    let _ = exits.send((index, id, ended));
                });
            }
            Err((reason, message)) => {
                self.record(Kind::App, index).state = State::waiting(&reason, Some(message));
                live.start_at = Some(Instant::now() + RETRY);
            }
        }
    }

    /// Records that container `index` ended, and when it starts again.
    fn exited(&mut self, index: usize, ended: Termination, live: &mut Live) {
        live.id = None;
        let restart = match self.policy.as_str() {
            "Never" => false,
            "OnFailure" => ended.exit_code != 0,
            _ => true,
        };
        let name = self.state.containers[index].name.clone();
        let context = self.context.clone();
        let record = self.record(Kind::App, index);
        record.ready = false;
        if !restart {
            record.state = State::Terminated(ended);
            return;
        }
        let wait = if record.restarts == 0 && live.backoff.is_none() {
            // The first restart is at once; the back-off starts with the second.
            live.backoff = Some(BACKOFF_START);
            Duration::ZERO
        } else {
            next_backoff(&mut live.backoff, ended.started_at, ended.finished_at)
        };
        record.restarts += 1;
        record.last = Some(ended);
        record.state = State::waiting(
            "CrashLoopBackOff",
            Some(back_off_message(wait, &name, &context)),
        );
        live.start_at = Some(Instant::now() + wait);
    }

    /// Runs the probes that are due, and acts on their results.
    async fn probe(&mut self, containers: &[Container], live: &mut [Live]) {
        let Some(pod_ip) = self.pod_ip else { return };
        let now = Instant::now();
        for (index, container) in containers.iter().enumerate() {
            let Some(id) = live[index].id.clone() else {
                continue;
            };
            let docker = self.shared.docker.clone();
            if let Some(tally) = live[index]
                .startup
                .as_mut()
                .filter(|t| t.result != Some(true))
            {
                if tally.due(now) {
                    let passed =
                        probes::run(&docker, &tally.probe.clone(), container, &id, pod_ip).await;
                    match tally.record(passed, Instant::now()) {
                        Some(true) => self.record(Kind::App, index).started = true,
                        Some(false) => kill(&docker, &id).await,
                        None => {}
                    }
                }
                continue;
            }
            if let Some(tally) = live[index].liveness.as_mut().filter(|t| t.due(now)) {
                let passed =
                    probes::run(&docker, &tally.probe.clone(), container, &id, pod_ip).await;
                if tally.record(passed, Instant::now()) == Some(false) {
                    kill(&docker, &id).await;
                    continue;
                }
            }
            let started = self.record(Kind::App, index).started;
            match live[index].readiness.as_mut() {
                Some(tally) if tally.due(now) => {
                    let passed =
                        probes::run(&docker, &tally.probe.clone(), container, &id, pod_ip).await;
                    let ready = tally.record(passed, Instant::now()) == Some(true);
                    self.record(Kind::App, index).ready = ready && started;
                }
                Some(_) => {}
                None => self.record(Kind::App, index).ready = started,
            }
        }
    }

    /// Stops and removes everything of the Pod; a graceful deletion is then confirmed.
    async fn teardown(&mut self, ending: Ending) {
        let docker = &self.shared.docker;
        let grace = match ending {
            Ending::Deleted { grace } => grace.max(0),
            Ending::Gone => 0,
        };
        let mine = ListContainersOptions {
            all: true,
            filters: Some(std::collections::HashMap::from([(
                "label".to_string(),
                vec![format!("{}={}", create::labels::POD_UID, self.context.uid)],
            )])),
            ..Default::default()
        };
        let containers = docker.list_containers(Some(mine)).await.unwrap_or_default();
        let kind_of = |c: &bollard::models::ContainerSummary| {
            c.labels
                .as_ref()
                .and_then(|l| l.get(create::labels::KIND).cloned())
                .unwrap_or_default()
        };
        // The workload first, within the grace period, then the holder.
        let stops = containers
            .iter()
            .filter(|c| kind_of(c) != "holder")
            .filter_map(|c| c.id.clone())
            .map(|id| async move {
                let _ = docker
                    .stop_container(
                        &id,
                        Some(StopContainerOptions {
                            t: Some(i32::try_from(grace).unwrap_or(30)),
                            ..Default::default()
                        }),
                    )
                    .await;
            });
        futures_util::future::join_all(stops).await;
        for id in containers.iter().filter_map(|c| c.id.as_deref()) {
            remove(docker, id).await;
        }
        let volumes = bollard::query_parameters::ListVolumesOptions {
            filters: Some(std::collections::HashMap::from([(
                "label".to_string(),
                vec![format!("{}={}", create::labels::POD_UID, self.context.uid)],
            )])),
        };
        if let Ok(listed) = docker.list_volumes(Some(volumes)).await {
            for volume in listed.volumes.unwrap_or_default() {
                let _ = docker
                    .remove_volume(
                        &volume.name,
                        None::<bollard::query_parameters::RemoveVolumeOptions>,
                    )
                    .await;
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if matches!(ending, Ending::Deleted { .. }) {
            let pods: Api<Pod> =
                Api::namespaced(self.shared.client.clone(), &self.context.namespace);
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(self.context.uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            if let Err(err) = pods.delete(&self.context.name, &params).await {
                tracing::debug!("the node's final delete of {}: {err}", self.context.name);
            }
        }
    }
}

/// The next back-off, and the new one after it: doubled, at most five minutes, afresh when the
/// container ran ten minutes.
fn next_backoff(
    backoff: &mut Option<Duration>,
    started: Option<Timestamp>,
    finished: Timestamp,
) -> Duration {
    let ran = started
        .map(|s| finished.duration_since(s).unsigned_abs())
        .unwrap_or_default();
    let current = match *backoff {
        Some(current) if ran < BACKOFF_RESET => current,
        _ => BACKOFF_START,
    };
    *backoff = Some((current * 2).min(BACKOFF_MAX));
    current
}

/// The kubelet's words for a container waiting to restart.
fn back_off_message(wait: Duration, container: &str, context: &PodContext) -> String {
    format!(
        "back-off {}s restarting failed container={container} pod={}_{}({})",
        wait.as_secs(),
        context.name,
        context.namespace,
        context.uid
    )
}

/// `ip route replace CIDR via GATEWAY` in the network namespace of process `pid`.
async fn route_services(pid: i64, cidr: &str, gateway: std::net::Ipv4Addr) -> Result<(), String> {
    let output = tokio::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["ip", "route", "replace", cidr, "via", &gateway.to_string()])
        .output()
        .await
        .map_err(|e| format!("routing the Services into the Pod (nsenter): {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "routing the Services into the Pod: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Removes container `name` (and its anonymous volumes), running or not; gone already is fine.
async fn remove(docker: &bollard::Docker, name: &str) {
    let _ = docker
        .remove_container(
            name,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            }),
        )
        .await;
}

/// Kills a container whose liveness or startup probe failed.
async fn kill(docker: &bollard::Docker, id: &str) {
    let _ = docker
        .kill_container(
            id,
            Some(KillContainerOptions {
                signal: "SIGKILL".to_string(),
            }),
        )
        .await;
}

/// Waits until container `id` stops; how it ended.
pub async fn wait_exit(docker: &bollard::Docker, id: &str) -> Termination {
    let mut waiting = docker.wait_container(
        id,
        Some(WaitContainerOptions {
            condition: "not-running".to_string(),
        }),
    );
    while waiting.next().await.is_some() {}
    let inspected = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .ok();
    let state = inspected.and_then(|i| i.state).unwrap_or_default();
    let exit_code = i32::try_from(state.exit_code.unwrap_or(-1)).unwrap_or(-1);
    let parse = |t: Option<String>| t.and_then(|t| t.parse::<Timestamp>().ok());
    let error = state.error.filter(|e| !e.is_empty());
    Termination {
        exit_code,
        reason: if error.is_some() && exit_code != 0 {
            "ContainerCannotRun".to_string()
        } else {
            Termination::reason_for(exit_code, state.oom_killed == Some(true))
        },
        message: error,
        started_at: parse(state.started_at),
        finished_at: parse(state.finished_at).unwrap_or_else(Timestamp::now),
        container_id: Some(format!("docker://{id}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_to_five_minutes_and_starts_again_after_ten_minutes_running() {
        let start = Timestamp::from_second(1_800_000_000).unwrap();
        let quick = start + Duration::from_secs(1);
        let mut backoff = None;
        let waits: Vec<u64> = (0..7)
            .map(|_| next_backoff(&mut backoff, Some(start), quick).as_secs())
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300]);
        let long = start + Duration::from_secs(601);
        assert_eq!(next_backoff(&mut backoff, Some(start), long).as_secs(), 10);
    }
}
