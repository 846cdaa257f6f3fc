//! The cluster tier of the Kubernetes sandbox: against a real API server and kubelet, through a
//! disposable cluster's kubeconfig context. Run by `scripts/afe-kind-test`, never by CI (there is
//! no cluster there): the file is built only with the `cluster-tier` feature, so the suite neither
//! runs nor skips it, and each test fails — never passes — when the script's settings are missing. The script names the context, makes the namespace and says
//! where the run happened.
//!
//! - The end-to-end ticket of issue 14 (clone → change → test → push) with its sandbox Pod
//!   deleted while the test node runs, after the change's checkpoint: the ticket finishes in a
//!   new Pod restored from its checkpoints, no completed node runs twice, and nothing of the
//!   ticket is left.
//! - Containment, judged at the listener: a `git daemon` in a Pod of the test's own namespace
//!   logs every connection; a plain Pod reaches it (the positive control), a ticket's sandbox
//!   under netlock does not.

mod tickets;

use std::process::{Command, Stdio};
use std::time::Duration;

use afe_sandbox::{ExecRequest, Opened, Sandbox};
use afe_sandbox_kube::{KubeSandbox, KubeSandboxSettings};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use tickets::*;

/// What the script passes: the context, the namespace it made, the images on the nodes.
struct Cluster {
    context: String,
    namespace: String,
    engine_image: String,
}

fn cluster() -> Cluster {
    let need = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: the cluster tier runs through scripts/afe-kind-test, which sets it")
        })
    };
    // The sandbox image comes from AFE_SANDBOX_IMAGE, as for every end-to-end test.
    need("AFE_SANDBOX_IMAGE");
    Cluster {
        context: need("AFE_KIND_CONTEXT"),
        namespace: need("AFE_KIND_NAMESPACE"),
        engine_image: need("AF_PROXY_IMAGE"),
    }
}

async fn client(cluster: &Cluster) -> kube::Client {
    afe_sandbox_kube::connect(Some(&cluster.context))
        .await
        .unwrap()
        .client
}

/// How many objects of `ticket` of kind `K` are still there (not being deleted).
async fn left_of_kind<K>(client: &kube::Client, namespace: &str, ticket: &str) -> usize
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let selected = ListParams::default().labels(&afe_sandbox_kube::render::selector(ticket));
    Api::<K>::namespaced(client.clone(), namespace)
        .list(&selected)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .count()
}

/// The ticket's Pods and PVCs still there.
async fn left_in_cluster(client: &kube::Client, namespace: &str, ticket: &str) -> (usize, usize) {
    (
        left_of_kind::<Pod>(client, namespace, ticket).await,
        left_of_kind::<PersistentVolumeClaim>(client, namespace, ticket).await,
    )
}

