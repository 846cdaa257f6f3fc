//! The Pods bound to the node: watched as a kubelet watches them (`spec.nodeName` of this node),
//! each run by a [`runner`] of its own that is told every new version of it and when it is gone.

pub mod admit;
pub mod create;
pub mod env;
pub mod probes;
pub mod runner;
pub mod status;
pub mod volumes;

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use super::Shared;

/// Watches the node's Pods and runs each; never returns.
pub async fn supervise(shared: Arc<Shared>) {
    let pods: Api<Pod> = Api::all(shared.client.clone());
    let config =
        watcher::Config::default().fields(&format!("spec.nodeName={}", shared.config.name));
    let mut events = watcher::watcher(pods, config).default_backoff().boxed();
    let mut running: HashMap<String, watch::Sender<Pod>> = HashMap::new();
    // During a relist, the Pods seen; those not seen are gone.
    let mut relisted: Option<Vec<String>> = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                tracing::warn!("the node's watch of its Pods: {err}");
                continue;
            }
        };
        match event {
            Event::Init => relisted = Some(Vec::new()),
            Event::InitApply(pod) | Event::Apply(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(seen) = relisted.as_mut() {
                    seen.push(uid.clone());
                }
                match running.get(&uid) {
                    Some(sender) => {
                        let _ = sender.send(pod);
                    }
                    None => {
                        let (sender, receiver) = watch::channel(pod);
                        running.insert(uid, sender);
                        tokio::spawn(runner::run(shared.clone(), receiver));
                    }
                }
            }
            Event::InitDone => {
                if let Some(seen) = relisted.take() {
                    // Dropping a sender tells its runner the Pod is gone.
                    running.retain(|uid, _| seen.contains(uid));
                }
            }
            Event::Delete(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                running.remove(&uid);
            }
        }
        running.retain(|_, sender| !sender.is_closed());
    }
}
