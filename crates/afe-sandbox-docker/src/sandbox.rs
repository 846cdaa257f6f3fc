//! The Sandbox port on the local Docker daemon: the plan's bodies sent in the pod's order — volume,
//! holder, netlock (verified before anything else is made), proxy, sandbox — and every command,
//! file and marker through an exec as the sandbox's user.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use af_sidecar_api::config::{CONTROL_PORT, ResolverConfig};
use af_sidecar_api::control_client;
use af_sidecar_api::records::{DecisionQuery, DecisionRecord};
use afe_sandbox::{
    Attached, ExecOutput, ExecRequest, Existing, Marker, OpenAction, Opened, OutputChunk, Payload,
    Sandbox, SandboxError, SandboxSpec, inside, labels, workspace,
};
use async_trait::async_trait;
use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, ListVolumesOptions,
    RemoveContainerOptions, RemoveVolumeOptions,
};

use crate::exec::{self, Command};
use crate::plan::{self, Egress, Names, Role};

/// How a machine's Docker sandboxes are made.
#[derive(Clone, Debug)]
pub struct DockerSandboxSettings {
    /// The engine image (netlock, the proxy); none: af's own, built from the static `af-proxy`
    /// when the daemon does not have it (`AF_PROXY_IMAGE` names another).
    pub engine_image: Option<String>,
    /// The networks a sandbox with egress is attached to: its proxy's way out. Docker's default
    /// `bridge` has no embedded resolver and copies the machine's upstream resolvers.
    pub egress_networks: Vec<String>,
    /// Resolvers for the holder's resolv.conf (and the proxy, when `resolver` names none).
    pub dns: Vec<IpAddr>,
    /// How the proxy resolves allowed names: fixed answers first, then its nameservers.
    pub resolver: ResolverConfig,
    /// Addresses or ranges that are not public and that the proxy may still dial for a name a
    /// flow allows (an internal mirror's). None by default: an allowed name is dialled at public
    /// addresses only.
    pub dialable: Vec<af_manifest::HostRule>,
    /// How long a sandbox may take to become ready before it is declared gone.
    pub ready_timeout: Duration,
    /// The most processes a sandbox may run at once (a fork bomb stops there).
    pub pids_limit: i64,
}

impl Default for DockerSandboxSettings {
    fn default() -> DockerSandboxSettings {
        DockerSandboxSettings {
            engine_image: None,
            egress_networks: vec!["bridge".to_string()],
            dns: Vec::new(),
            resolver: ResolverConfig::default(),
            dialable: Vec::new(),
            ready_timeout: Duration::from_secs(60),
            pids_limit: 4096,
        }
    }
}

/// Every ticket's sandbox on one Docker daemon.
#[derive(Debug)]
pub struct DockerSandbox {
    docker: Docker,
    settings: DockerSandboxSettings,
    engine_image: tokio::sync::OnceCell<String>,
}

/// The most a `get` returns: a workspace bundle of a large repository fits.
const GET_LIMIT: usize = 2 << 30;

fn platform(operation: impl Into<String>, err: impl std::fmt::Display) -> SandboxError {
    SandboxError::Platform {
        operation: operation.into(),
        detail: err.to_string(),
    }
}

fn is_status(err: &bollard::errors::Error, status: u16) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { status_code, .. } if *status_code == status)
}

/// What exists of a ticket's sandbox: each container's role, whether it runs, its signature.
#[derive(Debug, Default)]
struct Found {
    containers: HashMap<Role, (bool, String)>,
}

impl DockerSandbox {
    /// Connects to the local daemon.
    pub async fn connect(settings: DockerSandboxSettings) -> Result<DockerSandbox, SandboxError> {
        let docker = af_docker::connect()
            .await
            .map_err(|e| platform("connecting to the Docker daemon", e))?;
        Ok(DockerSandbox::with_docker(docker, settings))
    }

