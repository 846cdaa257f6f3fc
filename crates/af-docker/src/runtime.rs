//! The local runtime: `up` in the order the guarantee needs — engine image, networks, containment
//! probe, sidecar, services (each behind its gate), readiness — and `down`, `status`, `logs`.

use std::collections::BTreeMap;
use std::time::Duration;

use af_manifest::{EnvironmentId, ImageSource};
use af_runtime::{
    Capabilities, Capability, DatabaseStatus, DecisionQuery, DecisionRecord, Environment,
    EnvironmentStatus, InboxEntry, LogLine, LogStream, ProgressEvent, ProgressSink, Runtime,
    RuntimeError, ServiceStatus, ShellOutput, Step, UpReport, WebhookDelivery, WebhookRequest,
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
    build, control, database, engine_image, ingress, names, networks, one_shot, probe, sidecar,
    teardown, trust,
};

/// How long a service's port may take to open.
const READINESS_TIMEOUT: Duration = Duration::from_secs(60);

pub struct LocalRuntime {
    docker: Docker,
    capabilities: Capabilities,
    /// Where the probe's and the gates' routes go (`--public-tcp ...`); empty for the real
    /// defaults.
    probe_targets: Vec<String>,
    /// af's own environment, where the manifest's `from_env` values and an external database's
    /// URL are read: the process's, unless [`LocalRuntime::with_variables`] says otherwise.
    variables: std::sync::Arc<VariableLookup>,
}

/// Reads one variable of af's own environment.
type VariableLookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl std::fmt::Debug for LocalRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRuntime")
            .field("capabilities", &self.capabilities)
            .field("probe_targets", &self.probe_targets)
            .finish_non_exhaustive()
    }
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
                    Capability::ContainerDatabase,
                    Capability::ExternalDatabase,
                ],
            ),
            probe_targets,
            variables: std::sync::Arc::new(|name: &str| std::env::var(name).ok()),
        }
    }

    /// Reads af's own environment through `variables` instead of the process's: for a program
    /// that runs environments with values of its own (the conformance harness gives its external
    /// database's URL this way), since a process's variables cannot be changed safely once it
    /// runs threads.
    pub fn with_variables(
        mut self,
        variables: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> LocalRuntime {
        self.variables = std::sync::Arc::new(variables);
        self
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
                            &service.name,
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

impl LocalRuntime {
    /// Phase 1: the engine image, and each service's image (as named, or built from its context).
    async fn images(
        &self,
        environment: &Environment,
        progress: &dyn ProgressSink,
    ) -> Result<(String, BTreeMap<String, String>), RuntimeError> {
        let docker = &self.docker;
        af_runtime::run_step(
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
        .await
    }

    /// Phase 2: the services' network and the egress network, and the capture CA where something
    /// is captured (`needs_capture_ca`); (internal, egress, CA).
    async fn networks(
        &self,
        env: &EnvironmentId,
        engine_image: &str,
        manifest: &af_manifest::Manifest,
        progress: &dyn ProgressSink,
    ) -> Result<(String, String, Option<trust::CaptureCa>), RuntimeError> {
        let docker = &self.docker;
        let captures = manifest.egress.needs_capture_ca();
        af_runtime::run_step(
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
                        true => trust::ensure(docker, env, engine_image).await.map(Some),
                        false => Ok(None),
                    }
                });
                let (internal, egress) = networks?;
                Ok::<_, DockerError>((internal, egress, capture_ca?))
            },
        )
        .await
    }
}

/// One application container as the daemon reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ApplicationSeen {
    service: String,
    /// The replica count it was made for (its label).
    wanted: u32,
    running: bool,
    /// Its applied limits, 0 or absent when none.
    nano_cpus: Option<i64>,
    memory: Option<i64>,
}

