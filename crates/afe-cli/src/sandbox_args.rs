//! What `afe run` and `afe worker` take to run node kinds in sandboxes: where a sandbox with egress
//! gets out and how its proxy resolves, and the variable the git token is in.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use afe_model::{ClientSettings, ModelClient};
use afe_nodes::{SandboxExecutor, Variables};
use afe_sandbox_docker::{DockerSandbox, DockerSandboxSettings};
use afe_sandbox_kube::{KubeSandbox, KubeSandboxSettings};
use afe_store::Store;
use afe_workspace::Credentials;
use clap::Args;

/// Where sandboxes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Platform {
    /// A volume and containers per ticket on the local Docker daemon.
    Docker,
    /// A Pod and a PVC per ticket in the sandbox namespace of a Kubernetes cluster.
    Kubernetes,
}

#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Where sandboxes run.
    #[arg(long, value_enum, default_value = "docker")]
    sandbox_platform: Platform,
    /// Kubernetes: the kubeconfig context to use. Default: in a Pod, its ServiceAccount; outside,
    /// the kubeconfig's current context. The worker says which at start.
    #[arg(long)]
    kube_context: Option<String>,
    /// Kubernetes: the namespace of the tickets' Pods and PVCs.
    #[arg(long, default_value = "afe-sandbox")]
    sandbox_namespace: String,
    /// Kubernetes: each ticket's volume (a quantity).
    #[arg(long, default_value = "2Gi")]
    sandbox_storage: String,
    /// Kubernetes: the volumes' storage class (default: the cluster's).
    #[arg(long)]
    sandbox_storage_class: Option<String>,
    /// Kubernetes: the Pods' RuntimeClass (runc, the default, or a Kata class; gVisor is refused).
    #[arg(long)]
    sandbox_runtime_class: Option<String>,
    /// Kubernetes: the Secret in the sandbox namespace holding the variables flows name (one key
    /// each); Pods read it by secretKeyRef, this worker never does.
    #[arg(long)]
    sandbox_env_secret: Option<String>,
    /// Kubernetes: how long a new Pod may take to become Ready before it is given up as gone.
    #[arg(long, default_value = "3m", value_parser = humantime::parse_duration)]
    sandbox_ready_timeout: std::time::Duration,
    /// The variable of this process's environment that holds the git token (clone and push; it
    /// never enters a sandbox). Unset: public repositories only.
    #[arg(long, default_value = "AFE_GIT_TOKEN")]
    git_token_env: String,
    /// The user name sent with the token (forges take any; GitHub documents x-access-token).
    #[arg(long, default_value = "x-access-token")]
    git_username: String,
    /// A Docker network a sandbox with egress is attached to: its proxy's way out (repeat for
    /// several). Default: Docker's `bridge`.
    #[arg(long = "sandbox-network", value_name = "NETWORK")]
    sandbox_networks: Vec<String>,
    /// A resolver for sandboxes with egress: the proxy resolves allowed names with it (repeat for
    /// several). Default: the resolvers Docker gives the sandbox.
    #[arg(long = "sandbox-dns", value_name = "IP")]
    sandbox_dns: Vec<IpAddr>,
    /// A fixed answer for the proxy: HOST=IP (repeat for several), asked before any resolver.
    #[arg(long = "sandbox-resolve", value_name = "HOST=IP", value_parser = parse_resolve)]
    sandbox_resolve: Vec<(String, IpAddr)>,
    /// An address or range (CIDR) that is not public and that a sandbox's proxy may still dial
    /// for a name the flow allows — an internal mirror's (repeat for several). Without it an
    /// allowed name is dialled at public addresses only.
    #[arg(long = "sandbox-dialable", value_name = "ADDRESS", value_parser = parse_dialable)]
    sandbox_dialable: Vec<af_manifest::HostRule>,
    /// The engine image (netlock, the proxy). Default: af's own, built from the static af-proxy
    /// when the daemon lacks it.
    #[arg(long, env = "AF_PROXY_IMAGE")]
    engine_image: Option<String>,
}

fn parse_resolve(text: &str) -> Result<(String, IpAddr), String> {
    let (host, ip) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: write HOST=IP"))?;
    let ip = ip
        .parse()
        .map_err(|e| format!("{text:?}: {ip:?} is not an address: {e}"))?;
    Ok((host.to_ascii_lowercase(), ip))
}

