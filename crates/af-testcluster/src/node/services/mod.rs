//! The cluster's Services and Endpoints as the node sees them (watched, as kube-proxy watches
//! them), and the ClusterIP routing made of them: [`rules`] renders the chain, this applies it
//! whenever what it says changes. The same view answers the cluster DNS ([`super::dns`]) and the
//! Services' environment variables of new containers.

pub mod rules;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

/// What the node knows of the cluster's Services.
#[derive(Clone)]
pub struct ServiceView {
    pub services: Store<Service>,
    pub endpoints: Store<Endpoints>,
}

impl std::fmt::Debug for ServiceView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceView")
            .field("services", &self.services.state().len())
            .field("endpoints", &self.endpoints.state().len())
            .finish()
    }
}

impl ServiceView {
    pub fn services(&self) -> Vec<Service> {
        self.services
            .state()
            .iter()
            .map(|s| (**s).clone())
            .collect()
    }

    pub fn endpoints(&self) -> Vec<Endpoints> {
        self.endpoints
            .state()
            .iter()
            .map(|e| (**e).clone())
            .collect()
    }
}

/// Watches every Service and Endpoints object, and keeps `chain` (jumped to from the Pod
/// network's traffic) equal to what they say. Returns the view and the task that does it.
pub fn start(client: kube::Client, chain: String) -> (ServiceView, tokio::task::JoinHandle<()>) {
    let changed = Arc::new(Notify::new());
    let (services, services_writer) = reflector::store();
    let (endpoints, endpoints_writer) = reflector::store();
    let view = ServiceView {
        services,
        endpoints,
    };
    let watch_services = {
        let changed = changed.clone();
        reflector::reflector(
            services_writer,
            watcher(
                Api::<Service>::all(client.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff()
        .for_each(move |_| {
            changed.notify_one();
            std::future::ready(())
        })
    };
    let watch_endpoints = {
        let changed = changed.clone();
        reflector::reflector(
            endpoints_writer,
            watcher(Api::<Endpoints>::all(client), watcher::Config::default()),
        )
        .default_backoff()
        .for_each(move |_| {
            changed.notify_one();
            std::future::ready(())
        })
    };
    let applying = {
        let view = view.clone();
        async move {
            let mut applied = String::new();
            loop {
                changed.notified().await;
                let text = rules::restore_input(
                    &chain,
                    &rules::routes(&view.services(), &view.endpoints()),
                );
                if text == applied {
                    continue;
                }
                match restore(&text).await {
                    Ok(()) => applied = text,
                    Err(err) => {
                        tracing::warn!("the node could not apply its Service routes: {err}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        changed.notify_one();
                    }
                }
            }
        }
    };
    let task = tokio::spawn(async move {
        tokio::join!(watch_services, watch_endpoints, applying);
    });
    (view, task)
}

/// `iptables-restore --noflush` of `text`: the chain it declares is replaced, nothing else.
async fn restore(text: &str) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("iptables-restore")
        .arg("--noflush")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("iptables-restore: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("iptables-restore has no stdin")?;
    stdin
        .write_all(text.as_bytes())
        .await
        .map_err(|e| format!("writing to iptables-restore: {e}"))?;
    drop(stdin);
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| format!("iptables-restore: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables-restore: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Runs `iptables ARGS`.
pub async fn iptables(args: &[&str]) -> Result<(), String> {
    let output = tokio::process::Command::new("iptables")
        .args(args)
        .output()
        .await
        .map_err(|e| format!("iptables: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The chain, and the jump to it for packets coming in from the Pod network's bridge.
pub async fn install(chain: &str, bridge: &str) -> Result<(), String> {
    if iptables(&["-t", "nat", "-S", chain]).await.is_err() {
        iptables(&["-t", "nat", "-N", chain]).await?;
    }
    let jump = ["-t", "nat", "-C", "PREROUTING", "-i", bridge, "-j", chain];
    if iptables(&jump).await.is_err() {
        iptables(&["-t", "nat", "-I", "PREROUTING", "-i", bridge, "-j", chain]).await?;
    }
    Ok(())
}

/// The jump and the chain gone.
pub async fn uninstall(chain: &str, bridge: &str) {
    let _ = iptables(&["-t", "nat", "-D", "PREROUTING", "-i", bridge, "-j", chain]).await;
    let _ = iptables(&["-t", "nat", "-F", chain]).await;
    let _ = iptables(&["-t", "nat", "-X", chain]).await;
}
