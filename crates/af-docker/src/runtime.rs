//! The local runtime: `up` in the order the guarantee needs — engine image, networks, containment
//! probe, sidecar, services (each behind its gate), readiness — and `down`, `status`, `logs`.

use std::collections::BTreeMap;
use std::time::Duration;

use af_manifest::{EnvironmentId, ImageSource};
use af_runtime::{
    Capabilities, Capability, DecisionQuery, DecisionRecord, Environment, EnvironmentStatus,
    InboxEntry, LogLine, LogStream, ProgressEvent, ProgressSink, Runtime, RuntimeError,
    ServiceStatus, Step, UpReport, WebhookDelivery, WebhookRequest,
};
use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{ListContainersOptions, LogsOptions};
use futures_util::StreamExt;

use crate::error::{DockerError, platform};
use crate::names::{INSTANCE_LABEL, REPLICAS_LABEL, SERVICE_LABEL};
use crate::service::{self, Placement};
use crate::{
    build, control, engine_image, ingress, names, networks, one_shot, probe, sidecar, teardown,
    trust,
};

/// How long a service's port may take to open.
const READINESS_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct LocalRuntime {
    docker: Docker,
    capabilities: Capabilities,
    /// Where the probe's and the gates' routes go (`--public-tcp ...`); empty for the real
    /// defaults.
    probe_targets: Vec<String>,
}

impl LocalRuntime {
    pub fn new(docker: Docker, probe_targets: Vec<String>) -> LocalRuntime {
        LocalRuntime {
            docker,
            capabilities: Capabilities::new(
                "local",
                [
                    Capability::NetLog,
                    Capability::Inbox,
                    Capability::WebhookTrigger,
                    Capability::Migrations,
                    Capability::HealthPaths,
                    Capability::AnyStatusIsReady,
                    Capability::CronSchedules,
                    Capability::CronWithoutCommand,
                    Capability::HttpsCapture,
                ],
            ),
            probe_targets,
        }
    }

    /// Removes the instances `manifest` no longer has (a service removed, replicas lowered);
    /// `true` when there were any.
    async fn remove_stale_instances(
        &self,
        env: &EnvironmentId,
        manifest: &af_manifest::Manifest,
    ) -> Result<bool, DockerError> {
        let mut removed = false;
        for stale in self.applications(env).await? {
            let labels = stale.labels.unwrap_or_default();
            let service = labels.get(SERVICE_LABEL).cloned().unwrap_or_default();
            let index: u32 = labels
                .get(INSTANCE_LABEL)
                .and_then(|i| i.parse().ok())
                .unwrap_or(u32::MAX);
            let wanted = manifest.services.get(&service).map_or(0, |s| s.replicas);
            if index >= wanted {
                let (holder_role, app_role) = service::roles(&service, index);
                for role in [app_role, holder_role] {
                    one_shot::remove(&self.docker, &names::container(env, &role)).await?;
                }
                removed = true;
            }
        }
        Ok(removed)
    }

    async fn applications(
        &self,
        id: &EnvironmentId,
    ) -> Result<Vec<bollard::models::ContainerSummary>, DockerError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(names::environment_filter(id)),
            ..Default::default()
        };
        let found = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| platform("listing containers", e))?;
        Ok(found
            .into_iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(SERVICE_LABEL))
            })
            .collect())
    }
}

/// What the start of every service in `up` shares.
#[derive(Clone, Copy)]
struct Starting<'a> {
    docker: &'a Docker,
    at: Placement<'a>,
    progress: &'a dyn ProgressSink,
    egress: &'a str,
    /// Set when anything is (re)created.
    changed: &'a std::sync::atomic::AtomicBool,
}

