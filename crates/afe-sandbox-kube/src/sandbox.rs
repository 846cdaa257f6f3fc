//! The Sandbox port on Kubernetes: one Pod and one ReadWriteOnce PVC per ticket in the sandbox
//! namespace, applied with server-side apply under one field manager, waited Ready, run in over
//! `pods/exec` (v5), marked with lifecycle annotations, removed by label.

use std::time::Duration;

use af_sidecar_api::control_client;
use af_sidecar_api::records::{DecisionQuery, DecisionRecord};
use afe_sandbox::{
    Attached, ExecOutput, ExecRequest, Existing, Marker, OpenAction, Opened, OutputChunk, Payload,
    Sandbox, SandboxError, SandboxSpec, decide, inside, labels, workspace,
};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::exec;
use crate::render::{self, FIELD_MANAGER, LIFECYCLE, PROXY, SANDBOX};
use crate::status::{PodState, pod_state};
use crate::{KubeSandboxSettings, command};

/// The most a `get` reads.
const GET_LIMIT: usize = 256 << 20;

/// Makes the random part of a new sandbox's name (tests give a fixed one).
pub type Suffixes = std::sync::Arc<dyn Fn() -> String + Send + Sync>;

/// Five lowercase hex digits from the system's random source.
pub fn random_suffix() -> String {
    af_sidecar_api::new_control_token()
        .map(|token| token[..render::SUFFIX_LEN].to_string())
        .unwrap_or_else(|_| {
            format!(
                "{:05x}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos())
                    & 0xfffff
            )
        })
}

/// The Kubernetes sandbox.
#[derive(Clone)]
pub struct KubeSandbox {
    client: kube::Client,
    settings: KubeSandboxSettings,
    suffixes: Suffixes,
}

impl std::fmt::Debug for KubeSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSandbox")
            .field("settings", &self.settings)
            .finish()
    }
}

