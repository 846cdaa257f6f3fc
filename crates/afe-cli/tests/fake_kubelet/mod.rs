//! A Kubernetes API server and kubelet of the tests' own, on loopback, for the parts of the API the
//! Kubernetes sandbox uses — so that `afe run --sandbox-platform kubernetes` runs a whole ticket on
//! this machine, where no cluster exists. It answers as a real server does where the adapter
//! depends on it, and runs what a kubelet would on the real Docker daemon:
//!
//! - Pods and PVCs kept as applied (server-side apply and merge patches), listed and deleted by
//!   label selector (`deletecollection`) and by name;
//! - a Pod's `sandbox` container started as a Docker container (its image, uid 1000, its command,
//!   the PVC as a Docker volume at `/workspace` made writable for the Pod's `fsGroup`, no
//!   network), reported Running, and Ready while its readiness command succeeds in it;
//! - `pods/exec` over WebSocket on `v5.channel.k8s.io`: stdin frames into a Docker exec, v5's close
//!   frame closing its stdin, its stdout and stderr back as frames 1 and 2, its exit status as a
//!   `metav1.Status` on channel 3, as the kubelet writes it;
//! - deleting a Pod removes its container, so a command running in it ends without a status.
//!
//! It does not run init containers or the proxy: netlock and the proxy are proved by the kernel
//! tier (crates/af-proxy/tests/guard_kernel.rs) and the cluster tier (scripts/afe-kind-test).
#![allow(dead_code, reason = "each test file uses its own part")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use afe_sandbox_docker::exec as docker_exec;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bollard::Docker;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The label of everything the fake kubelet makes on the daemon.
const MADE_BY: &str = "afe.fake-kubelet";

#[derive(Clone)]
pub struct FakeKube {
    objects: Arc<Mutex<BTreeMap<String, Value>>>,
    docker: Docker,
    tag: String,
}

type Params = Query<Vec<(String, String)>>;

fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Equality selectors (`a=b,c=d`), the only kind the adapter sends.
fn selected(object: &Value, selector: Option<&str>) -> bool {
    selector.is_none_or(|selector| {
        selector.split(',').all(|term| {
            let (key, value) = term.split_once('=').unwrap_or((term, ""));
            object["metadata"]["labels"][key] == value
        })
    })
}

fn list_kind(kind: &str) -> &'static str {
    if kind == "pods" {
        "PodList"
    } else {
        "PersistentVolumeClaimList"
    }
}

fn not_found(kind: &str, name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": format!("{kind} \"{name}\" not found")}),
        ),
    )
        .into_response()
}

fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(into), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    into.remove(key);
                } else {
                    merge(into.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (into, patch) => *into = patch.clone(),
    }
}

impl FakeKube {
    /// Starts the server; its URL. `tag` names what it makes on the daemon.
    pub async fn start(tag: &str) -> (FakeKube, String) {
        let fake = FakeKube {
            objects: Arc::new(Mutex::new(BTreeMap::new())),
            docker: Docker::connect_with_local_defaults().expect("the Docker daemon"),
            tag: tag.to_string(),
        };
        let app = Router::new()
            .route(
                "/api/v1/namespaces/{ns}/{kind}",
                get(list).delete(delete_collection),
            )
            .route(
                "/api/v1/namespaces/{ns}/{kind}/{name}",
                get(read).patch(patch).delete(delete_one),
            )
            .route("/api/v1/namespaces/{ns}/pods/{name}/exec", get(exec))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (fake, format!("http://{address}"))
    }

    /// A kubeconfig whose context `fake` is this server.
    pub fn kubeconfig(url: &str, path: &std::path::Path) {
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: other\nclusters:\n- name: fake\n  cluster: {{server: \"{url}\"}}\nusers:\n- name: fake\n  user: {{token: fake-token}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\n- name: other\n  context: {{cluster: nowhere, user: fake}}\n"
            ),
        )
        .unwrap();
    }