impl Starting<'_> {
    /// `service` from its [`service::prepare`]d `instances`: its migration first when an instance
    /// is new, then every instance (gate, application, readiness) at once, then its URL.
    async fn service(
        self,
        service: &af_manifest::Service,
        image: &str,
        instances: Vec<service::Prepared>,
    ) -> Result<(), RuntimeError> {
        let Starting {
            docker,
            at,
            progress,
            egress,
            changed,
        } = self;
        // A service whose instances all run as specified has had its migration; one that is
        // (re)created gets it first, once.
        if let Some(command) = &service.migrate
            && !instances.iter().all(service::Prepared::is_current)
        {
            let detail = format!("{} ({})", service.name, command.join(" "));
            af_runtime::run_step(
                progress,
                Step::Migrations,
                &detail,
                service::migrate(docker, at, service, image, command),
            )
            .await?;
            changed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let detail = format!(
            "{} ({} instance{})",
            service.name,
            service.replicas,
            if service.replicas == 1 { "" } else { "s" }
        );
        let detail = &detail;
        af_runtime::run_step(progress, Step::Services, detail, async {
            // Instances are independent of each other: all start at once.
            let addresses = futures_util::future::try_join_all(instances.into_iter().map(
                |prepared| async move {
                    let (instance, created) = service::start(docker, at, service, prepared).await?;
                    changed.fetch_or(created, std::sync::atomic::Ordering::Relaxed);
                    if let Some(port) = service.port {
                        progress.emit(ProgressEvent::Waiting {
                            step: Step::Readiness,
                            within: detail.clone(),
                            on: format!("{} port {port}", instance.app),
                            elapsed: Duration::ZERO,
                        });
                        service::wait_ready(
                            docker,
                            &instance,
                            port,
                            service.health_path.as_deref(),
                            READINESS_TIMEOUT,
                        )
                        .await?;
                    }
                    Ok::<_, DockerError>(instance.ip)
                },
            ))
            .await?;
            if let (true, Some(port)) = (service.web, service.port) {
                let (url, created) =
                    ingress::start(docker, at, egress, &service.name, port, &addresses).await?;
                changed.fetch_or(created, std::sync::atomic::Ordering::Relaxed);
                progress.emit(ProgressEvent::Url {
                    service: service.name.clone(),
                    url,
                });
            }
            Ok::<_, DockerError>(())
        })
        .await
    }
}

/// [`service::prepare`] for every instance of `services`, all at once; by service, in instance
/// order. The first fresh holder whose refusal rules apply goes to `first_fresh` (the probe runs
/// there); dropped unsent when no instance is fresh.
async fn prepare_instances<'s>(
    docker: &Docker,
    at: Placement<'_>,
    services: impl Iterator<Item = &'s af_manifest::Service>,
    images: &BTreeMap<String, String>,
    first_fresh: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<BTreeMap<String, Vec<service::Prepared>>, DockerError> {
    let first_fresh = std::sync::Mutex::new(first_fresh);
    let holder_ready = |holder: &str| {
        if let Some(sender) = first_fresh.lock().ok().and_then(|mut s| s.take()) {
            let _ = sender.send(holder.to_string());
        }
    };
    let holder_ready = &holder_ready;
    let instances = services.flat_map(|service| (0..service.replicas).map(move |i| (service, i)));
    let prepared =
        futures_util::future::try_join_all(instances.map(|(service, index)| async move {
            let image = &images[&service.name];
            let instance =
                service::prepare(docker, at, service, image, index, holder_ready).await?;
            Ok::<_, DockerError>((&service.name, instance))
        }))
        .await?;
    let mut by_service: BTreeMap<String, Vec<service::Prepared>> = BTreeMap::new();
    for (service, instance) in prepared {
        by_service
            .entry(service.clone())
            .or_default()
            .push(instance);
    }
    Ok(by_service)
}

