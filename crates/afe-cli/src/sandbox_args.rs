//! What `afe run` and `afe worker` take to run node kinds in sandboxes: where a sandbox with egress
//! gets out and how its proxy resolves, and the variable the git token is in.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use afe_model::{ClientSettings, ModelClient};
use afe_nodes::SandboxExecutor;
use afe_sandbox_docker::{DockerSandbox, DockerSandboxSettings};
use afe_store::Store;
use afe_workspace::Credentials;
use clap::Args;

#[derive(Debug, Args)]
pub struct SandboxArgs {
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

    /// The executor of a flow's nodes: git, exec and deep in Docker sandboxes, model calls from
    /// this process.
    pub async fn executor(
        &self,
        store: Arc<dyn Store>,
        worker: &str,
    ) -> Result<SandboxExecutor, ExecutorError> {
        let sandbox = DockerSandbox::connect(self.settings())
            .await
            .map_err(ExecutorError::Sandbox)?;
        let models = ModelClient::new(ClientSettings::default()).map_err(ExecutorError::Models)?;
        Ok(SandboxExecutor::new(
            Arc::new(sandbox),
            store,
            self.credentials(),
            models,
            worker,
        ))
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
