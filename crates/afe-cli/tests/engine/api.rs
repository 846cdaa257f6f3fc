//! Talking to a running API the way clients do: `afe ticket`, HTTP, and the live WebSocket.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// An HTTP client (reqwest is built without a TLS provider of its own).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// `afe ticket ARGS --server SERVER` with `token` (none: no token at all); its status, stdout
/// and stderr.
pub fn afe_ticket_with(server: &str, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_afe"));
    command.arg("ticket").args(args).args(["--server", server]);
    command.env_remove("AFE_API_TOKEN");
    if let Some(token) = token {
        command.env("AFE_API_TOKEN", token);
    }
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `afe ticket start --flow FLOW --input {INPUT} --json`: the ticket the API made.
pub fn start_ticket(
    server: &str,
    token: &str,
    dir: &std::path::Path,
    flow: &str,
    input: Value,
) -> Value {
    let file = dir.join(format!("input-{}.json", afe_testkit::unique("in")));
    std::fs::write(&file, input.to_string()).unwrap();
    let (status, out, err) = afe_ticket_with(
        server,
        Some(token),
        &[
            "start",
            "--flow",
            flow,
            "--input",
            file.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(status, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// A ticket's live events over the WebSocket, after event `after`.
pub async fn websocket(server: &str, token: &str, ticket: &str, after: i64) -> Socket {
    let url = format!(
        "{}/v1/tickets/{ticket}/events/ws?after={after}",
        server.replace("http://", "ws://")
    );
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

/// The next event the socket brings.
pub async fn next_event(socket: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(120), socket.next())
            .await
            .expect("an event within two minutes")
            .expect("the socket stays open")
            .unwrap();
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

/// GET `path` with the token: status and JSON body (null when not JSON).
pub async fn get(server: &str, token: &str, path: &str) -> (u16, Value) {
    let answer = http_client()
        .get(format!("{server}{path}"))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    match answer {
        Ok(answer) => {
            let status = answer.status().as_u16();
            let body = answer.bytes().await.unwrap_or_default();
            (status, serde_json::from_slice(&body).unwrap_or(json!(null)))
        }
        Err(_) => (0, json!(null)),
    }
}

/// Starts `afe serve ARGS --listen 127.0.0.1:0` with the token, its log in `log`; the process
/// and its base URL (read from the first line it prints).
pub fn spawn_serve(
    args: &[&str],
    token: Option<&str>,
    log: &std::path::Path,
) -> (std::process::Child, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_afe"));
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("AFE_API_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    if let Some(token) = token {
        command.env("AFE_API_TOKEN", token);
    }
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line
        .trim()
        .strip_prefix("afe serve: listening on ")
        .unwrap_or_else(|| {
            panic!(
                "afe serve said {line:?}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
        .to_string();
    (child, url)
}

/// What a WebSocket client of a ticket's events reads when it drops halfway: events until `node`
/// has started, then the client goes away while `away` runs, then it reconnects after the last
/// event it has and reads until `ticket.done`. Every event's seq, in the order read.
pub async fn seqs_across_a_reconnect(
    server: &str,
    token: &str,
    ticket: &str,
    node: &str,
    away: impl std::future::Future<Output = ()>,
) -> Vec<i64> {
    use futures_util::SinkExt;
    let mut seen: Vec<i64> = Vec::new();
    let mut socket = websocket(server, token, ticket, 0).await;
    loop {
        let event = next_event(&mut socket).await;
        seen.push(event["seq"].as_i64().unwrap());
        if event["kind"] == "node.started" && event["payload"]["node"] == node {
            break;
        }
    }
    socket.close(None).await.unwrap();
    drop(socket);
    away.await;
    let mut socket = websocket(server, token, ticket, *seen.last().unwrap()).await;
    loop {
        let event = next_event(&mut socket).await;
        seen.push(event["seq"].as_i64().unwrap());
        if event["kind"] == "ticket.done" {
            break;
        }
    }
    let _ = socket.send(Message::Close(None)).await;
    seen
}