#[async_trait]
impl Runtime for LocalRuntime {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    async fn up(
        &self,
        environment: &Environment,
        progress: &dyn ProgressSink,
    ) -> Result<UpReport, RuntimeError> {
        // What the manifest asks for that this runtime does not do yet is refused up front, naming
        // it — never started without it.
        for capability in wanted_capabilities(&environment.manifest) {
            self.capabilities.require(capability)?;
        }
        af_runtime::require_env_values(&environment.manifest)?;
        let docker = &self.docker;
        let env = &environment.id;
        let (image, images) = af_runtime::run_step(
            progress,
            Step::Images,
            "the engine image and the services' images",
            async {
                let engine = engine_image::ensure(docker).await?;
                let manifest = &environment.manifest;
                let mut images = BTreeMap::new();
                for service in manifest.services.values() {
                    let tag = match &service.source {
                        ImageSource::Image(image) => image.clone(),
                        ImageSource::Build {
                            context,
                            dockerfile,
                        } => {
                            build::build(
                                docker,
                                &manifest.name,
                                &service.name,
                                &environment.manifest_dir,
                                context,
                                dockerfile,
                            )
                            .await?
                        }
                    };
                    images.insert(service.name.clone(), tag);
                }
                Ok::<_, DockerError>((engine, images))
            },
        )
        .await?;
        let manifest = &environment.manifest;
        // The capture CA only where something is captured (`needs_capture_ca`).
        let captures = manifest.egress.needs_capture_ca();
        let (internal, egress, capture_ca) = af_runtime::run_step(
            progress,
            Step::Networks,
            if captures {
                "internal and egress networks, the capture CA"
            } else {
                "internal and egress networks"
            },
            async {
                let (networks, capture_ca) = tokio::join!(networks::ensure(docker, env), async {
                    match captures {
                        true => trust::ensure(docker, env, &image).await.map(Some),
                        false => Ok(None),
                    }
                });
                let (internal, egress) = networks?;
                Ok::<_, DockerError>((internal, egress, capture_ca?))
            },
        )
        .await?;
        let networks::Addressing {
            layout,
            sidecar_ip,
            reserves_fixed: early,
        } = networks::addressing(docker, &internal)
            .await
            .map_err(RuntimeError::from)?;
        // E6 locally: the host's side of the services' network, where a Docker API would listen.
        let platform_api = layout
            .gateways
            .iter()
            .find(|g| !g.contains(':'))
            .map(|gateway| format!("{gateway}:2375"));
        let mut targets = self.probe_targets.clone();
        if !targets.iter().any(|t| t == "--platform-api")
            && let Some(api) = platform_api
        {
            targets.extend(["--platform-api".to_string(), api]);
        }
        // The probe's positive control: the sidecar, where every service reaches it.
        let probe_args: Vec<String> = targets
            .iter()
            .cloned()
            .chain(probe::sidecar_args(sidecar_ip))
            .collect();
        let no_proxy = af_runtime::no_proxy(manifest.services.keys().map(String::as_str));
        let placement = Placement {
            env,
            engine_image: &image,
            internal: &internal,
            layout: &layout,
            sidecar_ip,
            gate_targets: &targets,
            no_proxy: &no_proxy,
            capture_ca: capture_ca.as_ref(),
        };
        // The probe runs in the first instance holder made ready (refusal rules applied, nothing of
        // the service started), else — every instance already running — in a holder of its own.
        let (first_fresh, first_fresh_holder) = tokio::sync::oneshot::channel::<String>();
        let probe = af_runtime::run_step(
            progress,
            Step::Probe,
            "every escape route, under a service's rules",
            async {
                match first_fresh_holder.await {
                    Ok(holder) => probe::judge_in_holder(docker, &holder, probe_args.clone()).await,
                    Err(_) => {
                        probe::judge(docker, env, &image, &internal, probe_args.clone()).await
                    }
                }
            },
        );
        // What runs no workload code — each instance's holder and refusal rules, its application
        // container created but not started, and the sidecar — is made while the probe runs;
        // nothing that could reach out starts before the verdict. A network made by an earlier af does not keep the sidecar's address free
        // (`early` is false), so there each wave's instances are prepared in turn, after the
        // sidecar.
        let images = &images;
        let webhooks: Vec<(String, u16)> = manifest
            .services
            .values()
            .filter_map(|s| s.port.map(|p| (s.name.clone(), p)))
            .collect();
        let prepare_sidecar = || {
            sidecar::prepare(
                docker,
                env,
                sidecar::SidecarSpec {
                    image: &image,
                    internal: &internal,
                    egress: &egress,
                    policy: &manifest.egress,
                    webhooks: &webhooks,
                    capture_ca: capture_ca.as_ref(),
                },
            )
        };
        let probe_holder = probe::holder(env);
        // The sidecar starts as the probe does: the probe's positive control is that it reaches
        // the sidecar (it asks until it answers), and the sidecar runs no workload code.
        let start_sidecar = || async {
            let created = prepare_sidecar().await.map_err(RuntimeError::from)?;
            af_runtime::run_step(
                progress,
                Step::Sidecar,
                "the egress sidecar",
                sidecar::start_prepared(docker, created),
            )
            .await
        };
        // After the verdict: the probe's holder goes and the verdict is kept. A refusal starts
        // nothing more.
        let after_verdict = |containment: Result<af_runtime::ContainmentSummary, RuntimeError>| async {
            let containment = match containment {
                Ok(verdict) => verdict,
                Err(refused) => {
                    one_shot::remove(docker, &probe_holder)
                        .await
                        .map_err(RuntimeError::from)?;
                    return Err(refused);
                }
            };
            let (removed, recorded) = tokio::join!(
                one_shot::remove(docker, &probe_holder),
                probe::record(docker, env, &image, &containment),
            );
            removed.map_err(RuntimeError::from)?;
            recorded.map_err(RuntimeError::from)?;
            Ok::<_, RuntimeError>(containment)
        };
        let (containment, (sidecar, sidecar_created), mut prepared) = if early {
            // The instances are prepared while the probe runs, each up to its application
            // container created but not started: none of them starts before its gate, which waits
            // for the verdict and the sidecar.
            let preparing = af_runtime::run_step(
                progress,
                Step::Preparation,
                "every instance's namespace, refusal rules and container, made while the probe runs (none starts before its verdict and its gate)",
                prepare_instances(
                    docker,
                    placement,
                    manifest.services.values(),
                    images,
                    Some(first_fresh),
                ),
            );
            let judged = async {
                let (containment, sidecar) = tokio::join!(probe, start_sidecar());
                // A sidecar that did not start is the error to report: the probe's verdict
                // (its positive control unanswered) only follows from it.
                let verdict = after_verdict(containment).await;
                let sidecar = sidecar?;
                Ok::<_, RuntimeError>((verdict?, sidecar))
            };
            let (after, prepared) = tokio::join!(judged, preparing);
            let (containment, sidecar) = after?;
            (containment, sidecar, prepared?)
        } else {
            // The sidecar first, so that its fixed address is its own before the probe's holder
            // takes one.
            drop(first_fresh);
            let sidecar = start_sidecar().await?;
            let containment = after_verdict(probe.await).await?;
            (containment, sidecar, BTreeMap::new())
        };
        let changed = std::sync::atomic::AtomicBool::new(false);
        if sidecar.internal_ip != placement.sidecar_ip {
            return Err(RuntimeError::platform_failed(
                "placing the sidecar",
                format!(
                    "it has address {} where af fixes {}; run `af down` and `af up` to make the environment again",
                    sidecar.internal_ip, placement.sidecar_ip
                ),
            ));
        }
        changed.store(sidecar_created, std::sync::atomic::Ordering::Relaxed);
        // Services of one wave depend only on earlier waves, so each wave starts at once.
        let starting = Starting {
            docker,
            at: placement,
            progress,
            egress: &egress,
            changed: &changed,
        };
        for wave in manifest.services_in_start_waves() {
            if !early {
                prepared.extend(
                    prepare_instances(docker, placement, wave.iter().copied(), images, None)
                        .await
                        .map_err(RuntimeError::from)?,
                );
            }
            let wave_prepared: Vec<Vec<service::Prepared>> = wave
                .iter()
                .map(|service| prepared.remove(&service.name).unwrap_or_default())
                .collect();
            futures_util::future::try_join_all(wave.into_iter().zip(wave_prepared).map(
                |(service, instances)| starting.service(service, &images[&service.name], instances),
            ))
            .await?;
        }
        if self
            .remove_stale_instances(env, manifest)
            .await
            .map_err(RuntimeError::from)?
        {
            changed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut status = self.status(env).await?;
        status.containment = Some(containment);
        Ok(UpReport {
            unchanged: !changed.load(std::sync::atomic::Ordering::Relaxed),
            status,
        })
    }

    async fn down(
        &self,
        id: &EnvironmentId,
        progress: &dyn ProgressSink,
    ) -> Result<(), RuntimeError> {
        af_runtime::run_step(
            progress,
            Step::Teardown,
            "every object labelled with the environment",
            teardown::down(&self.docker, id),
        )
        .await
    }

    async fn status(&self, id: &EnvironmentId) -> Result<EnvironmentStatus, RuntimeError> {
        let mut services: BTreeMap<String, ServiceStatus> = BTreeMap::new();
        for container in self.applications(id).await.map_err(RuntimeError::from)? {
            let labels = container.labels.unwrap_or_default();
            let name = labels.get(SERVICE_LABEL).cloned().unwrap_or_default();
            let wanted: u32 = labels
                .get(REPLICAS_LABEL)
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            let running = container.state.map(|s| s.to_string()).as_deref() == Some("running");
            // Applied limits, read off the container the daemon runs, not echoed from the manifest.
            let container_name = container
                .names
                .and_then(|n| n.first().cloned())
                .unwrap_or_default();
            let host_config = self
                .docker
                .inspect_container(
                    container_name.trim_start_matches('/'),
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
                .ok()
                .and_then(|c| c.host_config);
            let entry = services
                .entry(name.clone())
                .or_insert_with(|| ServiceStatus {
                    name,
                    ready: 0,
                    wanted,
                    applied_cpu_millis: host_config
                        .as_ref()
                        .and_then(|h| h.nano_cpus)
                        .filter(|n| *n > 0)
                        .map(|n| (n / 1_000_000) as u64),
                    applied_memory_bytes: host_config
                        .as_ref()
                        .and_then(|h| h.memory)
                        .filter(|m| *m > 0)
                        .map(|m| m as u64),
                    urls: Vec::new(),
                });
            entry.ready += u32::from(running);
        }
        // Each web service's URL, from the port its ingress publishes.
        let options = ListContainersOptions {
            all: false,
            filters: Some(names::environment_filter(id)),
            ..Default::default()
        };
        let running = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| RuntimeError::from(platform("listing containers", e)))?;
        for ingress_container in running {
            let labels = ingress_container.labels.unwrap_or_default();
            let (Some(service), Some(name)) = (
                labels.get(names::INGRESS_LABEL),
                ingress_container.names.and_then(|n| n.first().cloned()),
            ) else {
                continue;
            };
            if let (Some(entry), Ok(url)) = (
                services.get_mut(service),
                ingress::published(&self.docker, name.trim_start_matches('/'), None).await,
            ) {
                entry.urls.push(url);
            }
        }
        Ok(EnvironmentStatus {
            id: id.clone(),
            services: services.into_values().collect(),
            containment: probe::last(&self.docker, id).await,
        })
    }

    async fn net_log(
        &self,
        id: &EnvironmentId,
        query: &DecisionQuery,
    ) -> Result<Vec<DecisionRecord>, RuntimeError> {
        let sidecar = sidecar::find(&self.docker, id).await?;
        Ok(control::decisions(&sidecar, query).await?)
    }

    async fn inbox(&self, id: &EnvironmentId) -> Result<Vec<InboxEntry>, RuntimeError> {
        let sidecar = sidecar::find(&self.docker, id).await?;
        Ok(control::inbox(&sidecar).await?)
    }

    async fn trigger_webhook(
        &self,
        id: &EnvironmentId,
        request: &WebhookRequest,
    ) -> Result<WebhookDelivery, RuntimeError> {
        let sidecar = sidecar::find(&self.docker, id).await?;
        Ok(control::trigger_webhook(&sidecar, request).await?)
    }

    async fn logs(
        &self,
        id: &EnvironmentId,
        service: &str,
        follow: bool,
    ) -> Result<LogStream, RuntimeError> {
        let apps: Vec<String> = self
            .applications(id)
            .await
            .map_err(RuntimeError::from)?
            .into_iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_LABEL))
                    .map(String::as_str)
                    == Some(service)
            })
            .filter_map(|c| {
                c.names
                    .and_then(|n| n.first().map(|n| n.trim_start_matches('/').to_string()))
            })
            .collect();
        let docker = self.docker.clone();
        let streams = apps.into_iter().map(move |app| {
            let options = LogsOptions {
                stdout: true,
                stderr: true,
                follow,
                tail: "all".to_string(),
                ..Default::default()
            };
            let instance = app.clone();
            docker
                .logs(&app, Some(options))
                .map(move |chunk| match chunk {
                    Ok(
                        LogOutput::StdOut { message }
                        | LogOutput::StdErr { message }
                        | LogOutput::Console { message }
                        | LogOutput::StdIn { message },
                    ) => Ok(LogLine {
                        instance: instance.clone(),
                        line: String::from_utf8_lossy(&message).trim_end().to_string(),
                    }),
                    Err(err) => Err(RuntimeError::from(platform(
                        format!("reading the logs of {instance}"),
                        err,
                    ))),
                })
        });
        Ok(Box::pin(futures_util::stream::select_all(streams)))
    }
}

