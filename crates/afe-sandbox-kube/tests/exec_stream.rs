//! The exec stream against an API server of the tests' own that speaks the remote-command
//! WebSocket protocol as the real one does: a v5 server whose "command" reads its stdin to the
//! end and only then answers (so output written after stdin closed must still arrive), on stdout
//! and stderr at once, and exits 3; and a v4-only server, which afe refuses before anything runs.

mod support;

use std::sync::Arc;

use afe_sandbox::{ExecRequest, Opened, Sandbox};
use afe_sandbox_kube::KubeSandbox;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::routing::get;

/// What the fake server saw and does: every command's argv, and a signal that ends the running
/// one as a SIGKILL would.
#[derive(Default)]
struct Kubelet {
    commands: std::sync::Mutex<Vec<Vec<String>>>,
    killed: tokio::sync::Notify,
}

async fn send_status(socket: &mut WebSocket, status: &[u8]) {
    let mut frame = vec![3u8];
    frame.extend_from_slice(status);
    let _ = socket.send(Message::Binary(frame.into())).await;
    let _ = socket.send(Message::Close(None)).await;
}

/// A command: the kill command ends at once (and ends the running one, 137); any other reads
/// frames until stdin closes (v5's close frame for stream 0), then answers — or is killed first.
async fn command(mut socket: WebSocket, argv: Vec<String>, kubelet: Arc<Kubelet>) {
    if argv.iter().any(|a| a.contains("kill -KILL")) {
        // A permit kept if the running command is not waiting yet.
        kubelet.killed.notify_one();
        send_status(&mut socket, br#"{"metadata":{},"status":"Success"}"#).await;
        return;
    }
    let mut stdin = Vec::new();
    loop {
        tokio::select! {
            message = socket.recv() => match message {
                Some(Ok(Message::Binary(frame))) => match frame.first() {
                    Some(0) => stdin.extend_from_slice(&frame[1..]),
                    Some(255) if frame.get(1) == Some(&0) => break,
                    _ => {}
                },
                Some(Ok(_)) => {}
                _ => return,
            },
            _ = kubelet.killed.notified() => {
                let status = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit code 137","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"137"}]}}"#;
                send_status(&mut socket, status).await;
                return;
            }
        }
    }
    let mut out = vec![1u8];
    out.extend_from_slice(b"read:");
    out.extend_from_slice(&stdin);
    let _ = socket.send(Message::Binary(out.into())).await;
    let _ = socket
        .send(Message::Binary(vec![2u8, b'e', b'r', b'r'].into()))
        .await;
    let status = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
    send_status(&mut socket, status).await;
}

/// The Pod as the fake server reports it: running and ready, or being deleted.
fn pod(deleting: bool) -> serde_json::Value {
    let mut pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "afe-pod", "namespace": "afe-sandbox"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    if deleting {
        pod["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z".into();
    }
    pod
}

/// A fake API server on loopback offering `protocols`; its address.
async fn server(protocols: &'static [&'static str]) -> String {
    server_of(protocols, false).await
}

/// The same, its Pod `deleting` or not.
async fn server_of(protocols: &'static [&'static str], deleting: bool) -> String {
    serve(protocols, deleting, Arc::new(Kubelet::default())).await
}