fn platform(operation: impl Into<String>, err: impl std::fmt::Display) -> SandboxError {
    SandboxError::Platform {
        operation: operation.into(),
        detail: err.to_string(),
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

impl KubeSandbox {
    pub fn new(client: kube::Client, settings: KubeSandboxSettings) -> KubeSandbox {
        KubeSandbox::with_suffixes(client, settings, std::sync::Arc::new(random_suffix))
    }

    pub fn with_suffixes(
        client: kube::Client,
        settings: KubeSandboxSettings,
        suffixes: Suffixes,
    ) -> KubeSandbox {
        KubeSandbox {
            client,
            settings,
            suffixes,
        }
    }

    pub fn settings(&self) -> &KubeSandboxSettings {
        &self.settings
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.settings.namespace)
    }

    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.settings.namespace)
    }

    /// What the platform must refuse before anything is made.
    fn check(&self, spec: &SandboxSpec) -> Result<(), SandboxError> {
        if !render::is_ticket_name(&spec.ticket) {
            return Err(platform(
                "naming the ticket's Pod",
                format!(
                    "ticket {:?} is not a name Kubernetes takes (lowercase letters, digits and `-`, at most {})",
                    spec.ticket,
                    render::MAX_TICKET
                ),
            ));
        }
        let class = spec
            .runtime_class
            .as_ref()
            .or(self.settings.runtime_class.as_ref());
        if let Some(class) = class.filter(|class| render::names_gvisor(class)) {
            return Err(SandboxError::Containment {
                ticket: spec.ticket.clone(),
                why: format!(
                    "runtime class {class:?} is gVisor, which does not implement the netfilter owner match netlock needs: the Pod would only look isolated"
                ),
            });
        }
        if let Some(name) = spec.env.keys().next()
            && self.settings.env_secret.is_none()
        {
            return Err(SandboxError::VariableRefused {
                name: name.clone(),
                why: "on Kubernetes a sandbox's variables come from the Secret named by --sandbox-env-secret (spec.afe.sandbox.envSecret), and none is named".to_string(),
            });
        }
        Ok(())
    }

    /// The ticket's Pods that are not being deleted.
    async fn live_pods(&self, ticket: &str) -> Result<Vec<Pod>, SandboxError> {
        let listed = self
            .pods()
            .list(&ListParams::default().labels(&render::selector(ticket)))
            .await
            .map_err(|e| platform(format!("listing the Pods of ticket {ticket}"), e))?;
        Ok(listed
            .items
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// Applies the ticket's PVC and Pod; what was made is removed again when a step fails.
    async fn create(&self, spec: &SandboxSpec, signature: &str) -> Result<String, SandboxError> {
        let name = render::name(&spec.ticket, &(self.suffixes)());
        let proxy_config = if spec.has_egress() {
            let token = af_sidecar_api::new_control_token()
                .map_err(|e| platform("making the proxy's control token", e))?;
            let mut allow = spec.egress.clone();
            allow.extend(self.settings.dialable.iter().cloned());
            let config = af_sidecar_api::SidecarConfig::allowlist_proxy(&spec.ticket, allow, token);
            Some(config.to_text().map_err(|e| SandboxError::Containment {
                ticket: spec.ticket.clone(),
                why: e.to_string(),
            })?)
        } else {
            None
        };
        let claim = render::claim(spec, signature, &name, &self.settings);
        let pod = render::pod(
            spec,
            signature,
            &name,
            &self.settings,
            proxy_config.as_deref(),
        );
        let params = PatchParams::apply(FIELD_MANAGER);
        let made = async {
            self.claims()
                .patch(&name, &params, &Patch::Apply(&claim))
                .await
                .map_err(|e| applied(e, "PersistentVolumeClaim", &name))?;
            self.pods()
                .patch(&name, &params, &Patch::Apply(&pod))
                .await
                .map_err(|e| applied(e, "Pod", &name))?;
            Ok::<_, SandboxError>(())
        }
        .await;
        if let Err(err) = made {
            let _ = self.remove(&spec.ticket).await;
            return Err(err);
        }
        Ok(name)
    }

    /// Runs an adapter's own command in `container` to its end.
    async fn run_own(
        &self,
        sandbox: &Opened,
        container: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
        limit: usize,
        operation: &str,
    ) -> Result<ExecOutput, SandboxError> {
        run(
            &self.client,
            &self.settings.namespace,
            sandbox,
            container,
            argv,
            stdin,
            limit,
            operation,
            &mut |_| {},
        )
        .await
    }

    /// The marker a reaper reads: the Pod's lifecycle annotation, if any.
    pub async fn read_marker(&self, sandbox: &Opened) -> Result<Option<Marker>, SandboxError> {
        let pod = self
            .pods()
            .get_opt(&sandbox.id)
            .await
            .map_err(|e| platform(format!("reading Pod {}", sandbox.id), e))?;
        Ok(pod
            .and_then(|p| p.metadata.annotations)
            .and_then(|a| a.get(LIFECYCLE).cloned())
            .and_then(|text| serde_json::from_str(&text).ok()))
    }
}

/// An apply the API server refused: a conflict with another field manager means the object is
/// someone else's.
fn applied(err: kube::Error, kind: &str, name: &str) -> SandboxError {
    if is_status(&err, 409) {
        SandboxError::NotOurs {
            kind: kind.to_string(),
            name: name.to_string(),
        }
    } else {
        platform(format!("applying {kind} {name}"), err)
    }
}

/// Runs `argv` in `container` of the sandbox's Pod to its end, handing output to `on_output`.
#[allow(clippy::too_many_arguments)]
async fn run(
    client: &kube::Client,
    namespace: &str,
    sandbox: &Opened,
    container: &str,
    argv: &[String],
    stdin: Option<&[u8]>,
    limit: usize,
    operation: &str,
    on_output: &mut (dyn for<'c> FnMut(&'c OutputChunk) + Send),
) -> Result<ExecOutput, SandboxError> {
    let mut attached = exec::start(client, namespace, &sandbox.id, container, argv)
        .await
        .map_err(|e| e.into_error(&sandbox.ticket, operation))?;
    let input = attached.stdin.clone();
    drop(attached.stdin);
    let bytes = stdin.map(<[u8]>::to_vec);
    // Written while the output is read: a command that answers as it reads never blocks on us.
    let writer = tokio::spawn(async move {
        if let Some(bytes) = bytes {
            for piece in bytes.chunks(32 << 10) {
                if input.send(piece.to_vec()).await.is_err() {
                    break;
                }
            }
        }
        // Dropping the last sender closes stdin (v5's close frame).
    });
    let mut output = ExecOutput::default();
    while let Some(chunk) = attached.output.recv().await {
        on_output(&chunk);
        output.absorb(&chunk, limit);
    }
    let _ = writer.await;
    output.status = attached
        .status
        .await
        .map_err(|_| platform(operation, "the exec stream's task ended without a status"))?
        .map_err(|err| match err {
            SandboxError::Gone { why, .. } => SandboxError::Gone {
                ticket: sandbox.ticket.clone(),
                why,
            },
            other => other,
        })?;
    if output.status != 0 {
        // A Pod that is being deleted kills the command with it (137, as a rule): that is the
        // sandbox lost, not the command's own failure.
        let pod = Api::<Pod>::namespaced(client.clone(), namespace)
            .get_opt(&sandbox.id)
            .await
            .map_err(|e| platform(operation, e))?;
        let gone = match pod.as_ref().map(pod_state) {
            None => Some("it was deleted".to_string()),
            Some(PodState::Gone(why) | PodState::Uncontained(why)) => Some(why),
            Some(_) => None,
        };
        if let Some(why) = gone {
            return Err(SandboxError::Gone {
                ticket: sandbox.ticket.clone(),
                why: format!(
                    "Pod {} went away while the command ran (it ended {}): {why}",
                    sandbox.id, output.status
                ),
            });
        }
    }
    Ok(output)
}