    pub fn with_docker(docker: Docker, settings: DockerSandboxSettings) -> DockerSandbox {
        DockerSandbox {
            docker,
            settings,
            engine_image: tokio::sync::OnceCell::new(),
        }
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    async fn engine_image(&self) -> Result<&str, SandboxError> {
        self.engine_image
            .get_or_try_init(|| async {
                match &self.settings.engine_image {
                    Some(image) => match self.docker.inspect_image(image).await {
                        Ok(_) => Ok(image.clone()),
                        Err(err) => Err(SandboxError::EngineImage {
                            detail: format!("{image} is not on the daemon: {err}"),
                        }),
                    },
                    None => af_docker::engine_image::ensure(&self.docker)
                        .await
                        .map_err(|e| SandboxError::EngineImage {
                            detail: e.to_string(),
                        }),
                }
            })
            .await
            .map(String::as_str)
    }

    /// The ticket's containers, running or not, found by their labels.
    async fn containers_of(
        &self,
        ticket: &str,
    ) -> Result<Vec<bollard::models::ContainerSummary>, SandboxError> {
        self.docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(ticket_filter(ticket)),
                ..Default::default()
            }))
            .await
            .map_err(|e| platform(format!("listing the sandbox of ticket {ticket}"), e))
    }

    /// The ticket's objects, found by their labels.
    async fn find(&self, ticket: &str) -> Result<Found, SandboxError> {
        let listed = self.containers_of(ticket).await?;
        let mut found = Found::default();
        for container in listed {
            let labels = container.labels.unwrap_or_default();
            let Some(role) = labels.get(labels::ROLE).and_then(|r| Role::parse(r)) else {
                continue;
            };
            let running = container.state.map(|s| s.to_string()).as_deref() == Some("running");
            let signature = labels.get(labels::SIGNATURE).cloned().unwrap_or_default();
            found.containers.insert(role, (running, signature));
        }
        Ok(found)
    }

    async fn inspect_labels(&self, name: &str) -> Option<HashMap<String, String>> {
        self.docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
            .ok()?
            .config?
            .labels
    }

    /// The engine binary inside an engine container: its entrypoint, wherever an image keeps it.
    async fn engine_command(
        &self,
        container: &str,
        args: Vec<String>,
    ) -> Result<Vec<String>, SandboxError> {
        let mut command = self
            .docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .map_err(|e| platform(format!("inspecting {container}"), e))?
            .config
            .and_then(|c| c.entrypoint)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| {
                platform(
                    format!("inspecting {container}"),
                    "it has no entrypoint: not an engine image",
                )
            })?;
        command.extend(args);
        Ok(command)
    }

    /// Makes the whole sandbox; what was made is removed again when a step fails.
    async fn create(&self, spec: &SandboxSpec, signature: &str) -> Result<(), SandboxError> {
        let made = self.create_steps(spec, signature).await;
        if made.is_err() {
            let _ = self.remove(&spec.ticket).await;
        }
        made
    }

    /// The pod's order: the holder starts and locks its namespace first; the proxy and the
    /// sandbox, created meanwhile, start only once the lock is read back and verified.
    async fn create_steps(&self, spec: &SandboxSpec, signature: &str) -> Result<(), SandboxError> {
        let ticket = &spec.ticket;
        let names = Names::of(ticket);
        let engine = self.engine_image().await?.to_string();
        let egress = spec.has_egress().then(|| Egress {
            networks: self.settings.egress_networks.clone(),
            dns: self.settings.dns.clone(),
        });
        self.docker
            .create_volume(plan::volume(ticket, signature))
            .await
            .map_err(|e| platform(format!("creating volume {}", names.volume), e))?;
        let holder = plan::holder(ticket, signature, &engine, egress.as_ref());
        self.create_container_only(ticket, &names.holder, holder)
            .await?;
        for network in plan::more_networks(egress.as_ref()) {
            self.docker
                .connect_network(
                    &network,
                    bollard::models::NetworkConnectRequest {
                        container: names.holder.clone(),
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| platform(format!("attaching {} to {network}", names.holder), e))?;
        }
        self.start(&names.holder).await?;
        let proxy = match &egress {
            Some(egress) => {
                let token = af_sidecar_api::new_control_token()
                    .map_err(|e| platform("making the proxy's control token", e))?;
                let config = plan::proxy_config(
                    spec,
                    token,
                    &self.settings.resolver,
                    &egress.dns,
                    &self.settings.dialable,
                );
                let text = config.to_text().map_err(|e| SandboxError::Containment {
                    ticket: ticket.clone(),
                    why: e.to_string(),
                })?;
                Some(plan::proxy(ticket, signature, &engine, &text))
            }
            None => None,
        };
        let create_proxy = async {
            match proxy {
                Some(body) => self.create_container_only(ticket, &names.proxy, body).await,
                None => Ok(()),
            }
        };
        let create_sandbox = self.create_container_only(
            ticket,
            &names.sandbox,
            plan::sandbox(spec, signature, self.settings.pids_limit),
        );
        tokio::try_join!(
            self.read_lock(ticket, &names.holder),
            create_proxy,
            create_sandbox
        )?;
        let start_proxy = async {
            match &egress {
                Some(_) => self.start(&names.proxy).await,
                None => Ok(()),
            }
        };
        tokio::try_join!(start_proxy, self.start(&names.sandbox))?;
        Ok(())
    }

    async fn start(&self, name: &str) -> Result<(), SandboxError> {
        self.docker
            .start_container(
                name,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| platform(format!("starting container {name}"), e))
    }

    /// Creates container `name` from `body`. A container of that name that is not afe's is refused
    /// and left alone; an image that is not on the daemon is the flow's to fix (nothing is pulled).
    async fn create_container_only(
        &self,
        ticket: &str,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<(), SandboxError> {
        let image = body.image.clone().unwrap_or_default();
        match self
            .docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.to_string()),
                    ..Default::default()
                }),
                body,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if is_status(&err, 409) => Err(match self.inspect_labels(name).await {
                Some(found) if plan::is_ours(Some(&found), ticket) => {
                    platform(format!("creating container {name}"), err)
                }
                _ => SandboxError::NotOurs {
                    kind: "container".to_string(),
                    name: name.to_string(),
                },
            }),
            Err(err) if is_status(&err, 404) => Err(SandboxError::Image {
                image,
                detail: err.to_string(),
            }),
            Err(err) => Err(platform(format!("creating container {name}"), err)),
        }
    }

    /// The holder's first words: netlock's report, printed before anything could join its
    /// namespace. Anything but a verified lock of both families — or a holder that stopped, or
    /// said nothing within the ready timeout — is a containment failure.
    async fn read_lock(&self, ticket: &str, holder: &str) -> Result<(), SandboxError> {
        use futures_util::StreamExt;
        let mut logs = self.docker.logs(
            holder,
            Some(bollard::query_parameters::LogsOptions {
                follow: true,
                stdout: true,
                stderr: true,
                ..Default::default()
            }),
        );
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let first_line = async {
            while let Some(Ok(piece)) = logs.next().await {
                match piece {
                    bollard::container::LogOutput::StdOut { message } => {
                        stdout.extend_from_slice(&message);
                        if stdout.contains(&b'\n') {
                            return;
                        }
                    }
                    other => stderr.extend_from_slice(&other.into_bytes()),
                }
            }
        };
        let timeout = self.settings.ready_timeout;
        let read = tokio::time::timeout(timeout, first_line).await.is_ok();
        let refused = |why: String| SandboxError::Containment {
            ticket: ticket.to_string(),
            why,
        };
        if !read {
            return Err(refused(format!(
                "the holder reported no lock within {} s",
                timeout.as_secs()
            )));
        }
        let line = stdout.split(|b| *b == b'\n').next().unwrap_or_default();
        let report: serde_json::Value =
            serde_json::from_slice(line).unwrap_or(serde_json::Value::Null);
        if !plan::lock_verified(&report) {
            return Err(refused(format!(
                "netlock did not lock the namespace: {}{}",
                String::from_utf8_lossy(line).trim(),
                String::from_utf8_lossy(&stderr).trim()
            )));
        }
        Ok(())
    }

    /// The directory `request` runs in, confined to the workspace, once its variables' names are
    /// checked.
    fn checked_workdir(&self, request: &ExecRequest) -> Result<String, SandboxError> {
        for (name, _) in &request.env {
            if !af_manifest::is_env_name(name) {
                return Err(SandboxError::VariableRefused {
                    name: name.clone(),
                    why: "not a variable name".to_string(),
                });
            }
        }
        Ok(match &request.workdir {
            Some(dir) => workspace::confine(dir)?,
            None => workspace::REPO.to_string(),
        })
    }

    fn sandbox_command<'a>(
        &self,
        sandbox: &'a Opened,
        argv: Vec<String>,
        stdin: Option<&'a [u8]>,
        output_limit: usize,
    ) -> Command<'a> {
        Command {
            container: &sandbox.id,
            user: plan::SANDBOX_USER,
            argv,
            env: Vec::new(),
            workdir: Some(workspace::ROOT),
            stdin,
            output_limit,
        }
    }

    /// A short command of the adapter's own in the sandbox; its failure says `operation`.
    async fn run_own(
        &self,
        sandbox: &Opened,
        command: Command<'_>,
        operation: &str,
    ) -> Result<ExecOutput, SandboxError> {
        exec::run(&self.docker, &command, &mut |_| {})
            .await
            .map_err(|e| e.into_error(&sandbox.ticket, operation))
    }

    /// The marker a reaper reads: the file the engine last wrote, if any.
    pub async fn read_marker(&self, sandbox: &Opened) -> Result<Option<Marker>, SandboxError> {
        let command = Command {
            user: "0",
            ..self.sandbox_command(
                sandbox,
                vec!["cat".to_string(), plan::MARKER_FILE.to_string()],
                None,
                64 << 10,
            )
        };
        let read = self
            .run_own(sandbox, command, "reading the lifecycle marker")
            .await?;
        Ok(read
            .succeeded()
            .then(|| serde_json::from_slice(&read.stdout.bytes).ok())
            .flatten())
    }

    /// A proxy that stopped will never listen: its last words, as a containment failure.
    async fn proxy_stopped(&self, sandbox: &Opened) -> Result<(), SandboxError> {
        let names = Names::of(&sandbox.ticket);
        match exec::container_runs(&self.docker, &names.proxy).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(SandboxError::Containment {
                ticket: sandbox.ticket.clone(),
                why: format!("the proxy exited: {}", self.last_lines(&names.proxy).await),
            }),
            Err(e) => Err(e.into_error(&sandbox.ticket, "inspecting the proxy")),
        }
    }

    async fn last_lines(&self, container: &str) -> String {
        use futures_util::StreamExt;
        let mut logs = self.docker.logs(
            container,
            Some(bollard::query_parameters::LogsOptions {
                stdout: true,
                stderr: true,
                tail: "10".to_string(),
                ..Default::default()
            }),
        );
        let mut text = String::new();
        while let Some(Ok(line)) = logs.next().await {
            text.push_str(&line.to_string());
        }
        text.trim().to_string()
    }

    /// One request to the proxy's control API, through `af-proxy connect` in the proxy's
    /// container: the worker never needs a route into the sandbox's network.
    async fn control(
        &self,
        sandbox: &Opened,
        method: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<String, SandboxError> {
        let names = Names::of(&sandbox.ticket);
        let operation = format!("{method} {path} on the sandbox's proxy");
        let inspected = self
            .docker
            .inspect_container(&names.proxy, None::<InspectContainerOptions>)
            .await
            .map_err(|e| exec::classify(e).into_error(&sandbox.ticket, &operation))?;
        let config_text = inspected
            .config
            .as_ref()
            .and_then(|c| c.env.as_ref())
            .and_then(|env| {
                env.iter()
                    .find_map(|e| e.strip_prefix("AF_PROXY_CONFIG_TEXT="))
            })
            .ok_or_else(|| platform(&operation, "the proxy has no configuration"))?;
        let token = af_sidecar_api::SidecarConfig::from_text(config_text)
            .ok()
            .and_then(|c| c.inline_token().map(str::to_string))
            .ok_or_else(|| platform(&operation, "the proxy's configuration has no token"))?;
        let argv = self
            .engine_command(
                &names.proxy,
                vec!["connect".to_string(), format!("127.0.0.1:{CONTROL_PORT}")],
            )
            .await?;
        let stream = exec::duplex(
            &self.docker,
            &Command {
                container: &names.proxy,
                user: &format!("{}", plan::PROXY_UID),
                argv,
                env: Vec::new(),
                workdir: None,
                stdin: Some(&[]),
                output_limit: 0,
            },
        )
        .await
        .map_err(|e| e.into_error(&sandbox.ticket, &operation))?;
        control_client::request_within(stream, &token, method, path, "", timeout)
            .await
            .map(|(_, body)| body)
            .map_err(|e| platform(&operation, e))
    }
}

