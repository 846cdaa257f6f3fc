//! The local runtime's harness, on the real Docker daemon. The "outside" is a set of internal
//! networks the harness makes, each with one host at an address chosen to stand for something a
//! workload must not reach (TEST-NET public hosts, 169.254.169.254, a private-range operator host,
//! IPv6 hosts) or may reach only through the sidecar (an HTTP origin). The sidecar of every
//! environment the suite brings up is attached to the "internet" among them; the positive control
//! is a container attached to all of them.

use std::path::{Path, PathBuf};

use af_docker::test_hosts::{HostSpec, OutsideHost, Program};
use af_docker::{LocalRuntime, names, networks, one_shot, sidecar, teardown};
use af_manifest::EnvironmentId;
use af_runtime::Runtime;
use async_trait::async_trait;
use bollard::Docker;

use crate::harness::{Harness, ORIGIN_NAME, OutsideAddresses, REBIND_NAME, RouteOutcome};

/// A deliberate break of a guarantee, for proving the suite notices one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sabotage {
    /// Every service instance is also attached to the public outside network after `up`.
    ServicesOnThePublicNetwork,
}

impl std::fmt::Debug for LocalHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalHarness")
            .field("image", &self.image)
            .field("outside", &self.outside)
            .field("sabotage", &self.sabotage)
            .finish()
    }
}

pub struct LocalHarness {
    docker: Docker,
    runtime: LocalRuntime,
    image: String,
    outside: OutsideAddresses,
    public: OutsideHost,
    operator: OutsideHost,
    origin: OutsideHost,
    others: Vec<OutsideHost>,
    /// Labels the harness's own containers (the positive control's holder).
    own: EnvironmentId,
    control: String,
    scratch: PathBuf,
    listeners: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    sabotage: Option<Sabotage>,
}

fn text(err: impl std::fmt::Display) -> String {
    err.to_string()
}