#[async_trait]
impl Sandbox for KubeSandbox {
    async fn open(&self, spec: &SandboxSpec) -> Result<Opened, SandboxError> {
        self.check(spec)?;
        let signature = spec.signature();
        let live = self.live_pods(&spec.ticket).await?;
        let existing = match live.as_slice() {
            [] => None,
            [pod] => Some(Existing {
                signature: pod
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::SIGNATURE).cloned())
                    .unwrap_or_default(),
                running: matches!(
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    None | Some("Pending" | "Running")
                ),
            }),
            // Two of one ticket: neither is trusted.
            _ => Some(Existing {
                signature: String::new(),
                running: false,
            }),
        };
        if decide(existing.as_ref(), &signature) == OpenAction::Reuse
            && let Some(name) = live.first().and_then(|p| p.metadata.name.clone())
        {
            return Ok(Opened {
                ticket: spec.ticket.clone(),
                id: name,
                fresh: false,
            });
        }
        // Whatever is left of the ticket (a Pod made otherwise, a stopped one, a PVC whose Pod
        // went away) goes first.
        self.remove(&spec.ticket).await?;
        let name = self.create(spec, &signature).await?;
        Ok(Opened {
            ticket: spec.ticket.clone(),
            id: name,
            fresh: true,
        })
    }

    async fn wait_ready(&self, sandbox: &Opened) -> Result<(), SandboxError> {
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        let mut pause = Duration::from_millis(100);
        loop {
            let pod = self
                .pods()
                .get_opt(&sandbox.id)
                .await
                .map_err(|e| platform(format!("reading Pod {}", sandbox.id), e))?;
            let Some(pod) = pod else {
                return Err(SandboxError::Gone {
                    ticket: sandbox.ticket.clone(),
                    why: format!("Pod {} was deleted", sandbox.id),
                });
            };
            match pod_state(&pod) {
                PodState::Ready => return Ok(()),
                PodState::Gone(why) => {
                    return Err(SandboxError::Gone {
                        ticket: sandbox.ticket.clone(),
                        why: format!("Pod {}: {why}", sandbox.id),
                    });
                }
                PodState::Uncontained(why) => {
                    return Err(SandboxError::Containment {
                        ticket: sandbox.ticket.clone(),
                        why: format!("Pod {}: {why}", sandbox.id),
                    });
                }
                PodState::Starting(last) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(SandboxError::Gone {
                            ticket: sandbox.ticket.clone(),
                            why: format!(
                                "Pod {} was not Ready within {} s: {last}",
                                sandbox.id,
                                self.settings.ready_timeout.as_secs()
                            ),
                        });
                    }
                }
            }
            tokio::time::sleep(pause.min(deadline - tokio::time::Instant::now())).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    async fn exec(
        &self,
        sandbox: &Opened,
        request: &ExecRequest,
        on_output: &mut (dyn for<'c> FnMut(&'c OutputChunk) + Send),
    ) -> Result<ExecOutput, SandboxError> {
        let argv = command::wrap(request)?;
        run(
            &self.client,
            &self.settings.namespace,
            sandbox,
            SANDBOX,
            &argv,
            request.stdin.as_deref(),
            request.output_limit,
            "running a command in the sandbox",
            on_output,
        )
        .await
    }

    async fn attach(
        &self,
        sandbox: &Opened,
        request: &ExecRequest,
    ) -> Result<Attached, SandboxError> {
        let pid_file = command::pid_file(&random_suffix());
        let argv = command::wrap_keeping_pid(request, &pid_file)?;
        let attached = exec::start(
            &self.client,
            &self.settings.namespace,
            &sandbox.id,
            SANDBOX,
            &argv,
        )
        .await
        .map_err(|e| e.into_error(&sandbox.ticket, "starting a command in the sandbox"))?;
        Ok(killable(
            attached,
            self.client.clone(),
            self.settings.namespace.clone(),
            sandbox.id.clone(),
            pid_file,
        ))
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
                SANDBOX,
                &argv,
                Some(bytes),
                64 << 10,
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
                SANDBOX,
                &inside::get_command(&path, tar),
                None,
                GET_LIMIT,
                "reading from the sandbox",
            )
            .await?;
        inside::get_outcome(path, ran, tar, GET_LIMIT)
    }

    async fn mark(&self, sandbox: &Opened, marker: &Marker) -> Result<(), SandboxError> {
        let text = serde_json::to_string(marker).map_err(|e| platform("writing the marker", e))?;
        let patch = serde_json::json!({"metadata": {"annotations": {LIFECYCLE: text}}});
        let params = PatchParams::default();
        // On both: a PVC whose Pod went away is still found, and judged, by the reaper.
        let gone_or = |kind: &str, err: kube::Error| {
            if is_status(&err, 404) {
                SandboxError::Gone {
                    ticket: sandbox.ticket.clone(),
                    why: format!("{kind} {} was deleted", sandbox.id),
                }
            } else {
                platform(format!("marking {kind} {}", sandbox.id), err)
            }
        };
        self.pods()
            .patch(&sandbox.id, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| gone_or("Pod", e))?;
        self.claims()
            .patch(&sandbox.id, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| gone_or("PersistentVolumeClaim", e))?;
        Ok(())
    }

    async fn egress_decisions(
        &self,
        sandbox: &Opened,
        since: Option<&str>,
    ) -> Result<Vec<DecisionRecord>, SandboxError> {
        let operation = "reading the proxy's decisions";
        let pod = self
            .pods()
            .get_opt(&sandbox.id)
            .await
            .map_err(|e| platform(operation, e))?
            .ok_or_else(|| SandboxError::Gone {
                ticket: sandbox.ticket.clone(),
                why: format!("Pod {} was deleted", sandbox.id),
            })?;
        let Some(proxy) = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == PROXY))
        else {
            return Ok(Vec::new());
        };
        let token = proxy
            .env
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|e| e.name == "AF_PROXY_CONFIG_TEXT")
            .and_then(|e| e.value.as_deref())
            .and_then(|text| af_sidecar_api::SidecarConfig::from_text(text).ok())
            .and_then(|c| c.inline_token().map(str::to_string))
            .ok_or_else(|| platform(operation, "the proxy's configuration has no token"))?;
        let path = control_client::decisions_path(&DecisionQuery {
            since: since.map(str::to_string),
            ..DecisionQuery::default()
        });
        // Through `af-proxy connect` in the proxy's container: the worker never needs a route
        // into the Pod's network.
        let argv = vec![
            render::ENGINE.to_string(),
            "connect".to_string(),
            format!("127.0.0.1:{}", af_sidecar_api::config::CONTROL_PORT),
        ];
        let attached = exec::start(
            &self.client,
            &self.settings.namespace,
            &sandbox.id,
            PROXY,
            &argv,
        )
        .await
        .map_err(|e| e.into_error(&sandbox.ticket, operation))?;
        let body = control_client::request_within(
            duplex(attached),
            &token,
            "GET",
            &path,
            "",
            control_client::REQUEST_TIMEOUT,
        )
        .await
        .map(|(_, body)| body)
        .map_err(|e| platform(operation, e))?;
        control_client::read_decisions(&body).map_err(|e| platform(operation, e))
    }

    async fn opened(&self, ticket: &str) -> Result<Option<Opened>, SandboxError> {
        Ok(self
            .live_pods(ticket)
            .await?
            .into_iter()
            .find_map(|pod| pod.metadata.name)
            .map(|id| Opened {
                ticket: ticket.to_string(),
                id,
                fresh: false,
            }))
    }

    async fn remove(&self, ticket: &str) -> Result<(), SandboxError> {
        let selected = ListParams::default().labels(&render::selector(ticket));
        let delete = DeleteParams::background();
        self.pods()
            .delete_collection(&delete, &selected)
            .await
            .map_err(|e| platform(format!("removing the Pods of ticket {ticket}"), e))?;
        self.claims()
            .delete_collection(&delete, &selected)
            .await
            .map_err(|e| {
                platform(
                    format!("removing the PersistentVolumeClaims of ticket {ticket}"),
                    e,
                )
            })?;
        Ok(())
    }
}