    fn get(&self, kind: &str, name: &str) -> Option<Value> {
        self.objects
            .lock()
            .unwrap()
            .get(&format!("{kind}/{name}"))
            .cloned()
    }

    /// The objects of `kind` the selector chooses, with their keys.
    fn chosen(&self, kind: &str, selector: Option<&str>) -> Vec<(String, Value)> {
        self.objects
            .lock()
            .unwrap()
            .iter()
            .filter(|(key, o)| key.starts_with(&format!("{kind}/")) && selected(o, selector))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect()
    }

    /// The claim's volume at `/workspace`.
    fn workspace(&self, claim: &str) -> Option<Vec<bollard::models::Mount>> {
        Some(vec![bollard::models::Mount {
            target: Some("/workspace".to_string()),
            source: Some(self.container(claim)),
            typ: Some(bollard::models::MountType::VOLUME),
            ..Default::default()
        }])
    }

    fn container(&self, pod: &str) -> String {
        format!("fake-kube-{}-{pod}", self.tag)
    }

    /// The Pods and PVCs it holds of `ticket` (label `afe.ticket`).
    pub fn objects_of(&self, ticket: &str) -> Vec<String> {
        self.objects
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, o)| o["metadata"]["labels"]["afe.ticket"] == ticket)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// A guard that removes, when dropped (a failed test too), every container and volume this
    /// fake made on the daemon, found by its label.
    pub fn cleanup(&self) -> Cleanup {
        Cleanup(format!("{MADE_BY}={}", self.tag))
    }

    /// Makes what a new object needs on the daemon: a PVC's volume, a Pod's container.
    async fn realize(&self, kind: &str, name: &str, object: &Value) {
        let labels = Some(std::collections::HashMap::from([(
            MADE_BY.to_string(),
            self.tag.clone(),
        )]));
        if kind == "persistentvolumeclaims" {
            self.docker
                .create_volume(bollard::models::VolumeCreateRequest {
                    name: Some(self.container(name)),
                    labels: labels.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
            return;
        }
        let spec = &object["spec"]["containers"][0];
        let claim = object["spec"]["volumes"]
            .as_array()
            .and_then(|v| {
                v.iter()
                    .find_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
            })
            .unwrap()
            .to_string();
        let command: Vec<String> = serde_json::from_value(spec["command"].clone()).unwrap();
        let body = bollard::models::ContainerCreateBody {
            image: spec["image"].as_str().map(str::to_string),
            user: Some("1000:1000".to_string()),
            entrypoint: Some(command),
            labels,
            host_config: Some(bollard::models::HostConfig {
                network_mode: Some("none".to_string()),
                init: Some(true),
                mounts: self.workspace(&claim),
                cap_drop: Some(vec!["ALL".to_string()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let container = self.container(name);
        self.docker
            .create_container(
                Some(bollard::query_parameters::CreateContainerOptions {
                    name: Some(container.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .unwrap();
        // The volume made the Pod's fsGroup's, as a kubelet does, before the Pod's process runs.
        let chown = bollard::models::ContainerCreateBody {
            image: spec["image"].as_str().map(str::to_string),
            user: Some("0".to_string()),
            entrypoint: Some(vec![
                "chown".into(),
                "1000:1000".into(),
                "/workspace".into(),
            ]),
            labels: Some(std::collections::HashMap::from([(
                MADE_BY.to_string(),
                self.tag.clone(),
            )])),
            host_config: Some(bollard::models::HostConfig {
                network_mode: Some("none".to_string()),
                auto_remove: Some(false),
                mounts: self.workspace(&claim),
                ..Default::default()
            }),
            ..Default::default()
        };
        let helper = format!("{container}-fsgroup");
        self.docker
            .create_container(
                Some(bollard::query_parameters::CreateContainerOptions {
                    name: Some(helper.clone()),
                    ..Default::default()
                }),
                chown,
            )
            .await
            .unwrap();
        self.docker
            .start_container(
                &helper,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .unwrap();
        let mut waited = self.docker.wait_container(
            &helper,
            None::<bollard::query_parameters::WaitContainerOptions>,
        );
        while waited.next().await.is_some() {}
        let _ = self
            .docker
            .remove_container(
                &helper,
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
        self.docker
            .start_container(
                &container,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .unwrap();
    }

    async fn remove(&self, kind: &str, name: &str) {
        self.objects
            .lock()
            .unwrap()
            .remove(&format!("{kind}/{name}"));
        if kind == "pods" {
            let _ = self
                .docker
                .remove_container(
                    &self.container(name),
                    Some(bollard::query_parameters::RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    }),
                )
                .await;
        } else {
            let _ = self
                .docker
                .remove_volume(
                    &self.container(name),
                    None::<bollard::query_parameters::RemoveVolumeOptions>,
                )
                .await;
        }
    }

    /// A Pod as a reader sees it: Running, and Ready while its readiness command succeeds.
    async fn with_status(&self, name: &str, mut pod: Value) -> Value {
        let probe: Vec<String> = serde_json::from_value(
            pod["spec"]["containers"][0]["readinessProbe"]["exec"]["command"].clone(),
        )
        .unwrap_or_default();
        let container = self.container(name);
        let ready = !probe.is_empty()
            && docker_exec::run(
                &self.docker,
                &docker_exec::Command {
                    container: &container,
                    user: "1000",
                    argv: probe,
                    env: Vec::new(),
                    workdir: None,
                    stdin: None,
                    output_limit: 1024,
                },
                &mut |_| {},
            )
            .await
            .is_ok_and(|ran| ran.succeeded());
        pod["status"] = json!({"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]});
        pod
    }
}

async fn list(
    State(fake): State<FakeKube>,
    Path((_, kind)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    let mut shown = Vec::new();
    for (_, item) in fake.chosen(&kind, param(&params, "labelSelector")) {
        shown.push(if kind == "pods" {
            let name = item["metadata"]["name"].as_str().unwrap().to_string();
            fake.with_status(&name, item).await
        } else {
            item
        });
    }
    Json(json!({"kind": list_kind(&kind), "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": shown}))
        .into_response()
}

async fn delete_collection(
    State(fake): State<FakeKube>,
    Path((_, kind)): Path<(String, String)>,
    Query(params): Params,
) -> Response {
    let chosen = fake.chosen(&kind, param(&params, "labelSelector"));
    for (key, _) in &chosen {
        let (kind, name) = key.split_once('/').unwrap();
        fake.remove(kind, name).await;
    }
    let items: Vec<Value> = chosen.into_iter().map(|(_, o)| o).collect();
    Json(json!({"kind": list_kind(&kind), "apiVersion": "v1", "metadata": {}, "items": items}))
        .into_response()
}

async fn read(
    State(fake): State<FakeKube>,
    Path((_, kind, name)): Path<(String, String, String)>,
) -> Response {
    match fake.get(&kind, &name) {
        Some(pod) if kind == "pods" => Json(fake.with_status(&name, pod).await).into_response(),
        Some(object) => Json(object).into_response(),
        None => not_found(&kind, &name),
    }
}

async fn patch(
    State(fake): State<FakeKube>,
    Path((ns, kind, name)): Path<(String, String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let key = format!("{kind}/{name}");
    let existing = fake.objects.lock().unwrap().get(&key).cloned();
    let object = match existing {
        Some(mut object) => {
            merge(&mut object, &patch);
            object
        }
        None => {
            let mut object = patch.clone();
            object["metadata"]["namespace"] = ns.into();
            object["metadata"]["uid"] = format!("uid-{name}").into();
            object["metadata"]["creationTimestamp"] = "2026-12-05T00:00:00Z".into();
            fake.realize(&kind, &name, &object).await;
            object
        }
    };
    fake.objects.lock().unwrap().insert(key, object.clone());
    Json(object).into_response()
}

async fn delete_one(
    State(fake): State<FakeKube>,
    Path((_, kind, name)): Path<(String, String, String)>,
) -> Response {
    match fake.get(&kind, &name) {
        Some(object) => {
            fake.remove(&kind, &name).await;
            Json(object).into_response()
        }
        None => not_found(&kind, &name),
    }
}

async fn exec(
    State(fake): State<FakeKube>,
    Path((_, name)): Path<(String, String)>,
    Query(params): Params,
    upgrade: WebSocketUpgrade,
) -> Response {
    if !fake
        .objects
        .lock()
        .unwrap()
        .contains_key(&format!("pods/{name}"))
    {
        return not_found("pods", &name);
    }
    let argv: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let container = fake.container(&name);
    upgrade
        .protocols(["v5.channel.k8s.io"])
        .on_upgrade(move |socket| run_exec(fake, socket, container, argv))
}

/// One command, as the kubelet streams it.
async fn run_exec(fake: FakeKube, mut socket: WebSocket, container: String, argv: Vec<String>) {
    let command = docker_exec::Command {
        container: &container,
        user: "1000",
        argv,
        env: Vec::new(),
        workdir: None,
        stdin: Some(&[]),
        output_limit: 0,
    };
    let Ok((id, mut output, mut input)) = docker_exec::start(&fake.docker, &command).await else {
        let _ = socket.send(Message::Close(None)).await;
        return;
    };
    let mut stdin_open = true;
    loop {
        tokio::select! {
            message = socket.recv(), if stdin_open => match message {
                Some(Ok(Message::Binary(frame))) => match frame.first() {
                    Some(0) => { let _ = input.write_all(&frame[1..]).await; }
                    Some(255) if frame.get(1) == Some(&0) => {
                        let _ = input.shutdown().await;
                        stdin_open = false;
                    }
                    _ => {}
                },
                Some(Ok(_)) => {}
                _ => return,
            },
            piece = output.next() => match piece {
                Some(Ok(bollard::container::LogOutput::StdOut { message })) => {
                    let mut frame = vec![1u8];
                    frame.extend_from_slice(&message);
                    if socket.send(Message::Binary(frame.into())).await.is_err() { return; }
                }
                Some(Ok(bollard::container::LogOutput::StdErr { message })) => {
                    let mut frame = vec![2u8];
                    frame.extend_from_slice(&message);
                    if socket.send(Message::Binary(frame.into())).await.is_err() { return; }
                }
                Some(Ok(_)) => {}
                // The container went away under the command: no status, as a real stream ends.
                Some(Err(_)) => { let _ = socket.send(Message::Close(None)).await; return; }
                None => break,
            },
        }
    }
    let inspected = fake.docker.inspect_exec(&id).await;
    let status = match inspected.ok().and_then(|i| i.exit_code) {
        Some(0) => json!({"metadata": {}, "status": "Success"}),
        Some(code) => json!({"metadata": {}, "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}}),
        None => {
            let _ = socket.send(Message::Close(None)).await;
            return;
        }
    };
    let mut frame = vec![3u8];
    frame.extend_from_slice(status.to_string().as_bytes());
    let _ = socket.send(Message::Binary(frame.into())).await;
    let _ = socket.send(Message::Close(None)).await;
}

/// See [`FakeKube::cleanup`].
pub struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let filter = format!("label={}", self.0);
        let listed = |args: &[&str]| {
            std::process::Command::new("docker")
                .args(args)
                .args(["--filter", &filter])
                .output()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let containers = listed(&["ps", "-aq"]);
        if !containers.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f"])
                .args(&containers)
                .output();
        }
        let volumes = listed(&["volume", "ls", "-q"]);
        if !volumes.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["volume", "rm", "-f"])
                .args(&volumes)
                .output();
        }
    }
}