fn settings(cluster: &Cluster) -> KubeSandboxSettings {
    KubeSandboxSettings {
        namespace: cluster.namespace.clone(),
        engine_image: cluster.engine_image.clone(),
        ..KubeSandboxSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_survives_its_pod_being_deleted_after_a_checkpoint() {
    let cluster = cluster();
    let client = client(&cluster).await;
    let dir = afe_testkit::scratch("afe-kind-e2e");
    config(&dir, &[], true, None);
    let (server, input) = repository(&dir).await;
    let store_url = afe_testkit::sqlite_url(&dir);
    let child = Command::new(env!("CARGO_BIN_EXE_afe"))
        .env("AFE_GIT_TOKEN", TOKEN)
        .args([
            "run", "--local", "--json", "--flow", "demo", "--store", &store_url,
        ])
        .args([
            "--sandbox-platform",
            "kubernetes",
            "--kube-context",
            &cluster.context,
        ])
        .args(["--sandbox-namespace", &cluster.namespace])
        .args(["--engine-image", &cluster.engine_image])
        .arg("-c")
        .arg(&dir)
        .arg("--input")
        .arg(&input)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let run = CutRun::up_to_the_test_node(child);
    let ticket = run.ticket.clone();
    // The Pod the ticket runs in, and its test node's command seen running there: a point the
    // test chose, then the Pod is deleted under the engine.
    let pods = Api::<Pod>::namespaced(client.clone(), &cluster.namespace);
    let selected = ListParams::default().labels(&afe_sandbox_kube::render::selector(&ticket));
    let name = pods.list(&selected).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let sandbox = KubeSandbox::new(client.clone(), settings(&cluster));
    let opened = Opened {
        ticket: ticket.clone(),
        id: name.clone(),
        fresh: false,
    };
    until("the test node's sleep runs in the Pod", || {
        runs_in(&sandbox, &opened, "sleep 600")
    })
    .await;
    pods.delete(&name, &DeleteParams::default()).await.unwrap();
    run.survived(&store_url, &server).await;
    let namespace = cluster.namespace.clone();
    until("the ticket's Pods and PVCs are gone", || {
        let client = client.clone();
        let namespace = namespace.clone();
        let ticket = ticket.clone();
        async move { left_in_cluster(&client, &namespace, &ticket).await == (0, 0) }
    })
    .await;
}

/// A Pod of the test's own that logs every connection to port 9418.
async fn listener(client: &kube::Client, cluster: &Cluster) -> (String, String) {
    let pods = Api::<Pod>::namespaced(client.clone(), &cluster.namespace);
    let name = "afe-kind-listener";
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "afe-kind-listener"}},
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "listener",
                "image": afe_testkit::sandbox_image(),
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "mkdir -p /tmp/srv && exec git daemon --verbose --export-all --base-path=/tmp/srv --port=9418 --listen=0.0.0.0"],
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": true,
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))
    .unwrap();
    let _ = pods.delete(name, &DeleteParams::default()).await;
    until("the old listener is gone", || async {
        pods.get_opt(name).await.unwrap().is_none()
    })
    .await;
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    loop {
        let status = pods.get(name).await.unwrap().status.unwrap_or_default();
        let ip = status.pod_ip.unwrap_or_default();
        if status.phase.as_deref() == Some("Running") && !ip.is_empty() {
            return (name.to_string(), ip);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the listener never ran"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How many connections the listener has logged.
async fn arrivals(client: &kube::Client, cluster: &Cluster, name: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), &cluster.namespace)
        .logs(name, &LogParams::default())
        .await
        .unwrap()
        .lines()
        .filter(|line| line.contains("Connection from"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_reaches_nothing_that_a_plain_pod_reaches() {
    let cluster = cluster();
    let client = client(&cluster).await;
    let (listener, ip) = listener(&client, &cluster).await;
    let target = format!("git://{ip}:9418/nothing");

    // Positive control: a plain Pod (the same image, no netlock) reaches the listener, and the
    // listener logs it.
    let control: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "afe-kind-control"},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false,
            "containers": [{"name": "c", "image": afe_testkit::sandbox_image(),
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "git ls-remote \"$0\" || true", &target],
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": true,
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}))
    .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), &cluster.namespace);
    let _ = pods
        .delete("afe-kind-control", &DeleteParams::default())
        .await;
    until("the old control is gone", || async {
        pods.get_opt("afe-kind-control").await.unwrap().is_none()
    })
    .await;
    pods.create(&PostParams::default(), &control).await.unwrap();
    until("the listener logs the plain Pod's connection", || async {
        arrivals(&client, &cluster, &listener).await >= 1
    })
    .await;
    let before = arrivals(&client, &cluster, &listener).await;

    // The ticket's sandbox, under netlock, as uid 1000: refused, and nothing arrives.
    let sandbox = KubeSandbox::new(client.clone(), settings(&cluster));
    let mut spec = afe_sandbox::SandboxSpec {
        ticket: format!("kind-{}", std::process::id()),
        image: afe_testkit::sandbox_image(),
        cpus: None,
        memory_bytes: None,
        env: Default::default(),
        egress: Vec::new(),
        runtime_class: None,
    };
    spec.ticket.truncate(afe_sandbox_kube::render::MAX_TICKET);
    let opened = sandbox.open(&spec).await.unwrap();
    sandbox.wait_ready(&opened).await.unwrap();
    let tried = sandbox
        .exec(
            &opened,
            &ExecRequest::new(["git", "ls-remote", &target]),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert!(!tried.succeeded(), "{}", tried.stderr.text());
    // The listener's log is read after the sandbox's attempt has ended: one more read of the
    // listener's own record, which the positive control showed is kept.
    assert_eq!(
        arrivals(&client, &cluster, &listener).await,
        before,
        "the sandbox's connection reached the listener: {}",
        tried.stderr.text()
    );
    sandbox.remove(&spec.ticket).await.unwrap();
    let _ = pods.delete(&listener, &DeleteParams::default()).await;
    let _ = pods
        .delete("afe-kind-control", &DeleteParams::default())
        .await;
}