fn parse_dialable(text: &str) -> Result<af_manifest::HostRule, String> {
    if text.parse::<IpAddr>().is_err() && !text.contains('/') {
        return Err(format!(
            "{text:?}: write an address or a range (10.1.2.3, 10.1.2.0/24)"
        ));
    }
    af_manifest::parse_host_rule(text).map_err(|why| format!("{text:?}: {why}"))
}

impl SandboxArgs {
    pub fn settings(&self) -> DockerSandboxSettings {
        let mut settings = DockerSandboxSettings {
            engine_image: self.engine_image.clone(),
            dns: self.sandbox_dns.clone(),
            dialable: self.sandbox_dialable.clone(),
            ..DockerSandboxSettings::default()
        };
        if !self.sandbox_networks.is_empty() {
            settings.egress_networks = self.sandbox_networks.clone();
        }
        let mut fixed: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for (host, ip) in &self.sandbox_resolve {
            fixed.entry(host.clone()).or_default().push(*ip);
        }
        settings.resolver.static_hosts = fixed;
        settings
    }

    pub fn credentials(&self) -> Credentials {
        Credentials {
            username: self.git_username.clone(),
            token: std::env::var(&self.git_token_env)
                .ok()
                .filter(|t| !t.is_empty()),
        }
    }

    /// The Kubernetes adapter's settings; the engine image must be named (no image is built in
    /// a cluster).
    pub fn kube_settings(&self) -> Result<KubeSandboxSettings, afe_sandbox::SandboxError> {
        let engine_image = self.engine_image.clone().ok_or_else(|| {
            afe_sandbox::SandboxError::EngineImage {
                detail: "on Kubernetes the engine image is named, not built: pass --engine-image (or AF_PROXY_IMAGE) with an image the nodes have".to_string(),
            }
        })?;
        Ok(KubeSandboxSettings {
            namespace: self.sandbox_namespace.clone(),
            engine_image,
            storage: self.sandbox_storage.clone(),
            storage_class: self.sandbox_storage_class.clone(),
            runtime_class: self.sandbox_runtime_class.clone(),
            env_secret: self.sandbox_env_secret.clone(),
            ready_timeout: self.sandbox_ready_timeout,
            dialable: self.sandbox_dialable.clone(),
            ..KubeSandboxSettings::default()
        })
    }

    /// The executor of a flow's nodes: git, exec, deep and acp in sandboxes of the chosen
    /// platform, model calls from this process.
    pub async fn executor(
        &self,
        store: Arc<dyn Store>,
        worker: &str,
    ) -> Result<SandboxExecutor, ExecutorError> {
        let (sandbox, variables): (Arc<dyn afe_sandbox::Sandbox>, Variables) =
            match self.sandbox_platform {
                Platform::Docker => (
                    Arc::new(
                        DockerSandbox::connect(self.settings())
                            .await
                            .map_err(ExecutorError::Sandbox)?,
                    ),
                    Variables::FromWorker,
                ),
                Platform::Kubernetes => {
                    let settings = self.kube_settings().map_err(ExecutorError::Sandbox)?;
                    let connected = afe_sandbox_kube::connect(self.kube_context.as_deref())
                        .await
                        .map_err(ExecutorError::Sandbox)?;
                    tracing::info!(
                        api = %connected.described,
                        namespace = %settings.namespace,
                        "sandboxes are Pods on Kubernetes"
                    );
                    (
                        Arc::new(KubeSandbox::new(connected.client, settings)),
                        Variables::ByReference,
                    )
                }
            };
        let models = ModelClient::new(ClientSettings::default()).map_err(ExecutorError::Models)?;
        Ok(
            SandboxExecutor::new(sandbox, store, self.credentials(), models, worker)
                .with_variables(variables),
        )
    }
}

/// Why the executor could not be made.
#[derive(Debug)]
pub enum ExecutorError {
    Sandbox(afe_sandbox::SandboxError),
    /// The model client has no certificate authorities to trust.
    Models(std::io::Error),
}

impl std::fmt::Display for ExecutorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecutorError::Sandbox(err) => write!(f, "{err}"),
            ExecutorError::Models(err) => write!(
                f,
                "the model client cannot read this machine's certificate authorities: {err}"
            ),
        }
    }
}

impl ExecutorError {
    pub fn help(&self) -> &'static str {
        match self {
            ExecutorError::Sandbox(err) => err.help(),
            ExecutorError::Models(_) => {
                "install the machine's CA certificates (Debian: ca-certificates) so model providers' TLS can be checked"
            }
        }
    }
}