/// The label filter of a ticket's objects: both of afe's labels.
fn ticket_filter(ticket: &str) -> HashMap<String, Vec<String>> {
    HashMap::from([(
        "label".to_string(),
        vec![
            format!("{}={ticket}", labels::TICKET),
            format!("{}={}", labels::MANAGED_BY.0, labels::MANAGED_BY.1),
        ],
    )])
}

/// The port's view of what was found.
fn existing(found: &Found, wants_proxy: bool) -> Option<Existing> {
    let (sandbox_runs, signature) = found.containers.get(&Role::Sandbox)?;
    let runs = |role| found.containers.get(&role).is_some_and(|(r, _)| *r);
    Some(Existing {
        signature: signature.clone(),
        running: *sandbox_runs && runs(Role::Net) && (!wants_proxy || runs(Role::Proxy)),
    })
}

#[async_trait]
impl Sandbox for DockerSandbox {
    async fn open(&self, spec: &SandboxSpec) -> Result<Opened, SandboxError> {
        if !plan::is_ticket_name(&spec.ticket) {
            return Err(platform(
                "opening a sandbox",
                format!(
                    "{:?} cannot name Docker objects (lowercase letters, digits and -, at most 63)",
                    spec.ticket
                ),
            ));
        }
        let signature = spec.signature();
        let found = self.find(&spec.ticket).await?;
        let action = afe_sandbox::decide(existing(&found, spec.has_egress()).as_ref(), &signature);
        let fresh = match action {
            OpenAction::Reuse => false,
            OpenAction::Recreate => {
                self.remove(&spec.ticket).await?;
                self.create(spec, &signature).await?;
                true
            }
            OpenAction::Create => {
                // Pieces of a create cut short go first — a volume among them: Docker would hand
                // it back as it is, and a new sandbox starts with an empty workspace.
                self.remove(&spec.ticket).await?;
                self.create(spec, &signature).await?;
                true
            }
        };
        Ok(Opened {
            ticket: spec.ticket.clone(),
            id: Names::of(&spec.ticket).sandbox,
            fresh,
        })
    }