/// The environment's status from what the daemon reports: per service, the instances running
/// against the replica count they were made for, the limits applied to its first container, and
/// the URLs of its running ingresses (for a service that has instances); the probe's last verdict.
fn assemble_status(
    id: &EnvironmentId,
    applications: Vec<ApplicationSeen>,
    urls: Vec<(String, String)>,
    containment: Option<af_runtime::ContainmentSummary>,
) -> EnvironmentStatus {
    let mut services: BTreeMap<String, ServiceStatus> = BTreeMap::new();
    for app in applications {
        let entry = services
            .entry(app.service.clone())
            .or_insert_with(|| ServiceStatus {
                name: app.service.clone(),
                ready: 0,
                wanted: app.wanted,
                applied_cpu_millis: app
                    .nano_cpus
                    .filter(|n| *n > 0)
                    .map(|n| (n / 1_000_000) as u64),
                applied_memory_bytes: app.memory.filter(|m| *m > 0).map(|m| m as u64),
                urls: Vec::new(),
            });
        entry.ready += u32::from(app.running);
    }
    for (service, url) in urls {
        if let Some(entry) = services.get_mut(&service) {
            entry.urls.push(url);
        }
    }
    EnvironmentStatus {
        id: id.clone(),
        services: services.into_values().collect(),
        containment,
        database: None,
        external_database: None,
    }
}

/// The probe's and the gates' routes: those configured, and — unless one is configured — E6
/// locally, the platform API at the host's side of the services' network, where a Docker API
/// would listen.
fn probe_targets(configured: &[String], layout: &networks::Layout) -> Vec<String> {
    let mut targets = configured.to_vec();
    let platform_api = layout
        .gateways
        .iter()
        .find(|g| !g.contains(':'))
        .map(|gateway| format!("{gateway}:2375"));
    if !targets.iter().any(|t| t == "--platform-api")
        && let Some(api) = platform_api
    {
        targets.extend(["--platform-api".to_string(), api]);
    }
    targets
}

/// The database an environment wants: its image, seed and connection.
struct WantedDatabase {
    image: database::Image,
    seed: Option<database::Seed>,
    variable: String,
    connection: crate::plan::database::Connection,
}

impl LocalRuntime {
    /// The manifest's container database, its image found on this machine (AF-RUN-066 when it is
    /// not) and its seed read; `None` without one.
    async fn wanted_database(
        &self,
        environment: &Environment,
    ) -> Result<Option<WantedDatabase>, RuntimeError> {
        let Some(af_manifest::Database {
            provider: af_manifest::DatabaseProvider::Container { image, seed },
            env: variable,
            ..
        }) = &environment.manifest.database
        else {
            return Ok(None);
        };
        let image = database::image(&self.docker, image).await?;
        let seed = match seed {
            Some(file) => {
                let path = environment.manifest_dir.join(file);
                let sql = std::fs::read(&path).map_err(|e| {
                    RuntimeError::from(af_runtime::RuntimeErrorKind::SeedFailed {
                        file: file.display().to_string(),
                        detail: format!("it cannot be read at {}: {e}", path.display()),
                    })
                })?;
                Some(database::Seed {
                    file: file.display().to_string(),
                    sql,
                })
            }
            None => None,
        };
        let connection = database::connection(&self.docker, &environment.id).await?;
        Ok(Some(WantedDatabase {
            image,
            seed,
            variable: variable.clone(),
            connection,
        }))
    }

    /// What of the database runs nothing of its image on a network: its template, its data and
    /// its pod's holder with the refusal rules ([`database::prepare_server`]).
    async fn prepare_database(
        &self,
        at: Placement<'_>,
        wanted: &WantedDatabase,
        progress: &dyn ProgressSink,
    ) -> Result<database::PreparedServer, RuntimeError> {
        af_runtime::run_step(
            progress,
            Step::Preparation,
            "the database's template, data and pod (its server starts after the verdict)",
            database::prepare_server(&self.docker, at, &wanted.image, wanted.seed.as_ref()),
        )
        .await
    }

    /// The database's server once prepared, behind its pod's gate, with its branch; `true` when
    /// it was (re)created.
    async fn start_database(
        &self,
        at: Placement<'_>,
        wanted: &WantedDatabase,
        prepared: database::PreparedServer,
        progress: &dyn ProgressSink,
    ) -> Result<bool, RuntimeError> {
        let detail = format!(
            "{} (branch {})",
            wanted.image.reference, wanted.connection.database
        );
        af_runtime::run_step(
            progress,
            Step::Database,
            &detail,
            database::start_server(
                &self.docker,
                at,
                &wanted.image,
                prepared,
                &wanted.connection,
            ),
        )
        .await
    }
}

