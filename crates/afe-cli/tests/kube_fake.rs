//! `afe run --sandbox-platform kubernetes` end to end on this machine, against the tests' own API
//! server and kubelet (`fake_kubelet`: Pods as Docker containers, `pods/exec` on v5 as Docker
//! execs): the ticket clone → change → test → push through the Kubernetes adapter's real code
//! (connect by kubeconfig context, server-side apply, readiness, the v5 exec stream with bundles on
//! stdin, checkpoints, restore, removal by label), and the same ticket surviving its Pod's
//! deletion after a checkpoint. Containment is not this tier's: the fake runs no init container
//! (see the kernel and cluster tiers).

mod fake_kubelet;
mod tickets;

use std::process::{Command, Stdio};

use fake_kubelet::FakeKube;
use tickets::*;

fn afe_on(
    kubeconfig: &std::path::Path,
    store: &str,
    dir: &std::path::Path,
    input: &std::path::Path,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_afe"));
    command
        .env("AFE_GIT_TOKEN", TOKEN)
        .env("KUBECONFIG", kubeconfig)
        .env("AFE_LOG", "info")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args([
            "run", "--local", "--json", "--flow", "demo", "--store", store,
        ])
        .args(["--sandbox-platform", "kubernetes", "--kube-context", "fake"])
        .args(["--engine-image", "af-engine:not-run-by-the-fake"])
        .arg("-c")
        .arg(dir)
        .arg("--input")
        .arg(input);
    command
}

/// A ticket's folder, git server and fake cluster (`wait_first`: its test node waits on its first
/// attempt); the command that runs it.
struct Setup {
    server: afe_testkit::GitServer,
    fake: FakeKube,
    url: String,
    store: String,
    command: Command,
    _cleanup: fake_kubelet::Cleanup,
}

async fn setup(tag: &str, wait_first: bool) -> Setup {
    let dir = afe_testkit::scratch(&format!("afe-kube-fake-{tag}"));
    config(&dir, &[], wait_first, None);
    let (server, input) = repository(&dir).await;
    let (fake, url) = FakeKube::start(&format!("{tag}-{}", std::process::id())).await;
    let cleanup = fake.cleanup();
    let kubeconfig = dir.join("kubeconfig");
    FakeKube::kubeconfig(&url, &kubeconfig);
    let store = afe_testkit::sqlite_url(&dir);
    let command = afe_on(&kubeconfig, &store, &dir, &input);
    Setup {
        server,
        fake,
        url,
        store,
        command,
        _cleanup: cleanup,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_runs_to_done_in_a_pod_and_leaves_nothing() {
    let Setup {
        server,
        fake,
        url,
        mut command,
        _cleanup,
        ..
    } = setup("run", false).await;
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("kubeconfig context \"fake\"") && stderr.contains(&url),
        "the worker says which API it uses: {stderr}"
    );
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ticket = events[0]["ticket"].as_str().unwrap().to_string();
    assert_eq!(events.last().unwrap()["kind"], "ticket.done");
    let branch = format!("refs/heads/afe/{ticket}/work");
    assert_eq!(
        server.file("app", &branch, "notes.txt").as_deref(),
        Some(&b"notes\nchanged\n"[..])
    );
    assert!(
        fake.objects_of(&ticket).is_empty(),
        "{:?}",
        fake.objects_of(&ticket)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_survives_its_pod_being_deleted_after_a_checkpoint() {
    let Setup {
        server,
        fake,
        url,
        store,
        mut command,
        _cleanup,
    } = setup("cut", true).await;
    let child = command.stdout(Stdio::piped()).spawn().unwrap();
    let run = CutRun::up_to_the_test_node(child);
    let ticket = run.ticket.clone();
    // The Pod, deleted through the API once the test node's command runs in it.
    let client =
        afe_sandbox_kube::connect::client_of(kube::Config::new(url.parse().unwrap())).unwrap();
    let pods =
        kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "afe-sandbox");
    let selected =
        kube::api::ListParams::default().labels(&afe_sandbox_kube::render::selector(&ticket));
    let name = pods.list(&selected).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let sandbox = afe_sandbox_kube::KubeSandbox::new(
        client.clone(),
        afe_sandbox_kube::KubeSandboxSettings::default(),
    );
    let opened = afe_sandbox::Opened {
        ticket: ticket.clone(),
        id: name.clone(),
        fresh: false,
    };
    until("the test node's sleep runs in the Pod", || {
        runs_in(&sandbox, &opened, "sleep 600")
    })
    .await;
    pods.delete(&name, &Default::default()).await.unwrap();
    run.survived(&store, &server).await;
    assert!(
        fake.objects_of(&ticket).is_empty(),
        "{:?}",
        fake.objects_of(&ticket)
    );
}
