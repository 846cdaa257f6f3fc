//! How the worker reaches the API server, said out loud at start (seed 000: "the context nobody
//! checked"): inside a cluster, with the Pod's ServiceAccount; outside, with a kubeconfig
//! context — the one named, or the kubeconfig's current one.

use afe_sandbox::SandboxError;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

/// A client and the words that say what it talks to.
#[derive(Clone)]
pub struct Connected {
    pub client: kube::Client,
    /// `kubeconfig context "kind-afe" (https://127.0.0.1:6443)`, or the in-cluster account.
    pub described: String,
    /// The kubeconfig context, when one was used.
    pub context: Option<String>,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.described)
    }
}

fn refused(how: &str, err: impl std::fmt::Display) -> SandboxError {
    SandboxError::Platform {
        operation: format!("connecting to the Kubernetes API ({how})"),
        detail: err.to_string(),
    }
}

/// Connects with `context` from the kubeconfig when named; otherwise in-cluster when this
/// process runs in a Pod (`KUBERNETES_SERVICE_HOST`), else the kubeconfig's current context.
pub async fn connect(context: Option<&str>) -> Result<Connected, SandboxError> {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let (config, described, context) = match context {
        None if in_cluster => {
            let config = Config::incluster().map_err(|e| refused("in-cluster", e))?;
            let described = format!(
                "the Pod's ServiceAccount, in cluster ({})",
                config.cluster_url
            );
            (config, described, None)
        }
        named => {
            let current = Kubeconfig::read()
                .ok()
                .and_then(|k| k.current_context)
                .unwrap_or_default();
            let context = named.map(str::to_string).unwrap_or(current);
            let options = KubeConfigOptions {
                context: Some(context.clone()).filter(|c| !c.is_empty()),
                ..KubeConfigOptions::default()
            };
            let config = Config::from_kubeconfig(&options)
                .await
                .map_err(|e| refused(&format!("kubeconfig context {context:?}"), e))?;
            let described = format!("kubeconfig context {context:?} ({})", config.cluster_url);
            (config, described, Some(context))
        }
    };
    let client = client_of(config).map_err(|e| refused(&described, e))?;
    Ok(Connected {
        client,
        described,
        context,
    })
}

/// A client for `config`. The process may link two TLS providers (the workspace's dependencies
/// bring both); ring is chosen, as every other client of afe's does.
pub fn client_of(config: Config) -> Result<kube::Client, kube::Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    kube::Client::try_from(config)
}