    async fn wait_ready(&self, sandbox: &Opened) -> Result<(), SandboxError> {
        let names = Names::of(&sandbox.ticket);
        let has_proxy = self
            .find(&sandbox.ticket)
            .await?
            .containers
            .contains_key(&Role::Proxy);
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        let check = plan::ready_check(has_proxy);
        let mut last = String::from("it never ran a command");
        while tokio::time::Instant::now() < deadline {
            let ran = self
                .run_own(
                    sandbox,
                    self.sandbox_command(sandbox, check.clone(), None, 1024),
                    "checking the sandbox",
                )
                .await;
            match ran {
                Ok(ran) if ran.succeeded() => return Ok(()),
                Ok(_) => {
                    if has_proxy {
                        self.proxy_stopped(sandbox).await?;
                    }
                    last = "its workspace folders were not made, or its proxy did not listen, yet"
                        .to_string();
                }
                Err(err) if err.is_gone() => {
                    return Err(SandboxError::Gone {
                        ticket: sandbox.ticket.clone(),
                        why: format!(
                            "it stopped before it was ready: {}",
                            self.last_lines(&names.sandbox).await
                        ),
                    });
                }
                Err(err) => return Err(err),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(SandboxError::Gone {
            ticket: sandbox.ticket.clone(),
            why: format!(
                "not ready within {} s: {last}",
                self.settings.ready_timeout.as_secs()
            ),
        })
    }

    async fn exec(
        &self,
        sandbox: &Opened,
        request: &ExecRequest,
        on_output: &mut (dyn for<'c> FnMut(&'c OutputChunk) + Send),
    ) -> Result<ExecOutput, SandboxError> {
        let workdir = self.checked_workdir(request)?;
        let command = Command {
            env: env_pairs(request),
            workdir: Some(&workdir),
            ..self.sandbox_command(
                sandbox,
                request.argv.clone(),
                request.stdin.as_deref(),
                request.output_limit,
            )
        };
        exec::run(&self.docker, &command, on_output)
            .await
            .map_err(|e| e.into_error(&sandbox.ticket, "running a command in the sandbox"))
    }

    async fn attach(
        &self,
        sandbox: &Opened,
        request: &ExecRequest,
    ) -> Result<Attached, SandboxError> {
        let workdir = self.checked_workdir(request)?;
        let command = Command {
            env: env_pairs(request),
            workdir: Some(&workdir),
            ..self.sandbox_command(sandbox, request.argv.clone(), None, request.output_limit)
        };
        exec::attach(&self.docker, &command, &sandbox.ticket)
            .await
            .map_err(|e| e.into_error(&sandbox.ticket, "starting a command in the sandbox"))
    }

    async fn put(
        &self,
        sandbox: &Opened,
        path: &str,
        payload: Payload,
    ) -> Result<(), SandboxError> {
        let path = workspace::confine(path)?;
        let (argv, bytes) = inside::put_command(&path, &payload);
        let ran = self
            .run_own(
                sandbox,
                self.sandbox_command(sandbox, argv, Some(bytes), 64 << 10),
                "writing into the sandbox",
            )
            .await?;
        inside::put_outcome(path, &ran)
    }

    async fn get(&self, sandbox: &Opened, path: &str, tar: bool) -> Result<Payload, SandboxError> {
        let path = workspace::confine(path)?;
        let ran = self
            .run_own(
                sandbox,
                self.sandbox_command(sandbox, inside::get_command(&path, tar), None, GET_LIMIT),
                "reading from the sandbox",
            )
            .await?;
        inside::get_outcome(path, ran, tar, GET_LIMIT)
    }

    async fn mark(&self, sandbox: &Opened, marker: &Marker) -> Result<(), SandboxError> {
        let text = serde_json::to_vec(marker).map_err(|e| platform("writing the marker", e))?;
        let script = format!("cat > {0}.new && mv {0}.new {0}", plan::MARKER_FILE);
        // As root, with no capability: the directory is root's, so the ticket's user cannot.
        let command = Command {
            user: "0",
            ..self.sandbox_command(
                sandbox,
                vec!["sh".to_string(), "-c".to_string(), script],
                Some(&text),
                64 << 10,
            )
        };
        let ran = self
            .run_own(sandbox, command, "writing the lifecycle marker")
            .await?;
        if !ran.succeeded() {
            return Err(platform(
                "writing the lifecycle marker",
                ran.stderr.text().trim(),
            ));
        }
        Ok(())
    }

    async fn egress_decisions(
        &self,
        sandbox: &Opened,
        since: Option<&str>,
    ) -> Result<Vec<DecisionRecord>, SandboxError> {
        let found = self.find(&sandbox.ticket).await?;
        if !found.containers.contains_key(&Role::Proxy) {
            return Ok(Vec::new());
        }
        let path = control_client::decisions_path(&DecisionQuery {
            since: since.map(str::to_string),
            ..DecisionQuery::default()
        });
        let body = self
            .control(sandbox, "GET", &path, control_client::REQUEST_TIMEOUT)
            .await?;
        control_client::read_decisions(&body)
            .map_err(|e| platform("reading the proxy's decisions", e))
    }

    async fn opened(&self, ticket: &str) -> Result<Option<Opened>, SandboxError> {
        let found = self.find(ticket).await?;
        Ok(found
            .containers
            .get(&Role::Sandbox)
            .filter(|(running, _)| *running)
            .map(|_| Opened {
                ticket: ticket.to_string(),
                id: Names::of(ticket).sandbox,
                fresh: false,
            }))
    }

    async fn remove(&self, ticket: &str) -> Result<(), SandboxError> {
        let listed = self.containers_of(ticket).await?;
        // The containers that join the holder's namespace go before the holder.
        let mut containers: Vec<(u8, String)> = listed
            .into_iter()
            .filter_map(|c| {
                let role = c.labels.as_ref()?.get(labels::ROLE).cloned();
                let order = u8::from(role.as_deref() == Some(Role::Net.as_str()));
                Some((order, c.id?))
            })
            .collect();
        containers.sort();
        for (_, id) in containers {
            match self
                .docker
                .remove_container(
                    &id,
                    Some(RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    }),
                )
                .await
            {
                Ok(()) => {}
                Err(err) if is_status(&err, 404) => {}
                Err(err) => return Err(platform(format!("removing container {id}"), err)),
            }
        }
        let volumes = self
            .docker
            .list_volumes(Some(ListVolumesOptions {
                filters: Some(ticket_filter(ticket)),
            }))
            .await
            .map_err(|e| platform(format!("listing the volumes of ticket {ticket}"), e))?;
        for volume in volumes.volumes.unwrap_or_default() {
            match self
                .docker
                .remove_volume(&volume.name, None::<RemoveVolumeOptions>)
                .await
            {
                Ok(()) => {}
                Err(err) if is_status(&err, 404) => {}
                Err(err) => {
                    return Err(platform(format!("removing volume {}", volume.name), err));
                }
            }
        }
        Ok(())
    }
}

/// A request's variables as the Engine API takes them.
fn env_pairs(request: &ExecRequest) -> Vec<String> {
    request
        .env
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect()
}