/// `attached`, whose kill (sent or dropped before the command ended) kills the command in the Pod
/// by the process id it kept — closing the exec stream alone would leave it running — and then
/// closes the stream.
fn killable(
    attached: Attached,
    client: kube::Client,
    namespace: String,
    pod: String,
    pid_file: String,
) -> Attached {
    let Attached {
        stdin,
        output,
        status: mut ended,
        kill: close,
    } = attached;
    let (kill, mut killed) = tokio::sync::oneshot::channel::<()>();
    let (status_tx, status) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let outcome = tokio::select! {
            // A command that has ended is not killed, whatever came with it.
            biased;
            outcome = &mut ended => outcome,
            _ = &mut killed => {
                if let Ok(mut by) = exec::start(&client, &namespace, &pod, SANDBOX, &command::kill(&pid_file)).await {
                    drop(by.stdin);
                    while by.output.recv().await.is_some() {}
                    let _ = by.status.await;
                }
                drop(close);
                ended.await
            }
        };
        let _ = status_tx.send(outcome.unwrap_or_else(|_| {
            Err(platform(
                "running an attached command",
                "its stream's task ended without a status",
            ))
        }));
    });
    Attached {
        stdin,
        output,
        status,
        kill,
    }
}

/// An attached command as one byte stream (its stdin written, its stdout read; its stderr
/// dropped), for a client that speaks a protocol over it.
fn duplex(attached: Attached) -> tokio::io::DuplexStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (ours, theirs) = tokio::io::duplex(64 << 10);
    let (mut read, mut write) = tokio::io::split(theirs);
    let Attached {
        stdin,
        mut output,
        kill,
        ..
    } = attached;
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 16 << 10];
        loop {
            match read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if stdin.send(buffer[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        while let Some(chunk) = output.recv().await {
            if let OutputChunk::Stdout(bytes) = chunk
                && write.write_all(&bytes).await.is_err()
            {
                break;
            }
        }
        let _ = write.shutdown().await;
        drop(kill);
    });
    ours
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_is_five_hex_digits() {
        let suffix = random_suffix();
        assert_eq!(suffix.len(), render::SUFFIX_LEN);
        assert!(suffix.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