/// The capabilities a manifest needs beyond plain services.
pub fn wanted_capabilities(manifest: &af_manifest::Manifest) -> Vec<Capability> {
    let services = manifest.services.values();
    let mut wanted = Vec::new();
    let mut want = |needed: bool, capability| {
        if needed && !wanted.contains(&capability) {
            wanted.push(capability);
        }
    };
    for service in services {
        want(service.migrate.is_some(), Capability::Migrations);
        want(service.cron.is_some(), Capability::CronSchedules);
        want(service.health_path.is_some(), Capability::HealthPaths);
    }
    want(
        matches!(
            manifest.database.as_ref().map(|d| &d.provider),
            Some(af_manifest::DatabaseProvider::Container { .. })
        ),
        Capability::ContainerDatabase,
    );
    want(
        matches!(
            manifest.database.as_ref().map(|d| &d.provider),
            Some(af_manifest::DatabaseProvider::External { .. })
        ),
        Capability::ExternalDatabase,
    );
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shop_example_names_the_features_it_needs() {
        let manifest = af_manifest::load(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop/af.yaml"),
        )
        .unwrap();
        assert_eq!(
            wanted_capabilities(&manifest),
            [
                Capability::CronSchedules,
                Capability::Migrations,
                Capability::HealthPaths
            ]
        );
        let with_database = af_manifest::parse(
            "name: app\nruntime: {provider: local}\nservices: {api: {image: a}}\ndatabase: {provider: container}\n",
            "af.yaml",
        )
        .unwrap();
        assert_eq!(
            wanted_capabilities(&with_database),
            [Capability::ContainerDatabase]
        );
        let external = af_manifest::parse(
            "name: app\nruntime: {provider: local}\nservices: {api: {image: a}}\ndatabase: {provider: external, url_from_env: DB}\n",
            "af.yaml",
        )
        .unwrap();
        assert_eq!(
            wanted_capabilities(&external),
            [Capability::ExternalDatabase]
        );
        let runtime_caps = Capabilities::new("local", [Capability::NetLog]);
        let err = runtime_caps.require(Capability::Migrations).unwrap_err();
        assert_eq!(err.code(), af_runtime::RunCode::Unsupported);
        assert!(
            err.to_string()
                .contains("the local runtime does not support migrations"),
            "{err}"
        );
    }
}