/// What phase 3 leaves: the verdict, the sidecar, and the instances prepared meanwhile.
struct Contained {
    containment: af_runtime::ContainmentSummary,
    sidecar_created: bool,
    /// By service; empty when the network could not keep the sidecar's address free (then each
    /// wave's instances are prepared as it starts).
    prepared: BTreeMap<String, Vec<service::Prepared>>,
}

/// Phase 3, containment: the probe, in the first instance holder made ready (refusal rules
/// applied, nothing of the service started), else — every instance already running — in a holder
/// of its own; the sidecar starts as the probe does (the probe's positive control is that it
/// answers). What runs no workload code — each instance's holder and refusal rules, its
/// application container created but not started — is made while the probe runs, where the
/// network keeps the sidecar's address free (`early`); nothing that could reach out starts
/// before the verdict.
async fn contain(
    docker: &Docker,
    progress: &dyn ProgressSink,
    placement: Placement<'_>,
    manifest: &af_manifest::Manifest,
    images: &BTreeMap<String, String>,
    egress: &str,
    early: bool,
) -> Result<Contained, RuntimeError> {
    let Placement {
        env,
        engine_image: image,
        internal,
        sidecar_ip,
        gate_targets: targets,
        capture_ca,
        ..
    } = placement;
    // The probe's positive control: the sidecar, where every service reaches it.
    let probe_args: Vec<String> = targets
        .iter()
        .cloned()
        .chain(probe::sidecar_args(sidecar_ip))
        .collect();
    let (first_fresh, first_fresh_holder) = tokio::sync::oneshot::channel::<String>();
    let probe = af_runtime::run_step(
        progress,
        Step::Probe,
        "every escape route, under a service's rules",
        async {
            match first_fresh_holder.await {
                Ok(holder) => probe::judge_in_holder(docker, &holder, probe_args.clone()).await,
                Err(_) => probe::judge(docker, env, image, internal, probe_args.clone()).await,
            }
        },
    );
    let webhooks = crate::plan::webhook_targets(manifest);
    let start_sidecar = || async {
        let created = sidecar::prepare(
            docker,
            env,
            sidecar::SidecarSpec {
                image,
                internal,
                egress,
                policy: &manifest.egress,
                webhooks: &webhooks,
                capture_ca,
                relay: placement.relay,
            },
        )
        .await
        .map_err(RuntimeError::from)?;
        af_runtime::run_step(
            progress,
            Step::Sidecar,
            "the egress sidecar",
            sidecar::start_prepared(docker, created),
        )
        .await
    };
    let probe_holder = probe::holder(env);
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
            probe::record(docker, env, image, &containment),
        );
        removed.map_err(RuntimeError::from)?;
        recorded.map_err(RuntimeError::from)?;
        Ok::<_, RuntimeError>(containment)
    };
    let (containment, (sidecar, sidecar_created), prepared) = if early {
        // Each instance up to its application container created but not started: none of them
        // starts before its gate, which waits for the verdict and the sidecar.
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
            // A sidecar that did not start is the error to report: the probe's verdict (its
            // positive control unanswered) only follows from it.
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
    if sidecar.internal_ip != sidecar_ip {
        return Err(RuntimeError::platform_failed(
            "placing the sidecar",
            format!(
                "it has address {} where af fixes {sidecar_ip}; run `af down` and `af up` to make the environment again",
                sidecar.internal_ip
            ),
        ));
    }
    Ok(Contained {
        containment,
        sidecar_created,
        prepared,
    })
}