async fn serve(
    protocols: &'static [&'static str],
    deleting: bool,
    kubelet: Arc<Kubelet>,
) -> String {
    let app =
        axum::Router::new()
            .route(
                "/api/v1/namespaces/afe-sandbox/pods/{name}/exec",
                get(
                    move |upgrade: WebSocketUpgrade,
                          axum::extract::Query(query): axum::extract::Query<
                        Vec<(String, String)>,
                    >| {
                        let kubelet = kubelet.clone();
                        async move {
                            let argv: Vec<String> = query
                                .into_iter()
                                .filter(|(key, _)| key == "command")
                                .map(|(_, value)| value)
                                .collect();
                            kubelet.commands.lock().unwrap().push(argv.clone());
                            upgrade
                                .protocols(protocols.iter().copied())
                                .on_upgrade(move |socket| command(socket, argv, kubelet))
                        }
                    },
                ),
            )
            .route(
                "/api/v1/namespaces/afe-sandbox/pods/afe-pod",
                get(move || async move { axum::Json(pod(deleting)) }),
            );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

fn sandbox_at(url: &str) -> KubeSandbox {
    let config = kube::Config::new(url.parse().unwrap());
    let client = afe_sandbox_kube::connect::client_of(config).unwrap();
    KubeSandbox::with_suffixes(
        client,
        support::settings(),
        Arc::new(|| "abcde".to_string()),
    )
}

fn opened() -> Opened {
    Opened {
        ticket: support::TICKET.into(),
        id: "afe-pod".into(),
        fresh: true,
    }
}

#[tokio::test]
async fn stdin_closes_on_its_own_and_the_output_after_it_and_the_status_arrive() {
    let url = server(&["v5.channel.k8s.io"]).await;
    let mut request = ExecRequest::new(["cat"]);
    // More than one frame of stdin.
    let bundle: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    request.stdin = Some(bundle.clone());
    request.output_limit = 1 << 20;
    let mut pieces = 0;
    let ran = sandbox_at(&url)
        .exec(&opened(), &request, &mut |_| pieces += 1)
        .await
        .unwrap();
    assert_eq!(ran.status, 3);
    let mut expected = b"read:".to_vec();
    expected.extend_from_slice(&bundle);
    assert_eq!(
        ran.stdout.bytes, expected,
        "everything written after stdin closed"
    );
    assert_eq!(ran.stderr.bytes, b"err");
    assert_eq!(pieces, 2);
}

#[tokio::test]
async fn a_server_that_offers_only_v4_is_refused() {
    let url = server(&["v4.channel.k8s.io"]).await;
    let err = sandbox_at(&url)
        .exec(&opened(), &ExecRequest::new(["true"]), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), "AFE-SBX-009", "{err}");
}

#[tokio::test]
async fn a_pod_that_is_not_there_is_gone() {
    // The server knows no other path: the upgrade is answered 404, as for a deleted Pod.
    let url = server(&["v5.channel.k8s.io"]).await;
    let sandbox = sandbox_at(&url);
    let missing = Opened {
        id: "a/b".into(),
        ..opened()
    };
    let err = sandbox
        .exec(&missing, &ExecRequest::new(["true"]), &mut |_| {})
        .await
        .unwrap_err();
    assert!(err.is_gone(), "{err}");
}

/// A command that ends badly while its Pod is being deleted was killed with the Pod: the sandbox
/// is gone (the engine restores the ticket), not the command's own failure.
#[tokio::test]
async fn a_command_cut_by_its_pods_deletion_is_the_sandbox_gone() {
    let url = server_of(&["v5.channel.k8s.io"], true).await;
    let err = sandbox_at(&url)
        .exec(&opened(), &ExecRequest::new(["sleep", "600"]), &mut |_| {})
        .await
        .unwrap_err();
    assert!(err.is_gone(), "{err}");
    assert!(err.to_string().contains("being deleted"), "{err}");
}

/// Killing an attached command kills it in the Pod, by the process id its wrapper kept (closing
/// the stream alone would leave it running), and its status is then the kill's.
#[tokio::test]
async fn a_killed_attached_command_is_killed_in_the_pod_by_its_kept_pid() {
    let kubelet = Arc::new(Kubelet::default());
    let url = serve(&["v5.channel.k8s.io"], false, kubelet.clone()).await;
    let attached = sandbox_at(&url)
        .attach(&opened(), &ExecRequest::new(["sleep", "600"]))
        .await
        .unwrap();
    attached.kill.send(()).unwrap();
    let status = attached.status.await.unwrap().unwrap();
    assert_eq!(status, 137);
    let commands = kubelet.commands.lock().unwrap().clone();
    assert_eq!(commands.len(), 2, "{commands:?}");
    let pid_file = &commands[0][4];
    assert!(pid_file.starts_with("/tmp/afe-exec-"), "{commands:?}");
    assert_eq!(commands[0].last().unwrap(), "600");
    assert!(
        commands[1][2].contains("kill -KILL") && commands[1][4] == *pid_file,
        "{commands:?}"
    );
}