impl LocalHarness {
    /// Builds the engine image if missing, creates the outside hosts and the control client.
    /// `tag` keeps the harness's objects apart from another harness's.
    pub async fn start(tag: &str) -> Result<LocalHarness, String> {
        let docker = af_docker::connect().await.map_err(text)?;
        let image = af_docker::engine_image::ensure(&docker)
            .await
            .map_err(text)?;
        let host = |name: &str, subnet: &str, program| {
            HostSpec::new(&format!("{tag}-{name}"), subnet, program)
        };
        let public = host("public", "203.0.113.0/24", Program::Server);
        let mut metadata = host("metadata", "169.254.169.0/24", Program::Server);
        metadata.host_number = 254;
        let mut operator = host("operator", "10.214.77.0/24", Program::Server);
        operator.aliases = vec![REBIND_NAME.to_string()];
        let mut global6 = host("v6", "198.18.5.0/24", Program::Server);
        global6.v6 = Some(("2001:db8:5::/64".into(), "10".into()));
        let mut metadata6 = host("metadata6", "192.0.2.0/24", Program::Server);
        metadata6.v6 = Some(("fd00:ec2::/64".into(), "254".into()));
        let mut origin = host("origin", "198.51.100.0/24", Program::Origin);
        origin.aliases = vec![ORIGIN_NAME.to_string()];

        let mut made = Vec::new();
        for spec in [public, metadata, operator, global6, metadata6, origin] {
            match OutsideHost::create(&docker, &image, &spec).await {
                Ok(created) => made.push(created),
                Err(err) => {
                    for host in &made {
                        host.remove(&docker).await;
                    }
                    return Err(err.to_string());
                }
            }
        }
        let [public, metadata, operator, global6, metadata6, origin] =
            <[OutsideHost; 6]>::try_from(made).map_err(|_| "six hosts".to_string())?;
        let outside = OutsideAddresses {
            public: public.ip.clone(),
            metadata: metadata.ip.clone(),
            operator: operator.ip.clone(),
            global_v6: global6.ip6.clone().unwrap_or_default(),
            metadata_v6: metadata6.ip6.clone().unwrap_or_default(),
        };
        // The runtime's own containment probe aims at the same hosts: never at real addresses.
        let targets = [
            ("--public-tcp", format!("{}:3128", outside.public)),
            ("--public-dns", format!("{}:53", outside.public)),
            ("--metadata", format!("{}:3128", outside.metadata)),
            ("--metadata-v6", format!("[{}]:3128", outside.metadata_v6)),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .collect();
        let runtime = LocalRuntime::new(docker.clone(), targets);
        let own = EnvironmentId::derive("afc", &format!("harness-{tag}-{}", std::process::id()));
        let control = one_shot::start_holder(&docker, &own, "control", &image, &public.network)
            .await
            .map_err(text)?;
        for host in [&metadata, &operator, &global6, &metadata6, &origin] {
            host.attach(&docker, &control, &[]).await.map_err(text)?;
        }
        let scratch =
            std::env::temp_dir().join(format!("af-conformance-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).map_err(text)?;
        Ok(LocalHarness {
            docker,
            runtime,
            image,
            outside,
            public,
            operator,
            origin,
            others: vec![metadata, global6, metadata6],
            own,
            control,
            scratch,
            listeners: std::sync::Mutex::new(Vec::new()),
            sabotage: None,
        })
    }

    pub fn with_sabotage(mut self, sabotage: Sabotage) -> LocalHarness {
        self.sabotage = Some(sabotage);
        self
    }

    /// `af-proxy probe` with `routes`, in the network namespace of `holder`; the standard routes
    /// aim at the harness's public host so that nothing is aimed at a real address.
    async fn probe_in(
        &self,
        env: &EnvironmentId,
        holder: &str,
        routes: &[String],
    ) -> Result<Vec<RouteOutcome>, String> {
        let public = &self.outside.public;
        let mut args: Vec<String> = vec!["probe".into(), "--timeout-ms".into(), "1500".into()];
        for (flag, value) in [
            ("--public-tcp", format!("{public}:3128")),
            ("--public-dns", format!("{public}:53")),
            ("--metadata", format!("{}:3128", self.outside.metadata)),
            (
                "--metadata-v6",
                format!("[{}]:3128", self.outside.metadata_v6),
            ),
            ("--platform-api", format!("{public}:2375")),
        ] {
            args.extend([flag.to_string(), value]);
        }
        for route in routes {
            args.extend(["--route".to_string(), route.clone()]);
        }
        let spec = one_shot::OneShot {
            role: "conformance-probe".into(),
            image: self.image.clone(),
            args,
            network_mode: format!("container:{holder}"),
            ..Default::default()
        };
        let finished = one_shot::run(&self.docker, env, &spec)
            .await
            .map_err(text)?;
        let verdict: serde_json::Value =
            serde_json::from_str(finished.stdout.lines().last().unwrap_or_default())
                .map_err(|e| format!("{e}: {}{}", finished.stdout, finished.stderr))?;
        let all: Vec<RouteOutcome> =
            serde_json::from_value(verdict["routes"].clone()).map_err(text)?;
        let asked: Vec<&str> = routes
            .iter()
            .map(|r| r.split('=').next().unwrap_or_default())
            .collect();
        Ok(all
            .into_iter()
            .filter(|r| asked.contains(&r.route.as_str()))
            .collect())
    }

    async fn attach_tolerating_repeats(
        &self,
        host: &OutsideHost,
        container: &str,
    ) -> Result<(), String> {
        match host.attach(&self.docker, container, &[]).await {
            Ok(()) => Ok(()),
            Err(err) if err.to_string().contains("already exists") => Ok(()),
            Err(err) => Err(err.to_string()),
        }
    }
}

#[async_trait]
impl Harness for LocalHarness {
    fn runtime(&self) -> &dyn Runtime {
        &self.runtime
    }

    fn engine_image(&self) -> &str {
        &self.image
    }

    fn outside(&self) -> &OutsideAddresses {
        &self.outside
    }

    fn scratch_dir(&self) -> &Path {
        &self.scratch
    }

    fn origin_address(&self) -> String {
        format!("{}:8080", self.origin.ip)
    }

    async fn try_from_outside(&self, routes: &[String]) -> Result<Vec<RouteOutcome>, String> {
        self.probe_in(&self.own, &self.control, routes).await
    }

    async fn try_in_service(
        &self,
        id: &EnvironmentId,
        service: &str,
        routes: &[String],
    ) -> Result<Vec<RouteOutcome>, String> {
        let holder = names::container(id, &format!("{service}-0-holder"));
        self.probe_in(id, &holder, routes).await
    }

    async fn after_up(&self, id: &EnvironmentId) -> Result<(), String> {
        let sidecar = names::container(id, "sidecar");
        for host in [&self.public, &self.operator, &self.origin] {
            self.attach_tolerating_repeats(host, &sidecar).await?;
        }
        if self.sabotage == Some(Sabotage::ServicesOnThePublicNetwork) {
            let containers = teardown::containers(&self.docker, id).await.map_err(text)?;
            for holder in containers.iter().filter(|c| c.ends_with("-holder")) {
                self.attach_tolerating_repeats(&self.public, holder).await?;
            }
        }
        Ok(())
    }

    async fn plant_foreign(&self, id: &EnvironmentId) -> Result<(), String> {
        self.docker
            .create_network(bollard::models::NetworkCreateRequest {
                name: names::internal_network(id),
                internal: Some(true),
                ..Default::default()
            })
            .await
            .map(drop)
            .map_err(text)
    }

    async fn foreign_present(&self, id: &EnvironmentId) -> Result<bool, String> {
        match self
            .docker
            .inspect_network(
                &names::internal_network(id),
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
        {
            Ok(network) => Ok(!names::is_ours(network.labels.as_ref(), id)),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(err) => Err(err.to_string()),
        }
    }

    async fn remove_foreign(&self, id: &EnvironmentId) -> Result<(), String> {
        self.docker
            .remove_network(&names::internal_network(id))
            .await
            .map_err(text)
    }

    async fn leftovers(&self, id: &EnvironmentId) -> Result<Vec<String>, String> {
        let mut found = teardown::containers(&self.docker, id).await.map_err(text)?;
        found.extend(networks::list(&self.docker, id).await.map_err(text)?);
        found.extend(teardown::volumes(&self.docker, id).await.map_err(text)?);
        Ok(found)
    }

    async fn stop_sidecar(&self, id: &EnvironmentId) -> Result<(), String> {
        self.docker
            .kill_container(
                &names::container(id, "sidecar"),
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .map_err(text)
    }

    async fn service_address(&self, id: &EnvironmentId, service: &str) -> Result<String, String> {
        sidecar::address_on(
            &self.docker,
            &names::container(id, &format!("{service}-0-holder")),
            &names::internal_network(id),
        )
        .await
        .map_err(text)
    }

    async fn control_api(&self, id: &EnvironmentId) -> Result<(String, bool), String> {
        let side = sidecar::find(&self.docker, id).await.map_err(text)?;
        let workload_side = format!("{}:{}", side.internal_ip, sidecar::CONTROL_PORT);
        // The operator's side: the control API answers its health check there.
        let answers = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = tokio::net::TcpStream::connect(&side.control).await.ok()?;
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: c\r\nconnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.ok()?;
            Some(answer.starts_with("HTTP/1.1 200"))
        }
        .await
        .unwrap_or(false);
        Ok((workload_side, answers))
    }

    async fn platform_api(&self, id: &EnvironmentId) -> Result<(String, bool), String> {
        // The host's side of the services' network, where a platform API would listen: a listener
        // of the harness's own there, answered from the host.
        let subnets = networks::subnets(&self.docker, &names::internal_network(id))
            .await
            .map_err(text)?;
        let gateway = subnets
            .iter()
            .find(|s| !s.contains(':'))
            .and_then(|s| sidecar::host_in(s, 1))
            .ok_or("the services' network has no IPv4 gateway")?;
        let listener = match tokio::net::TcpListener::bind((gateway, 0)).await {
            Ok(listener) => listener,
            // Nothing of ours can answer there: the positive control fails, and says where.
            Err(_) => return Ok((format!("{gateway}:2375"), false)),
        };
        let address = listener.local_addr().map_err(text)?;
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });
        self.listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(task);
        let answers = tokio::net::TcpStream::connect(address).await.is_ok();
        Ok((address.to_string(), answers))
    }

    async fn close(&self) {
        for task in self
            .listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
        let _ = teardown::down(&self.docker, &self.own).await;
        for host in [&self.public, &self.operator, &self.origin]
            .into_iter()
            .chain(self.others.iter())
        {
            host.remove(&self.docker).await;
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}