/// Phase 4, services: in `depends_on` waves (services of one wave depend only on earlier waves,
/// so each wave starts at once), each service's migration, instances (gate, application,
/// readiness) and URL.
async fn start_services(
    starting: Starting<'_>,
    manifest: &af_manifest::Manifest,
    images: &BTreeMap<String, String>,
    mut prepared: BTreeMap<String, Vec<service::Prepared>>,
    early: bool,
) -> Result<(), RuntimeError> {
    for wave in manifest.services_in_start_waves() {
        if !early {
            prepared.extend(
                prepare_instances(
                    starting.docker,
                    starting.at,
                    wave.iter().copied(),
                    images,
                    None,
                )
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
    Ok(())
}

#[async_trait]
impl Runtime for LocalRuntime {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// `up` in the seed's order: images, networks, containment (the probe, with the sidecar and
    /// everything that runs no workload code made meanwhile), services by waves, then what the
    /// manifest no longer has.
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
        af_runtime::require_env_values_in(&environment.manifest, &*self.variables)?;
        let manifest = &environment.manifest;
        // An external database's URL is read and its host decided before anything is made or
        // built (AF-RUN-070, 071): the sidecar would refuse every connection to a host it does
        // not allow.
        let external_database = crate::plan::external_database::wanted(manifest, &*self.variables)?;
        let env = &environment.id;
        let (image, images) = self.images(environment, progress).await?;
        // The database's image is on this machine and its seed readable before anything is made
        // (AF-RUN-066, AF-RUN-067); the connection string is known before the server runs, so
        // that instances can be prepared with it while the probe runs.
        let wanted_database = self.wanted_database(environment).await?;
        let (internal, egress, capture_ca) = self.networks(env, &image, manifest, progress).await?;
        let networks::Addressing {
            layout,
            sidecar_ip,
            reserves_fixed: early,
        } = networks::addressing(&self.docker, &internal)
            .await
            .map_err(RuntimeError::from)?;
        let targets = probe_targets(&self.probe_targets, &layout);
        let no_proxy = af_runtime::no_proxy(manifest.services.keys().map(String::as_str));
        let database_variable = match (&wanted_database, &external_database) {
            (Some(wanted), _) => Some(crate::plan::database::Variable {
                name: wanted.variable.clone(),
                url: wanted.connection.url(),
            }),
            (None, Some(external)) => Some(crate::plan::database::Variable {
                name: external.variable.clone(),
                url: crate::plan::external_database::services_url(
                    &external.url,
                    &external.relay,
                    sidecar_ip,
                ),
            }),
            (None, None) => None,
        };
        let placement = Placement {
            env,
            engine_image: &image,
            internal: &internal,
            layout: &layout,
            sidecar_ip,
            gate_targets: &targets,
            no_proxy: &no_proxy,
            capture_ca: capture_ca.as_ref(),
            database: database_variable.as_ref(),
            relay: external_database.as_ref().map(|external| &external.relay),
            variables: crate::plan::service::Variables(&*self.variables),
        };
        // The database's template, data and pod's holder are made while the probe runs, where
        // the network keeps the sidecar's address free (otherwise after the sidecar has it).
        let prepare_database = |wanted| self.prepare_database(placement, wanted, progress);
        let (contained, database_prepared) = tokio::join!(
            contain(
                &self.docker,
                progress,
                placement,
                manifest,
                &images,
                &egress,
                early,
            ),
            async {
                match (&wanted_database, early) {
                    (Some(wanted), true) => prepare_database(wanted).await.map(Some),
                    _ => Ok(None),
                }
            }
        );
        let contained = contained?;
        let database_prepared = database_prepared?;
        // Its server after the verdict, before any service (and its migration) needs it.
        let database_changed = match &wanted_database {
            Some(wanted) => {
                let prepared = match database_prepared {
                    Some(prepared) => prepared,
                    None => prepare_database(wanted).await?,
                };
                self.start_database(placement, wanted, prepared, progress)
                    .await?
            }
            None => false,
        };
        let changed =
            std::sync::atomic::AtomicBool::new(contained.sidecar_created || database_changed);
        let starting = Starting {
            docker: &self.docker,
            at: placement,
            progress,
            egress: &egress,
            changed: &changed,
        };
        start_services(starting, manifest, &images, contained.prepared, early).await?;
        if self
            .remove_stale_instances(env, manifest)
            .await
            .map_err(RuntimeError::from)?
        {
            changed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut status = self.status(env).await?;
        status.containment = Some(contained.containment);
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
        let mut applications = Vec::new();
        for container in self.applications(id).await.map_err(RuntimeError::from)? {
            let labels = container.labels.unwrap_or_default();
            let container_name = container
                .names
                .and_then(|n| n.first().cloned())
                .unwrap_or_default();
            // Applied limits, read off the container the daemon runs, not echoed from the manifest.
            let host_config = self
                .docker
                .inspect_container(
                    container_name.trim_start_matches('/'),
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
                .ok()
                .and_then(|c| c.host_config);
            applications.push(ApplicationSeen {
                service: labels.get(SERVICE_LABEL).cloned().unwrap_or_default(),
                wanted: labels
                    .get(REPLICAS_LABEL)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                running: container.state.map(|s| s.to_string()).as_deref() == Some("running"),
                nano_cpus: host_config.as_ref().and_then(|h| h.nano_cpus),
                memory: host_config.as_ref().and_then(|h| h.memory),
            });
        }
        // Each web service's URL, from the port its running ingress publishes.
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
        let mut urls = Vec::new();
        for ingress_container in running {
            let labels = ingress_container.labels.unwrap_or_default();
            let (Some(service), Some(name)) = (
                labels.get(names::INGRESS_LABEL),
                ingress_container.names.and_then(|n| n.first().cloned()),
            ) else {
                continue;
            };
            if let Ok(url) =
                ingress::published(&self.docker, name.trim_start_matches('/'), None).await
            {
                urls.push((service.clone(), url));
            }
        }
        let mut status =
            assemble_status(id, applications, urls, probe::last(&self.docker, id).await);
        status.database = database::status(&self.docker, id)
            .await
            .map_err(RuntimeError::from)?;
        // An environment whose sidecar is gone shows no relay, as it has none.
        if let Ok(relays) = sidecar::relays(&self.docker, id).await {
            status.external_database =
                relays
                    .into_iter()
                    .next()
                    .map(|relay| af_runtime::ExternalDatabaseStatus {
                        host: relay.host,
                        port: relay.port,
                        relay: relay.listen.to_string(),
                        named_by: relay.named_by,
                    });
        }
        Ok(status)
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

    async fn reset_database(&self, id: &EnvironmentId) -> Result<DatabaseStatus, RuntimeError> {
        Ok(database::reset(&self.docker, id).await?)
    }

    async fn database_shell(
        &self,
        id: &EnvironmentId,
        args: &[String],
        input: Vec<u8>,
    ) -> Result<ShellOutput, RuntimeError> {
        Ok(database::shell(&self.docker, id, args, input).await?)
    }

    async fn interactive_database_shell(
        &self,
        id: &EnvironmentId,
        args: &[String],
    ) -> Result<Vec<String>, RuntimeError> {
        Ok(database::interactive_shell(&self.docker, id, args).await?)
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

    fn seen(service: &str, running: bool, nano_cpus: Option<i64>) -> ApplicationSeen {
        ApplicationSeen {
            service: service.into(),
            wanted: 2,
            running,
            nano_cpus,
            memory: Some(0),
        }
    }

    #[test]
    fn status_counts_running_instances_against_their_replicas_and_keeps_urls_of_known_services() {
        let id = EnvironmentId::derive("shop", "main");
        let status = assemble_status(
            &id,
            vec![
                seen("web", true, Some(250_000_000)),
                seen("web", false, None),
                seen("worker", true, Some(0)),
            ],
            vec![
                ("web".into(), "http://127.0.0.1:5000".into()),
                ("gone".into(), "http://127.0.0.1:5001".into()),
            ],
            None,
        );
        let web = &status.services[0];
        assert_eq!((web.name.as_str(), web.ready, web.wanted), ("web", 1, 2));
        assert_eq!(web.applied_cpu_millis, Some(250));
        assert_eq!(web.applied_memory_bytes, None, "0 is no limit");
        assert_eq!(web.urls, ["http://127.0.0.1:5000"]);
        let worker = &status.services[1];
        assert_eq!((worker.ready, worker.applied_cpu_millis), (1, None));
        assert_eq!(
            status.services.len(),
            2,
            "an ingress without instances adds no service"
        );
    }

    #[test]
    fn the_platform_api_is_probed_at_the_gateway_unless_a_target_is_configured() {
        let layout = networks::Layout {
            subnets: vec!["10.213.7.0/24".into(), "fd00::/64".into()],
            gateways: vec!["fd00::1".into(), "10.213.7.1".into()],
        };
        assert_eq!(
            probe_targets(&[], &layout),
            ["--platform-api", "10.213.7.1:2375"]
        );
        let configured = ["--platform-api".to_string(), "192.0.2.9:1".to_string()];
        assert_eq!(probe_targets(&configured, &layout), configured);
    }

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
                Capability::HealthPaths,
                Capability::ContainerDatabase
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
