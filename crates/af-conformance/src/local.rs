//! The local runtime's harness, on the real Docker daemon, with the [`Outside`] hosts. The sidecar
//! of every environment the suite brings up is attached to the "internet" among them.

use std::path::{Path, PathBuf};

use af_docker::test_hosts::OutsideHost;
use af_docker::{LocalRuntime, names, networks, sidecar, teardown};
use af_manifest::EnvironmentId;
use af_runtime::Runtime;
use async_trait::async_trait;
use bollard::Docker;

use crate::harness::{Harness, RouteOutcome};
use crate::outside::{Outside, probe_in_container};
use crate::text;

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
            .field("outside", &self.outside.addresses)
            .field("sabotage", &self.sabotage)
            .finish()
    }
}

pub struct LocalHarness {
    docker: Docker,
    runtime: LocalRuntime,
    image: String,
    outside: Outside,
    scratch: PathBuf,
    listeners: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    sabotage: Option<Sabotage>,
}

impl LocalHarness {
    /// Builds the engine image if missing, creates the outside hosts and the control client.
    /// `tag` keeps the harness's objects apart from another harness's.
    pub async fn start(tag: &str) -> Result<LocalHarness, String> {
        let docker = af_docker::connect().await.map_err(text)?;
        let image = af_docker::engine_image::ensure(&docker)
            .await
            .map_err(text)?;
        let outside = Outside::create(&docker, &image, tag).await?;
        let runtime =
            LocalRuntime::new(docker.clone(), outside.probe_targets()).with_variables(|name| {
                if name == crate::harness::EXTERNAL_DATABASE_VARIABLE {
                    Some(crate::harness::EXTERNAL_DATABASE_URL.to_string())
                } else {
                    std::env::var(name).ok()
                }
            });
        let scratch =
            std::env::temp_dir().join(format!("af-conformance-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).map_err(text)?;
        Ok(LocalHarness {
            docker,
            runtime,
            image,
            outside,
            scratch,
            listeners: std::sync::Mutex::new(Vec::new()),
            sabotage: None,
        })
    }

    pub fn with_sabotage(mut self, sabotage: Sabotage) -> LocalHarness {
        self.sabotage = Some(sabotage);
        self
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
        let holder = names::container(id, &format!("{service}-0-holder"));
        probe_in_container(
            &self.docker,
            &self.image,
            id,
            &holder,
            &self.outside.addresses,
            routes,
        )
        .await
    }

    async fn after_up(&self, id: &EnvironmentId) -> Result<(), String> {
        let sidecar = names::container(id, "sidecar");
        for host in [
            &self.outside.public,
            &self.outside.operator,
            &self.outside.origin,
        ] {
            self.attach_tolerating_repeats(host, &sidecar).await?;
        }
        if self.sabotage == Some(Sabotage::ServicesOnThePublicNetwork) {
            let containers = teardown::containers(&self.docker, id).await.map_err(text)?;
            for holder in containers.iter().filter(|c| c.ends_with("-holder")) {
                self.attach_tolerating_repeats(&self.outside.public, holder)
                    .await?;
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

    /// `AF_DB_IMAGE`, as the tests take it, or af's own image (`scripts/build-db-image`).
    fn database_image(&self) -> Option<String> {
        Some(std::env::var("AF_DB_IMAGE").unwrap_or_else(|_| "af-postgres:latest".to_string()))
    }

    async fn database_address(&self, id: &EnvironmentId) -> Result<String, String> {
        sidecar::address_on(
            &self.docker,
            &af_docker::plan::database::holder_name(id),
            &names::internal_network(id),
        )
        .await
        .map_err(text)
    }

    async fn database_arrivals(&self, id: &EnvironmentId) -> Result<Vec<String>, String> {
        Ok(af_docker::database::arrivals(&self.docker, id).await)
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
        self.outside.remove().await;
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}
