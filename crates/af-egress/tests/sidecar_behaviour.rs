//! The sidecar's other duties, against a running sidecar in a private network: capture into the
//! inbox (HTTP and mail), webhook delivery, the decision log's queries, metrics, transparent TLS,
//! keep-alive with streamed bodies, and staying up for everyone else when one client misbehaves.

mod support;

use std::time::Duration;

use support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[test]
fn captured_http_and_mail_land_in_the_inbox() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(POLICY, "").await;
        let body = r#"{"amount": 4200, "currency": "eur"}"#;
        let answer = exchange(
            addr(SIDECAR, 3128),
            format!(
                "POST http://api.payments.test/v1/charges HTTP/1.1\r\nhost: api.payments.test\r\ncontent-type: application/json\r\nproxy-authorization: Basic c2VjcmV0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("x-af-verdict: capture"), "{answer}");
        assert!(
            answer.ends_with(r#"{"id": "ch_twin"}"#),
            "the configured canned response: {answer}"
        );

        let default = exchange(addr(SIDECAR, 3128), b"POST http://hooks.chat.test/x HTTP/1.1\r\nhost: hooks.chat.test\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
        assert!(
            default.starts_with("HTTP/1.1 202"),
            "the default is 202 with an empty JSON object: {default}"
        );
        assert!(default.ends_with("{}"), "{default}");

        let mut smtp = TcpStream::connect(addr(SIDECAR, 25)).await.unwrap();
        smtp.write_all(
            b"EHLO shop\r\nMAIL FROM:<orders@shop.test>\r\nRCPT TO:<alice@customer.test>\r\nDATA\r\nFrom: Shop <orders@shop.test>\r\nSubject: Order 42 confirmed\r\n\r\nThank you for your order.\r\n..signed\r\n.\r\nQUIT\r\n",
        )
        .await
        .unwrap();
        let transcript = read_all(&mut smtp).await;
        assert!(transcript.starts_with("220 "), "{transcript}");
        assert!(transcript.contains("250 2.0.0 captured as"), "{transcript}");
        assert!(
            transcript.trim_end().ends_with("221 2.0.0 bye"),
            "{transcript}"
        );

        let entries = inbox().await;
        assert_eq!(entries.len(), 3, "{entries:?}");
        let charge = &entries[0];
        assert_eq!(charge["kind"], "http");
        assert_eq!(charge["method"], "POST");
        assert_eq!(charge["host"], "api.payments.test");
        assert_eq!(charge["path"], "/v1/charges");
        assert_eq!(charge["body"], body);
        assert_eq!(charge["headers"]["content-type"], "application/json");
        assert!(
            charge["headers"].get("proxy-authorization").is_none(),
            "the proxy credential is not stored"
        );
        let mail = &entries[2];
        assert_eq!(mail["kind"], "mail");
        assert_eq!(mail["from"], "orders@shop.test");
        assert_eq!(mail["to"], serde_json::json!(["alice@customer.test"]));
        assert_eq!(mail["subject"], "Order 42 confirmed");
        assert_eq!(
            mail["body"], "Thank you for your order.\r\n.signed\r\n",
            "dot-stuffing undone"
        );

        let (status, one) = control_get(
            &format!("/v1/inbox/{}", mail["id"].as_str().unwrap()),
            Some(TOKEN),
        )
        .await;
        assert!(
            status.contains("200") && one.contains("Order 42 confirmed"),
            "{status} {one}"
        );
        let (status, _) = control_request("DELETE", "/v1/inbox", Some(TOKEN), "").await;
        assert!(status.contains("200"));
        assert!(inbox().await.is_empty());

        let captured = decisions("?verdict=capture").await;
        assert_eq!(
            counts(&captured, "protocol"),
            [("http".to_string(), 2), ("smtp".to_string(), 1)].into()
        );
    });
}

/// What a workload sends to captured hosts is its own choice, and the inbox lives in the
/// sidecar's memory: however much is sent, the inbox stays within `inbox.max_bytes` (oldest
/// dropped first, each drop counted), bodies of mail as of requests are cut at
/// `inbox.max_body_bytes`, and every request is still answered.
#[test]
fn the_inbox_stays_within_its_bytes_whatever_a_workload_sends() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(
            POLICY,
            "inbox: {max_entries: 1000, max_body_bytes: 65536, max_bytes: 200000}",
        )
        .await;
        let body = "x".repeat(65536);
        for n in 0..10 {
            let answer = exchange(
                addr(SIDECAR, 3128),
                format!(
                    "POST http://hooks.chat.test/{n} HTTP/1.1\r\nhost: hooks.chat.test\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
            assert!(answer.starts_with("HTTP/1.1 202"), "{n}: {answer}");
        }
        let mut smtp = TcpStream::connect(addr(SIDECAR, 25)).await.unwrap();
        let long_line = "y".repeat(998);
        let mail_body = format!("{long_line}\r\n").repeat(100);
        smtp.write_all(
            format!("EHLO shop\r\nMAIL FROM:<orders@shop.test>\r\nRCPT TO:<alice@customer.test>\r\nDATA\r\nSubject: big\r\n\r\n{mail_body}.\r\nQUIT\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let transcript = read_all(&mut smtp).await;
        assert!(transcript.contains("250 2.0.0 captured as"), "{transcript}");

        let entries = inbox().await;
        let paths: Vec<&str> = entries.iter().filter_map(|e| e["path"].as_str()).collect();
        assert_eq!(paths, ["/8", "/9"], "the newest requests are kept");
        let mail = entries.last().unwrap();
        assert_eq!(mail["kind"], "mail");
        assert_eq!(mail["body"].as_str().unwrap().len(), 65536);
        assert_eq!(mail["truncated"], true);

        assert!(metric("af_egress_inbox_bytes").await <= 200_000);
        assert_eq!(metric("af_egress_inbox_entries").await, 3);
        assert_eq!(metric("af_egress_inbox_dropped_total").await, 8);
    });
}

/// A captured request's body is kept whole (up to `inbox.max_body_bytes`) until it is in the
/// inbox, so the bytes kept at once are bounded across connections
/// (`limits.max_capture_bytes_in_flight`): a body arriving while another holds most of them is
/// kept as far as it fits and marked cut, its request still answered; the one that held them is
/// kept whole.
#[test]
fn captured_bodies_read_at_once_are_bounded_across_connections() {
    in_private_network(|| async {
        // The test configuration ends in its `limits` section: this line goes on under it.
        let _sidecar = start_sidecar(
            &format!("  max_capture_bytes_in_flight: 4096\n{POLICY}"),
            "inbox: {max_entries: 1000, max_body_bytes: 4096, max_bytes: 1048576}",
        )
        .await;
        let post = |path: &str| {
            format!(
                "POST http://hooks.chat.test/{path} HTTP/1.1\r\nhost: hooks.chat.test\r\ncontent-length: 4096\r\nconnection: close\r\n\r\n"
            )
        };
        let mut holding = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        holding.write_all(post("first").as_bytes()).await.unwrap();
        holding.write_all(&[b'a'; 3000]).await.unwrap();
        metric_reaches("af_egress_capture_bytes_in_flight", 3000).await;

        let second = format!("{}{}", post("second"), "b".repeat(4096));
        let answer = exchange(addr(SIDECAR, 3128), second.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 202"),
            "still answered: {answer}"
        );
        holding.write_all(&[b'a'; 1096]).await.unwrap();
        let answer = read_all(&mut holding).await;
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");

        let entries = inbox().await;
        let kept = |path: &str| {
            let entry = entries
                .iter()
                .find(|e| e["path"] == path)
                .unwrap_or_else(|| panic!("{path} in {entries:?}"));
            (
                entry["body"].as_str().unwrap().len(),
                entry["truncated"].clone(),
            )
        };
        assert_eq!(kept("/second"), (1096, true.into()), "what fitted");
        assert_eq!(kept("/first"), (4096, false.into()), "kept whole");
    });
}

/// Each message is held whole until its final ".", so the bytes of mail received at once are
/// bounded across sessions (`limits.max_mail_bytes_in_flight`): a message that does not fit in
/// what other sessions leave is told to try again later (452), the session holding the rest
/// finishes, and once it has, a message of the same size goes in.
#[test]
fn mail_received_at_once_is_bounded_across_sessions() {
    in_private_network(|| async {
        // The test configuration ends in its `limits` section: these lines go on under it.
        let _sidecar = start_sidecar(
            &format!("  max_mail_bytes: 100000\n  max_mail_bytes_in_flight: 150000\n{POLICY}"),
            "",
        )
        .await;
        let lines = |n: usize| format!("{}\r\n", "z".repeat(998)).repeat(n);
        let envelope = "EHLO shop\r\nMAIL FROM:<orders@shop.test>\r\nRCPT TO:<alice@customer.test>\r\nDATA\r\n";

        // A session holds 90 000 bytes of an unfinished message.
        let mut holding = TcpStream::connect(addr(SIDECAR, 25)).await.unwrap();
        holding
            .write_all(format!("{envelope}{}", lines(90)).as_bytes())
            .await
            .unwrap();
        metric_reaches("af_egress_mail_bytes_in_flight", 90_000).await;

        // Another of 80 000 does not fit in the 60 000 left: try again later.
        let send = |n: usize| async move {
            let mut smtp = TcpStream::connect(addr(SIDECAR, 25)).await.unwrap();
            smtp.write_all(format!("{envelope}{}.\r\nQUIT\r\n", lines(n)).as_bytes())
                .await
                .unwrap();
            read_all(&mut smtp).await
        };
        let refused = send(80).await;
        assert!(refused.contains("452 4.3.1"), "{refused}");
        assert!(!refused.contains("captured as"), "{refused}");

        // The holding session finishes; its bytes are given back, and the same message fits.
        holding.write_all(b".\r\nQUIT\r\n").await.unwrap();
        let finished = read_all(&mut holding).await;
        assert!(finished.contains("250 2.0.0 captured as"), "{finished}");
        let accepted = send(80).await;
        assert!(accepted.contains("250 2.0.0 captured as"), "{accepted}");
        assert_eq!(metric("af_egress_mail_bytes_in_flight").await, 0);
        assert_eq!(inbox().await.len(), 2);
    });
}

/// A WebSocket-like origin on `at`: a request asking to upgrade (both `Upgrade` and
/// `Connection: upgrade` as it arrives) to `/ws` is answered 101, followed at once by a first
/// message, and then everything it receives is sent back upper-cased; `/decline` is answered 400
/// instead, and a request that does not ask is answered 426, upgrade required.
async fn switching_origin(at: std::net::SocketAddr) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind(at).await.unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let asks = head.contains("\r\nupgrade: websocket\r\n")
                    && head.contains("\r\nconnection: upgrade\r\n");
                let answer: &[u8] = match (asks, head.starts_with("get /ws ")) {
                    (true, true) => b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\nhello-from-origin",
                    (true, false) => b"HTTP/1.1 400 Bad Request\r\ncontent-length: 8\r\n\r\ndeclined",
                    (false, _) => b"HTTP/1.1 426 Upgrade Required\r\ncontent-length: 9\r\n\r\nno switch",
                };
                stream.write_all(answer).await.unwrap();
                if !(asks && head.starts_with("get /ws ")) {
                    return;
                }
                let mut buf = [0u8; 1024];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            let upper = buf[..n].to_ascii_uppercase();
                            if stream.write_all(&upper).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
}

/// Reads a response head from `stream` a byte at a time, so that nothing after it is taken.
async fn read_head_only(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = read_exactly(stream, 1).await;
        head.extend_from_slice(byte.as_bytes());
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads from `stream` until `want` bytes have come (or 5 s have passed).
async fn read_exactly(stream: &mut TcpStream, want: usize) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = vec![0u8; want];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut got))
        .await
        .expect("the bytes within 5 s")
        .unwrap();
    String::from_utf8_lossy(&got).into_owned()
}

/// A request asking to upgrade (a plain `ws://` WebSocket) to an allowed host, through the
/// forward proxy and through the transparent HTTP listener: when the origin switches protocols,
/// the client gets its 101 and the two connections are relayed both ways, the origin's first
/// bytes included, and recorded with the bytes each way once closed. An origin that declines is
/// answered as usual; a request that does not ask has its Upgrade dropped (the origin never sees
/// it); a denied host is refused before anything is dialled.
#[test]
fn an_upgrade_to_an_allowed_host_is_relayed_once_the_origin_switches() {
    in_private_network(|| async {
        switching_origin(addr(ORIGIN, 80)).await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let ask = |target: &str, connection: &str| {
            // The Host field names the URL's host, as clients send it (a disagreeing one is
            // refused: battery E21).
            let host = target
                .strip_prefix("http://")
                .and_then(|rest| rest.split('/').next())
                .unwrap_or("api.allowed.test");
            format!(
                "GET {target} HTTP/1.1\r\nhost: {host}\r\nconnection: {connection}\r\nupgrade: websocket\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
            )
        };
        for (listener, target) in [(3128, "http://api.allowed.test/ws"), (80, "/ws")] {
            let mut client = TcpStream::connect(addr(SIDECAR, listener)).await.unwrap();
            client
                .write_all(ask(target, "Upgrade").as_bytes())
                .await
                .unwrap();
            let head = read_head_only(&mut client).await;
            assert!(head.starts_with("HTTP/1.1 101"), "{listener}: {head}");
            let lower = head.to_ascii_lowercase();
            assert!(
                lower.contains("upgrade: websocket")
                    && lower.contains("connection: upgrade")
                    && lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
                "{head}"
            );
            assert_eq!(read_exactly(&mut client, 17).await, "hello-from-origin");
            client.write_all(b"ping").await.unwrap();
            assert_eq!(read_exactly(&mut client, 4).await, "PING");
            client.write_all(b"over").await.unwrap();
            assert_eq!(read_exactly(&mut client, 4).await, "OVER");
        }
        // Recorded once closed, each under its listener's protocol, with the bytes each way.
        let mut relayed = Vec::new();
        for _ in 0..100 {
            relayed = decisions("?host=api.allowed.test")
                .await
                .into_iter()
                .filter(|r| r["bytes_down"] == 25)
                .map(|r| {
                    (
                        r["protocol"].clone(),
                        r["verdict"].clone(),
                        r["bytes_up"].clone(),
                    )
                })
                .collect();
            if relayed.len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        relayed.sort_by_key(|(protocol, _, _)| protocol.to_string());
        assert_eq!(
            relayed,
            [
                ("http".into(), "allow".into(), 8.into()),
                ("http-transparent".into(), "allow".into(), 8.into())
            ],
        );

        // The origin declines: its answer is the client's.
        let declined = exchange(
            addr(SIDECAR, 3128),
            ask("http://api.allowed.test/decline", "Upgrade").as_bytes(),
        )
        .await;
        assert!(
            declined.starts_with("HTTP/1.1 400") && declined.ends_with("declined"),
            "{declined}"
        );
        // Without `Connection: upgrade` nothing asks to switch, and Upgrade is not passed on.
        let not_asked = exchange(
            addr(SIDECAR, 3128),
            ask("http://api.allowed.test/ws", "close").as_bytes(),
        )
        .await;
        assert!(not_asked.starts_with("HTTP/1.1 426"), "{not_asked}");
        // A host no rule allows: refused, nothing dialled.
        let denied = exchange(
            addr(SIDECAR, 3128),
            ask("http://tracker.example/ws", "Upgrade").as_bytes(),
        )
        .await;
        assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
    });
}

/// Workloads' connections are admitted up to `limits.max_connections` on every listener
/// together, a tunnel and an upgraded connection counting for as long as they last (they outlive
/// the connection's own task); at the limit the next connection waits, unanswered and not counted,
/// until one closes. The control API is not counted, and answers at the limit.
#[test]
fn connections_are_admitted_up_to_the_limit_tunnels_included() {
    in_private_network(|| async {
        use tokio::io::AsyncReadExt;
        switching_origin(addr(ORIGIN, 80)).await;
        // An origin for the tunnel that answers its first bytes and then holds the connection.
        let holding = tokio::net::TcpListener::bind(addr(ORIGIN, 443))
            .await
            .unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = holding.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    let _ = stream.write_all(b"ack").await;
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        // The test configuration ends in its `limits` section: this line goes on under it.
        let _sidecar = start_sidecar(&format!("  max_connections: 2\n{POLICY}"), "").await;

        let mut tunnel = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        tunnel
            .write_all(
                b"CONNECT api.allowed.test:443 HTTP/1.1\r\nhost: api.allowed.test:443\r\n\r\n",
            )
            .await
            .unwrap();
        assert!(
            read_head_only(&mut tunnel)
                .await
                .starts_with("HTTP/1.1 200")
        );
        tunnel
            .write_all(&client_hello("api.allowed.test"))
            .await
            .unwrap();
        assert_eq!(
            read_exactly(&mut tunnel, 3).await,
            "ack",
            "the tunnel is up"
        );

        let mut upgraded = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        upgraded
            .write_all(b"GET http://api.allowed.test/ws HTTP/1.1\r\nhost: api.allowed.test\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n")
            .await
            .unwrap();
        assert!(
            read_head_only(&mut upgraded)
                .await
                .starts_with("HTTP/1.1 101")
        );
        assert_eq!(read_exactly(&mut upgraded, 17).await, "hello-from-origin");
        assert_eq!(
            metric("af_egress_connections_open").await,
            2,
            "the tunnel and the upgraded connection are counted"
        );

        // A third waits: not accepted, not counted, while the control API still answers.
        let mut third = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        third
            .write_all(b"GET http://api.allowed.test/plain HTTP/1.1\r\nhost: api.allowed.test\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(
            metric("af_egress_connections_open").await,
            2,
            "the third is not admitted"
        );

        // The tunnel closes: its admission is given back, and the third is served.
        drop(tunnel);
        let answer = read_all(&mut third).await;
        assert!(answer.starts_with("HTTP/1.1 426"), "{answer}");
        drop(upgraded);
    });
}

#[test]
fn mail_is_refused_and_recorded_when_not_captured() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(&POLICY.replace("mail: capture", "mail: deny"), "").await;
        let answer = exchange(addr(SIDECAR, 25), b"EHLO x\r\n").await;
        assert!(answer.starts_with("554 "), "{answer}");
        let denied = decisions("?verdict=deny").await;
        assert_eq!(denied[0]["protocol"], "smtp");
        assert_eq!(denied[0]["rule"], "mail-denied");
        assert!(inbox().await.is_empty());
    });
}

#[test]
fn a_webhook_is_delivered_to_a_service_and_recorded() {
    in_private_network(|| async {
        let service_saw = http_origin(addr(SERVICE, 8080), "web").await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let request = serde_json::json!({
            "service": "web", "path": "/hooks/payment", "method": "POST",
            "headers": {"x-signature": "t=1,v1=abc"}, "body": "{\"paid\": true}"
        });
        let (status, body) =
            control_request("POST", "/v1/webhooks", Some(TOKEN), &request.to_string()).await;
        assert!(status.contains("200"), "{status}: {body}");
        let delivery: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(delivery["status"], 200);
        assert_eq!(delivery["body"], "web saw /hooks/payment");
        let seen = headers_of(&service_saw);
        assert!(seen[0].contains("x-signature: t=1,v1=abc"), "{seen:?}");

        let unknown = serde_json::json!({"service": "nope", "path": "/", "method": "GET", "headers": {}, "body": ""});
        let (status, body) =
            control_request("POST", "/v1/webhooks", Some(TOKEN), &unknown.to_string()).await;
        assert!(
            status.contains("502") && body.contains("known: web"),
            "{status}: {body}"
        );

        let logged = decisions("?host=web").await;
        assert_eq!(logged.len(), 1);
        assert_eq!(
            (
                logged[0]["protocol"].as_str(),
                logged[0]["verdict"].as_str()
            ),
            (Some("webhook"), Some("allow"))
        );
    });
}

#[test]
fn the_decision_log_filters_and_follows() {
    in_private_network(|| async {
        http_origin(addr(ORIGIN, 80), "origin").await;
        let _sidecar = start_sidecar(POLICY, "").await;
        for host in ["api.allowed.test", "blocked.example", "blocked.example"] {
            exchange(
                addr(SIDECAR, 3128),
                format!("GET http://{host}/ HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await;
        }
        let all = decisions("").await;
        assert_eq!(all.len(), 3);
        for record in &all {
            for field in [
                "time",
                "environment",
                "client",
                "protocol",
                "method",
                "host",
                "port",
                "resolved",
                "verdict",
                "rule",
                "bytes_up",
                "bytes_down",
                "duration_ms",
            ] {
                assert!(record.get(field).is_some(), "{field} missing from {record}");
            }
            assert_eq!(record["environment"], "test-env");
            assert_eq!(
                record["client"], SIDECAR,
                "the client address as the sidecar saw it"
            );
        }
        assert_eq!(
            decisions("?verdict=deny&host=blocked.example").await.len(),
            2
        );
        assert_eq!(
            decisions("?verdict=allow").await[0]["bytes_down"],
            "origin saw /".len()
        );
        let first = all[0]["time"].as_str().unwrap();
        assert_eq!(decisions(&format!("?since={first}")).await.len(), 3);
        assert!(decisions("?since=2999-01-01T00:00:00Z").await.is_empty());

        // Follow: the stored records, then each new one as it is made.
        let mut follower = TcpStream::connect(addr("127.0.0.1", 9901)).await.unwrap();
        follower
            .write_all(format!("GET /v1/decisions?follow=true&verdict=deny HTTP/1.1\r\nhost: c\r\nauthorization: Bearer {TOKEN}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        exchange(addr(SIDECAR, 3128), b"GET http://later.example/ HTTP/1.1\r\nhost: later.example\r\nconnection: close\r\n\r\n").await;
        let mut seen = String::new();
        while !seen.contains("later.example") {
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(
                Duration::from_secs(5),
                tokio::io::AsyncReadExt::read(&mut follower, &mut chunk),
            )
            .await
            .expect("the followed record arrives")
            .unwrap();
            assert!(n > 0, "the follow stream ended: {seen}");
            seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        assert_eq!(
            seen.matches("blocked.example").count(),
            2,
            "the stored denials come first: {seen}"
        );
    });
}

#[test]
fn metrics_count_what_happened() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(POLICY, "").await;
        exchange(addr(SIDECAR, 3128), b"GET http://blocked.example/ HTTP/1.1\r\nhost: blocked.example\r\nconnection: close\r\n\r\n").await;
        dns_query(addr(SIDECAR, 53), "anything.example", 1)
            .await
            .unwrap();
        let (status, text) = control_get("/metrics", Some(TOKEN)).await;
        assert!(status.contains("200"));
        assert!(
            text.contains("af_egress_decisions_total{protocol=\"http\",verdict=\"deny\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("af_egress_dns_queries_total{outcome=\"answered\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE af_egress_connections_open gauge"),
            "{text}"
        );
        let (status, _) = control_get("/metrics", None).await;
        assert!(status.contains("401"));
    });
}

/// Identical queries for an internal name, in flight together, reach the platform's resolver once,
/// and its one answer goes to every client with the client's own id. A query that differs is
/// forwarded on its own.
#[test]
fn identical_forwarded_queries_share_one_upstream_query() {
    in_private_network(|| async {
        // The platform's resolver holds its answers until every client has asked.
        let resolver = tokio::net::UdpSocket::bind(addr(PLATFORM_DNS, 53))
            .await
            .unwrap();
        let _sidecar = start_sidecar(POLICY, "").await;
        let mut clients = Vec::new();
        for id in 1..=5u16 {
            let client = tokio::net::UdpSocket::bind("0.0.0.0:0").await.unwrap();
            let query = af_egress::dns_wire::build_query(id, "web", 1);
            client.send_to(&query, addr(SIDECAR, 53)).await.unwrap();
            clients.push((id, client));
        }
        let other = tokio::net::UdpSocket::bind("0.0.0.0:0").await.unwrap();
        let aaaa = af_egress::dns_wire::build_query(9, "web", 28);
        other.send_to(&aaaa, addr(SIDECAR, 53)).await.unwrap();
        // Wait until the sidecar has taken all six (four of them joined the first).
        for _ in 0..100 {
            let (_, text) = control_get("/metrics", Some(TOKEN)).await;
            if text.contains("af_egress_dns_forwards_joined_total 4\n")
                && text.contains("af_egress_dns_queries_total{outcome=\"forwarded\"} 6\n")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut buf = vec![0u8; 4096];
        let mut asked = Vec::new();
        for _ in 0..2 {
            let (n, from) = resolver.recv_from(&mut buf).await.unwrap();
            asked.push((buf[..n].to_vec(), from));
        }
        let mut again = [0u8; 512];
        assert!(
            resolver.try_recv_from(&mut again).is_err(),
            "the resolver was asked twice, not six times"
        );
        let mut qtypes: Vec<u8> = asked.iter().map(|(q, _)| q[q.len() - 3]).collect();
        qtypes.sort();
        assert_eq!(qtypes, vec![1, 28], "one A query and one AAAA query");
        for (query, from) in asked {
            let mut reply = query;
            reply[2] |= 0x80;
            reply[7] = 1;
            reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 10, 99, 0, 7]);
            resolver.send_to(&reply, from).await.unwrap();
        }
        for (id, client) in clients.iter().chain([(9, other)].iter()) {
            let (n, _) = tokio::time::timeout(Duration::from_secs(5), client.recv_from(&mut buf))
                .await
                .expect("every client is answered")
                .unwrap();
            assert_eq!(
                buf[..2],
                id.to_be_bytes(),
                "each client gets its own id back"
            );
            assert_eq!(
                af_egress::dns_wire::read_response_addresses(&buf[..n]),
                Some((0, vec![SERVICE.parse().unwrap()]))
            );
        }
    });
}

/// A client that ignores proxy settings and opens TLS to the sidecar on 443 is decided by its
/// ClientHello's server name: the allowed one is spliced through, the others are closed.
#[test]
fn transparent_tls_is_decided_by_server_name() {
    in_private_network(|| async {
        let origin_saw = tcp_origin(addr(ORIGIN, 443)).await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let allowed = exchange(addr(SIDECAR, 443), &client_hello("api.allowed.test")).await;
        assert!(allowed.starts_with("ack:"), "{allowed}");
        let denied = exchange(addr(SIDECAR, 443), &client_hello("tracker.example")).await;
        assert_eq!(denied, "");
        let plain = exchange(
            addr(SIDECAR, 443),
            b"GET / HTTP/1.1\r\nhost: api.allowed.test\r\n\r\n",
        )
        .await;
        assert_eq!(plain, "", "not TLS on the TLS port");
        assert_eq!(headers_of(&origin_saw).len(), 1);
        let logged = decisions("").await;
        let rules: Vec<&str> = logged.iter().map(|r| r["rule"].as_str().unwrap()).collect();
        assert!(
            rules.contains(&"not-listed") && rules.contains(&"not-tls"),
            "{rules:?}"
        );
        assert!(logged.iter().all(|r| r["protocol"] == "tls-transparent"));
    });
}

/// An origin on `at` answering every request on a connection with `name saw <path>`, closing the
/// connection after each answer when `close_after_each` (without saying so, as an origin whose
/// idle timeout strikes does). Counts the connections it accepts.
async fn counting_origin(
    at: std::net::SocketAddr,
    name: &'static str,
    close_after_each: bool,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use tokio::io::AsyncReadExt;
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind(at).await.unwrap();
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = stream.read(&mut chunk).await {
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = find(&buf, b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        buf.drain(..end + 4);
                        let path = head.split(' ').nth(1).unwrap_or("").to_string();
                        let body = format!("{name} saw {path}");
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err() || close_after_each {
                            return;
                        }
                    }
                }
            });
        }
    });
    accepted
}

/// Clients that open a connection per request share the sidecar's upstream connections: five
/// client connections, one connection to the origin. A pooled connection the origin has closed
/// is not used: against an origin that closes after every answer, every request still gets its
/// answer, each on a new connection. A connection is only reused for the address and port it was
/// dialled to: the second origin (the same address, another port) gets its own.
#[test]
fn upstream_connections_are_shared_and_never_stale() {
    in_private_network(|| async {
        let keeps = counting_origin(addr(ORIGIN, 80), "keeper", false).await;
        let closes = counting_origin(addr(ORIGIN, 8080), "closer", true).await;
        let _sidecar = start_sidecar(POLICY, "").await;
        for (host, name, n) in [
            ("api.allowed.test", "keeper", 5),
            ("203.0.113.10:8080", "closer", 3),
        ] {
            for i in 0..n {
                let answer = exchange(
                    addr(SIDECAR, 3128),
                    format!("GET http://{host}/{i} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes(),
                )
                .await;
                assert!(answer.ends_with(&format!("{name} saw /{i}")), "{answer}");
                // The client connection's upstream goes to the pool as that connection ends.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        use std::sync::atomic::Ordering::SeqCst;
        assert_eq!(
            keeps.load(SeqCst),
            1,
            "five client connections, one upstream"
        );
        assert_eq!(
            closes.load(SeqCst),
            3,
            "a closed connection is never reused"
        );
        assert_eq!(
            decisions("?verdict=allow").await.len(),
            8,
            "one record per request"
        );
    });
}

/// A tunnel carries megabytes both ways, whole and in order, through a half-close: the client
/// sends its ClientHello and 2 MiB in the same write as its CONNECT (so part of it is read with
/// the request head), then stops sending; only then does the origin answer with 3 MiB. The
/// decision log counts every byte. (Bulk moves through pipes in the kernel, small ones through a
/// buffer: `splice.rs`; this crosses both.)
#[test]
fn tunnels_carry_bulk_both_ways_whole_and_count_it() {
    use tokio::io::AsyncReadExt;
    const UP: usize = 2 << 20;
    const DOWN: usize = 3 << 20;
    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| ((i + seed) % 251) as u8).collect()
    }
    in_private_network(|| async move {
        let hello = client_hello("api.allowed.test");
        let mut expected_up = hello.clone();
        expected_up.extend(pattern(UP, 0));
        let listener = tokio::net::TcpListener::bind(addr(ORIGIN, 443))
            .await
            .unwrap();
        let origin = tokio::spawn({
            let answer = pattern(DOWN, 7);
            async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut received = Vec::new();
                stream.read_to_end(&mut received).await.unwrap();
                stream.write_all(&answer).await.unwrap();
                received
            }
        });
        let _sidecar = start_sidecar(POLICY, "").await;
        let mut client = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        let mut first =
            b"CONNECT api.allowed.test:443 HTTP/1.1\r\nhost: api.allowed.test:443\r\n\r\n".to_vec();
        first.extend_from_slice(&expected_up);
        client.write_all(&first).await.unwrap();
        client.shutdown().await.unwrap();
        let mut everything = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), client.read_to_end(&mut everything))
            .await
            .expect("the tunnel ends")
            .unwrap();
        let body_at = find(&everything, b"\r\n\r\n").expect("a response head") + 4;
        assert!(everything.starts_with(b"HTTP/1.1 200"));
        assert!(
            everything[body_at..] == pattern(DOWN, 7),
            "3 MiB down, whole and in order ({} bytes came)",
            everything.len() - body_at
        );
        assert!(
            origin.await.unwrap() == expected_up,
            "the hello and 2 MiB up, whole and in order"
        );
        let logged = decisions_once("?verdict=allow", |r| r["bytes_down"] == DOWN).await;
        assert_eq!(logged[0]["bytes_up"], expected_up.len());
    });
}

/// Two requests on one client connection, the second with a 1 MiB body streamed through.
#[test]
fn keep_alive_and_large_bodies() {
    in_private_network(|| async {
        let origin_saw = http_origin(addr(ORIGIN, 80), "origin").await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let mut client = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        client
            .write_all(
                b"GET http://api.allowed.test/one HTTP/1.1\r\nhost: api.allowed.test\r\n\r\n",
            )
            .await
            .unwrap();
        assert!(
            read_response(&mut client)
                .await
                .ends_with("origin saw /one")
        );
        let body = vec![b'x'; 1 << 20];
        client
            .write_all(format!("POST http://api.allowed.test/two HTTP/1.1\r\nhost: api.allowed.test\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes())
            .await
            .unwrap();
        client.write_all(&body).await.unwrap();
        assert!(
            read_response(&mut client)
                .await
                .ends_with("origin saw /two")
        );
        let seen = headers_of(&origin_saw);
        assert_eq!(seen.len(), 2);
        assert!(
            seen[1].starts_with("POST /two HTTP/1.1"),
            "forwarded in origin form: {seen:?}"
        );
        assert!(!seen[1].to_ascii_lowercase().contains("proxy-connection"));
        let logged = decisions_once("?verdict=allow", |r| r["bytes_up"] == 1 << 20).await;
        assert_eq!(logged.len(), 2);
    });
}

/// Misbehaving clients get a clean refusal, and the sidecar keeps serving everyone else.
#[test]
fn hostile_clients_are_refused_and_others_still_served() {
    in_private_network(|| async {
        http_origin(addr(ORIGIN, 80), "origin").await;
        let origin_tls = tcp_origin(addr(ORIGIN, 443)).await;
        let _sidecar = start_sidecar(POLICY, "").await;
        let still_serving = || async {
            let answer = exchange(addr(SIDECAR, 3128), b"GET http://api.allowed.test/ok HTTP/1.1\r\nhost: api.allowed.test\r\nconnection: close\r\n\r\n").await;
            assert!(
                answer.ends_with("origin saw /ok"),
                "the sidecar stopped serving: {answer}"
            );
        };

        // A malformed request.
        let garbage = exchange(addr(SIDECAR, 3128), b"\x00\x01GARBAGE \xff\r\n\r\n").await;
        assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage:?}");
        still_serving().await;

        // A host that is neither a name nor an address, proxied and tunnelled: refused with 400
        // and recorded, each under its own protocol.
        for request in [
            &b"GET http://bad!host/ HTTP/1.1\r\nhost: bad!host\r\nconnection: close\r\n\r\n"[..],
            b"CONNECT bad!host:443 HTTP/1.1\r\nhost: bad!host:443\r\nconnection: close\r\n\r\n",
        ] {
            let answer = exchange(addr(SIDECAR, 3128), request).await;
            assert!(
                answer.starts_with("HTTP/1.1 400")
                    && answer.contains("not a valid name")
                    && answer.contains("af egress AF-RUN-052")
                    && answer.to_ascii_lowercase().contains("x-af-verdict: deny"),
                "{answer}"
            );
        }
        let refused = decisions("?verdict=deny&host=bad!host").await;
        let protocols: Vec<&str> = refused
            .iter()
            .filter(|r| r["rule"] == "invalid-host")
            .filter_map(|r| r["protocol"].as_str())
            .collect();
        assert_eq!(protocols, ["http", "connect"], "{refused:?}");
        still_serving().await;

        // A slowloris client: it starts a request head and never finishes it.
        let mut slow = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        slow.write_all(
            b"GET http://api.allowed.test/ HTTP/1.1\r\nhost: api.allowed.test\r\nx-slow: ",
        )
        .await
        .unwrap();
        still_serving().await;
        let slow_answer = until_closed(&mut slow)
            .await
            .expect("the slow client is cut off");
        assert!(
            slow_answer.is_empty() || slow_answer.starts_with("HTTP/1.1 408"),
            "{slow_answer}"
        );

        // A 10 MB header.
        let mut huge = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        let _ = huge
            .write_all(b"GET http://api.allowed.test/ HTTP/1.1\r\nx-huge: ")
            .await;
        let filler = vec![b'a'; 1 << 20];
        for _ in 0..10 {
            if huge.write_all(&filler).await.is_err() {
                break;
            }
        }
        let huge_answer = until_closed(&mut huge)
            .await
            .expect("the 10 MB header is refused, not buffered");
        assert!(
            huge_answer.is_empty() || huge_answer.starts_with("HTTP/1.1 431"),
            "{}",
            &huge_answer[..huge_answer.len().min(100)]
        );
        still_serving().await;

        // A ClientHello split across segments, arriving slowly.
        let mut split = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        split
            .write_all(
                b"CONNECT api.allowed.test:443 HTTP/1.1\r\nhost: api.allowed.test:443\r\n\r\n",
            )
            .await
            .unwrap();
        assert!(read_response(&mut split).await.starts_with("HTTP/1.1 200"));
        let hello = client_hello("api.allowed.test");
        for piece in hello.chunks(7) {
            split.write_all(piece).await.unwrap();
            split.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let answer = read_all(&mut split).await;
        assert_eq!(
            answer,
            format!("ack:{}", hello.len()),
            "the reassembled hello reached the origin whole"
        );
        assert_eq!(headers_of(&origin_tls).len(), 1);

        // Garbage on the DNS port, over UDP and TCP.
        let udp = tokio::net::UdpSocket::bind("0.0.0.0:0").await.unwrap();
        udp.send_to(b"\x13\x37not dns at all", addr(SIDECAR, 53))
            .await
            .unwrap();
        udp.send_to(b"\x00", addr(SIDECAR, 53)).await.unwrap();
        let tcp_garbage = exchange(addr(SIDECAR, 53), b"\x00\x05hello").await;
        assert!(tcp_garbage.len() < 64, "{tcp_garbage:?}");
        let (rcode, answer) = dns_query(addr(SIDECAR, 53), "still.example", 1)
            .await
            .expect("DNS still answers");
        assert_eq!((rcode, answer), (0, vec![SIDECAR.parse().unwrap()]));
        still_serving().await;
    });
}

/// Names without a fixed answer are asked of the configured nameserver (the sidecar's own
/// queries, no C library), and the answer is classified like any other: here the platform's
/// resolver answers with an address on the environment's network, which only an address rule
/// lets through.
#[test]
fn allowed_names_are_resolved_through_the_nameserver_and_still_classified() {
    in_private_network(|| async {
        let resolver_saw = platform_dns(addr(PLATFORM_DNS, 53)).await;
        let service_saw = http_origin(addr(SERVICE, 80), "service").await;
        let policy = POLICY.replace(
            "    - 203.0.113.0/24",
            "    - 203.0.113.0/24\n    - 10.99.0.7/32",
        );
        let _sidecar =
            start_sidecar_resolving(&policy, "", &format!("  nameservers: [{PLATFORM_DNS}:53]"))
                .await;
        let answer = exchange(addr(SIDECAR, 3128), b"GET http://dynamic.allowed.test/ HTTP/1.1\r\nhost: dynamic.allowed.test\r\nconnection: close\r\n\r\n").await;
        assert!(answer.ends_with("service saw /"), "{answer}");
        assert!(headers_of(&resolver_saw).contains(&"dynamic.allowed.test".to_string()));
        assert_eq!(headers_of(&service_saw).len(), 1);
        let logged = decisions("?host=dynamic.allowed.test").await;
        assert_eq!(logged[0]["rule"], "*.allowed.test via 10.99.0.7/32");
    });
}

/// HTTPS capture: with the environment's capture CA, a captured host reached over TLS — through a
/// CONNECT tunnel or as a transparent client on 443 — is answered by the sidecar behind a
/// certificate for that name, and the request lands in the inbox. A client that does not trust the
/// CA gets no answer and the log says why; a request naming another host inside a captured
/// connection is misdirected.
#[test]
fn captured_https_is_answered_behind_the_environment_ca() {
    in_private_network(|| async {
        let (ca_cert, tls_capture) = capture_ca("https");
        let _sidecar = start_sidecar(POLICY, &tls_capture).await;

        let body = r#"{"amount": 990}"#;
        let charge = format!(
            "POST /v1/charges HTTP/1.1\r\nhost: api.payments.test\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let tunnel = connect_tunnel("api.payments.test:443").await;
        let answer = tls_exchange(
            tunnel,
            "api.payments.test",
            Some(&ca_cert),
            charge.as_bytes(),
        )
        .await
        .expect("the sidecar's certificate verifies against the environment's CA");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(r#"{"id": "ch_twin"}"#), "{answer}");

        let transparent = TcpStream::connect(addr(SIDECAR, 443)).await.unwrap();
        let answer = tls_exchange(
            transparent,
            "hooks.chat.test",
            Some(&ca_cert),
            b"POST /hook HTTP/1.1\r\nhost: hooks.chat.test\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi",
        )
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");

        let misdirected = tls_exchange(
            TcpStream::connect(addr(SIDECAR, 443)).await.unwrap(),
            "hooks.chat.test",
            Some(&ca_cert),
            b"GET / HTTP/1.1\r\nhost: api.allowed.test\r\nconnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        assert!(misdirected.starts_with("HTTP/1.1 421"), "{misdirected}");
        // A second name smuggled in beside the captured one (battery E21, inside TLS).
        for hosts in [
            "host: hooks.chat.test\r\nhost: api.allowed.test",
            "host: api.allowed.test@hooks.chat.test",
        ] {
            let ambiguous = tls_exchange(
                TcpStream::connect(addr(SIDECAR, 443)).await.unwrap(),
                "hooks.chat.test",
                Some(&ca_cert),
                format!("POST /smuggled HTTP/1.1\r\n{hosts}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
            assert!(
                ambiguous.starts_with("HTTP/1.1 400") && ambiguous.contains("AF-RUN-057"),
                "{hosts}: {ambiguous}"
            );
        }

        let untrusting = tls_exchange(
            connect_tunnel("api.payments.test:443").await,
            "api.payments.test",
            None,
            b"GET / HTTP/1.1\r\n\r\n",
        )
        .await;
        let err = untrusting
            .expect_err("a client that does not trust the CA cannot finish the handshake");
        assert!(err.contains("UnknownIssuer"), "{err}");

        let entries = inbox().await;
        let hosts: Vec<(&str, &str)> = entries
            .iter()
            .map(|e| (e["host"].as_str().unwrap(), e["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            hosts,
            [
                ("api.payments.test", "/v1/charges"),
                ("hooks.chat.test", "/hook")
            ],
            "{entries:?}"
        );
        assert_eq!(entries[0]["body"], body);

        let logged = decisions("").await;
        let line = |host: &str, protocol: &str| {
            logged
                .iter()
                .filter(|r| r["host"] == host && r["protocol"] == protocol)
                .map(|r| format!("{} {} {}", r["verdict"], r["method"], r["rule"]))
                .collect::<Vec<_>>()
        };
        let through_tunnel = line("api.payments.test", "connect");
        assert!(
            through_tunnel.contains(&"\"capture\" \"POST\" \"api.payments.test\"".to_string()),
            "{through_tunnel:?}"
        );
        assert!(
            through_tunnel
                .iter()
                .any(|l| l.contains("tls handshake failed")
                    && l.contains("trust the environment's capture CA")),
            "{through_tunnel:?}"
        );
        let transparent = line("hooks.chat.test", "tls-transparent");
        assert!(
            transparent.contains(&"\"capture\" \"POST\" \"hooks.chat.test\"".to_string())
                && transparent
                    .contains(&"\"deny\" \"GET\" \"misdirected:api.allowed.test\"".to_string()),
            "{transparent:?}"
        );
    });
}

/// Mail over STARTTLS: with the environment's capture CA the SMTP sink offers STARTTLS, answers
/// the handshake behind a certificate for the name the client asked for, and captures the mail
/// sent inside. A client that does not trust the CA gets no further and the log says why; commands
/// sent after STARTTLS, before the handshake, end the session unanswered.
#[test]
fn mail_over_starttls_is_captured_behind_the_environment_ca() {
    in_private_network(|| async {
        let (ca_cert, tls_capture) = capture_ca("starttls");
        let _sidecar = start_sidecar(POLICY, &tls_capture).await;

        let mut smtp = TcpStream::connect(addr(SIDECAR, 25)).await.unwrap();
        let offer = ask_for_tls(&mut smtp).await;
        assert!(offer.contains("250-STARTTLS"), "{offer}");
        let transcript = tls_exchange(
            smtp,
            "smtp.mail.test",
            Some(&ca_cert),
            b"EHLO shop\r\nMAIL FROM:<orders@shop.test>\r\nRCPT TO:<bob@customer.test>\r\nDATA\r\nSubject: Sealed\r\n\r\nOver TLS.\r\n.\r\nQUIT\r\n",
        )
        .await
        .expect("the sink's certificate verifies against the environment's CA");
        assert!(transcript.contains("250 2.0.0 captured as"), "{transcript}");
        assert!(
            !transcript.contains("STARTTLS"),
            "not offered again inside TLS: {transcript}"
        );
        let entries = inbox().await;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0]["subject"], "Sealed");
        assert_eq!(entries[0]["to"], serde_json::json!(["bob@customer.test"]));
        assert_eq!(entries[0]["body"], "Over TLS.\r\n");

        let mut untrusting = TcpStream::connect(addr(SIDECAR, 25)).await.unwrap();
        ask_for_tls(&mut untrusting).await;
        let err = tls_exchange(untrusting, "smtp.mail.test", None, b"EHLO x\r\n")
            .await
            .expect_err("a client that does not trust the CA cannot finish the handshake");
        assert!(err.contains("UnknownIssuer"), "{err}");

        let injected = exchange(
            addr(SIDECAR, 25),
            b"EHLO x\r\nSTARTTLS\r\nMAIL FROM:<in-the-clear@x.test>\r\n",
        )
        .await;
        assert!(
            injected
                .trim_end()
                .ends_with("220 2.0.0 ready to start TLS"),
            "nothing after STARTTLS is answered in the clear: {injected}"
        );
        assert_eq!(inbox().await.len(), 1);

        // The sidecar records a failed handshake once it has read the client's alert: ask until
        // both STARTTLS records are in (bounded, so a missing one fails below).
        let mut rules: Vec<String> = Vec::new();
        for _ in 0..100 {
            rules = decisions("?verdict=capture")
                .await
                .iter()
                .map(|r| {
                    format!(
                        "{} {} {}",
                        r["method"].as_str().unwrap(),
                        r["host"].as_str().unwrap(),
                        r["rule"].as_str().unwrap()
                    )
                })
                .collect();
            if rules.iter().filter(|r| r.starts_with("STARTTLS")).count() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            rules.contains(&"DATA customer.test mail (starttls)".to_string()),
            "{rules:?}"
        );
        assert!(
            rules.iter().any(|r| r
                .starts_with("STARTTLS smtp.mail.test mail (tls handshake failed")
                && r.contains("trust the environment's capture CA")),
            "{rules:?}"
        );
        assert_eq!(
            rules.iter().filter(|r| r.starts_with("STARTTLS")).count(),
            2,
            "the failed handshake and the session that sent commands before it: {rules:?}"
        );
    });
}

/// Mail over implicit TLS (SMTPS, port 465) is captured behind the environment's CA as STARTTLS
/// mail is: the handshake first, then the greeting and the same conversation, recorded as
/// `mail (smtps)`.
#[test]
fn mail_over_smtps_is_captured_behind_the_environment_ca() {
    in_private_network(|| async {
        let (ca_cert, tls_capture) = capture_ca("smtps");
        let _sidecar = start_sidecar(POLICY, &tls_capture).await;
        let smtps = TcpStream::connect(addr(SIDECAR, 465)).await.unwrap();
        let transcript = tls_exchange(
            smtps,
            "smtp.mail.test",
            Some(&ca_cert),
            b"EHLO shop\r\nMAIL FROM:<orders@shop.test>\r\nRCPT TO:<carol@customer.test>\r\nDATA\r\nSubject: Implicit\r\n\r\nOver SMTPS.\r\n.\r\nQUIT\r\n",
        )
        .await
        .expect("the sink's certificate verifies against the environment's CA");
        assert!(transcript.starts_with("220 af-sidecar"), "{transcript}");
        assert!(transcript.contains("250 2.0.0 captured as"), "{transcript}");
        assert!(
            !transcript.contains("STARTTLS"),
            "not offered over TLS: {transcript}"
        );
        let entries = inbox().await;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0]["subject"], "Implicit");
        assert_eq!(entries[0]["body"], "Over SMTPS.\r\n");
        let captured = decisions("?verdict=capture").await;
        assert_eq!(captured[0]["method"], "DATA", "{captured:?}");
        assert_eq!(captured[0]["rule"], "mail (smtps)", "{captured:?}");
        assert_eq!(captured[0]["port"], 465, "{captured:?}");
    });
}

/// A client that speaks TLS first cannot read a refusal in the clear: without a capture CA, or
/// with mail denied (next test), an SMTPS session is closed, and the decision log says why.
#[test]
fn smtps_without_a_capture_ca_is_closed_and_recorded() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(POLICY, "").await;
        let smtps = TcpStream::connect(addr(SIDECAR, 465)).await.unwrap();
        let err = tls_exchange(smtps, "smtp.mail.test", None, b"EHLO x\r\n").await;
        assert!(err.is_err(), "no handshake without a CA: {err:?}");
        let record = smtps_record("capture").await;
        assert!(
            record["rule"]
                .as_str()
                .unwrap()
                .starts_with("mail (tls not captured: this sidecar has no capture CA"),
            "{record}"
        );
        assert!(inbox().await.is_empty());
    });
}

#[test]
fn smtps_with_mail_denied_is_closed_and_recorded() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(&POLICY.replace("mail: capture", "mail: deny"), "").await;
        let smtps = TcpStream::connect(addr(SIDECAR, 465)).await.unwrap();
        let err = tls_exchange(smtps, "smtp.mail.test", None, b"EHLO x\r\n").await;
        assert!(err.is_err(), "mail denied: {err:?}");
        let record = smtps_record("deny").await;
        assert_eq!(record["rule"], "mail-denied", "{record}");
        assert!(inbox().await.is_empty());
    });
}

/// The decision record of an SMTPS session with `verdict`, once the sidecar has written it
/// (asked again for a while, so a missing one fails).
async fn smtps_record(verdict: &str) -> serde_json::Value {
    for _ in 0..100 {
        let found = decisions(&format!("?verdict={verdict}"))
            .await
            .into_iter()
            .find(|r| r["method"] == "SMTPS");
        if let Some(found) = found {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no SMTPS {verdict} record");
}

/// The positive control for the offer: without a capture CA, STARTTLS is neither offered nor
/// accepted, and plain mail is still captured.
#[test]
fn without_a_capture_ca_starttls_is_neither_offered_nor_accepted() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(POLICY, "").await;
        let transcript = exchange(
            addr(SIDECAR, 25),
            b"EHLO x\r\nSTARTTLS\r\nMAIL FROM:<a@shop.test>\r\nRCPT TO:<b@customer.test>\r\nDATA\r\nSubject: plain\r\n\r\nhi\r\n.\r\nQUIT\r\n",
        )
        .await;
        assert!(!transcript.contains("250-STARTTLS"), "{transcript}");
        assert!(transcript.contains("250 2.0.0 captured as"), "{transcript}");
        assert!(
            transcript.contains("\r\n454 4.7.0 TLS not available"),
            "{transcript}"
        );
        assert!(
            transcript.trim_end().ends_with("221 2.0.0 bye"),
            "{transcript}"
        );
    });
}

/// Reads the greeting, says EHLO, asks for STARTTLS and reads its go-ahead; returns the EHLO
/// answer.
async fn ask_for_tls(smtp: &mut TcpStream) -> String {
    assert!(read_reply(smtp).await.starts_with("220 "));
    smtp.write_all(b"EHLO shop\r\n").await.unwrap();
    let offer = read_reply(smtp).await;
    smtp.write_all(b"STARTTLS\r\n").await.unwrap();
    let go_ahead = read_reply(smtp).await;
    assert!(go_ahead.starts_with("220 "), "{go_ahead}");
    offer
}

/// One SMTP reply, multi-line or not, read a byte at a time so that nothing after it is taken
/// from the socket (the TLS handshake follows on the same connection).
async fn read_reply(stream: &mut TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut reply = Vec::new();
    let mut line_start = 0;
    loop {
        let byte = stream.read_u8().await.expect("an SMTP reply");
        reply.push(byte);
        if byte == b'\n' {
            // The last line of a reply has a space after its code; the others a dash.
            if reply.get(line_start + 3) == Some(&b' ') {
                return String::from_utf8_lossy(&reply).into_owned();
            }
            line_start = reply.len();
        }
    }
}

/// A fresh capture CA written to files, and the sidecar configuration line that names them.
fn capture_ca(name: &str) -> (String, String) {
    let af_sidecar_api::CaptureCaPem { cert, key } = af_sidecar_api::new_ca("test-env").unwrap();
    let dir = std::env::temp_dir().join(format!("af-egress-ca-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.pem"), &cert).unwrap();
    std::fs::write(dir.join("ca.key"), &key).unwrap();
    let config = format!(
        "tls_capture: {{ca_cert_file: {}, ca_key_file: {}}}\n",
        dir.join("ca.pem").display(),
        dir.join("ca.key").display()
    );
    (cert, config)
}

/// The positive control for the CA: the same tunnel to a captured host, from a sidecar without a
/// capture CA, is refused, and the log names the missing CA.
#[test]
fn captured_https_without_a_capture_ca_is_refused_and_recorded() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(POLICY, "").await;
        let mut tunnel = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        tunnel
            .write_all(
                b"CONNECT api.payments.test:443 HTTP/1.1\r\nhost: api.payments.test:443\r\n\r\n",
            )
            .await
            .unwrap();
        let refused = read_response(&mut tunnel).await;
        assert!(refused.starts_with("HTTP/1.1 502"), "{refused}");
        let logged = decisions("").await;
        assert!(
            logged.iter().any(|r| r["verdict"] == "capture"
                && r["rule"].as_str().unwrap().contains("no capture CA")),
            "the log says why: {logged:?}"
        );
    });
}

/// A CONNECT to an allowed destination that cannot be reached is answered 502, saying so, instead
/// of a tunnel that closes at once; it is logged as allowed with nothing moved. Positive control:
/// the same address on a port that listens gets its tunnel.
#[test]
fn connect_to_an_unreachable_allowed_destination_is_a_502() {
    in_private_network(|| async {
        let _sidecar = start_sidecar(POLICY, "").await;
        tcp_origin(addr(ORIGIN, 4444)).await;
        let mut open = connect_tunnel(&format!("{ORIGIN}:4444")).await;
        open.write_all(&client_hello(ORIGIN)).await.unwrap();
        let mut ack = [0u8; 64];
        let n = tokio::io::AsyncReadExt::read(&mut open, &mut ack)
            .await
            .unwrap();
        assert!(ack[..n].starts_with(b"ack:"), "positive control");

        let mut stream = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
        let authority = format!("{ORIGIN}:4443");
        stream
            .write_all(
                format!("CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        let answer = read_response(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(
            answer.contains(&format!(
                "AF-RUN-054: the sidecar could not reach {authority}"
            )),
            "{answer}"
        );
        let logged = decisions_once("", |r| r["port"] == 4443).await;
        let record = logged.iter().find(|r| r["port"] == 4443).unwrap();
        assert_eq!(record["verdict"], "allow", "{record}");
        assert_eq!(record["protocol"], "connect", "{record}");
        assert_eq!(
            (record["bytes_up"].as_u64(), record["bytes_down"].as_u64()),
            (Some(0), Some(0)),
            "{record}"
        );
    });
}

/// A CONNECT tunnel through the sidecar, its 200 read.
async fn connect_tunnel(authority: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr(SIDECAR, 3128)).await.unwrap();
    stream
        .write_all(format!("CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_response(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream
}

/// Opens TLS to `server_name` over `stream`, trusting `ca` (or nothing), sends `request` and reads
/// the answer to the end. The error is the handshake's.
async fn tls_exchange(
    stream: TcpStream,
    server_name: &str,
    ca: Option<&str>,
    request: &[u8],
) -> Result<String, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use tokio::io::AsyncReadExt;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string()).unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, stream)
        .await
        .map_err(|e| format!("{e:?}"))?;
    tls.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut out)).await;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A nameserver for the sidecar's own lookups, at PLATFORM_DNS:53 (UDP and TCP), counting the
/// queries it gets. Every A question is answered with ORIGIN, after a record for another owner
/// (`decoy.test`) pointing at SERVICE: a resolver that takes the first address it sees dials the
/// decoy. Names starting `big.` are too big for UDP: the UDP answer is truncated and empty, the
/// TCP one whole.
async fn lookup_nameserver() -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use hickory_proto::op::{Message, MessageType};
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{Name, RData, Record, RecordType};
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncReadExt;

    fn answer(query: &[u8], over_udp: bool) -> Option<Vec<u8>> {
        let asked = Message::from_vec(query).ok()?;
        let question = asked.queries.first()?.clone();
        let mut reply = Message::new(
            asked.metadata.id,
            MessageType::Response,
            asked.metadata.op_code,
        );
        reply.add_query(question.clone());
        let big = question.name().to_ascii().starts_with("big.");
        if over_udp && big {
            reply.metadata.truncation = true;
        } else if question.query_type() == RecordType::A {
            let decoy = Name::from_ascii("decoy.test.").unwrap();
            let decoy_ip: std::net::Ipv4Addr = SERVICE.parse().unwrap();
            let origin: std::net::Ipv4Addr = ORIGIN.parse().unwrap();
            reply.add_answer(Record::from_rdata(decoy, 300, RData::A(A(decoy_ip))));
            reply.add_answer(Record::from_rdata(
                question.name().clone(),
                300,
                RData::A(A(origin)),
            ));
        }
        reply.to_vec().ok()
    }

    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let udp = tokio::net::UdpSocket::bind(addr(PLATFORM_DNS, 53))
        .await
        .unwrap();
    let tcp = tokio::net::TcpListener::bind(addr(PLATFORM_DNS, 53))
        .await
        .unwrap();
    let counted = asked.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = udp.recv_from(&mut buf).await {
            counted.fetch_add(1, Ordering::Relaxed);
            if let Some(reply) = answer(&buf[..n], true) {
                let _ = udp.send_to(&reply, from).await;
            }
        }
    });
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = tcp.accept().await {
            tokio::spawn(async move {
                let Ok(len) = stream.read_u16().await else {
                    return;
                };
                let mut query = vec![0u8; usize::from(len)];
                if stream.read_exact(&mut query).await.is_err() {
                    return;
                }
                if let Some(reply) = answer(&query, false) {
                    let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&reply);
                    let _ = stream.write_all(&framed).await;
                }
            });
        }
    });
    asked
}

/// The sidecar's own lookups of allowed names (hole 4 of issue 27): kept in a cache bounded by
/// entries, however many names a workload invents under a wildcard rule; only records of the name
/// asked count (a decoy record for another owner is not dialled); a truncated answer is asked
/// again over TCP. Judged where the requests land: ORIGIN gets them all, the decoy (SERVICE, an
/// address a rule allows too) none; the cache's size through `/metrics`.
#[test]
fn the_sidecars_own_lookups_are_bounded_checked_and_complete() {
    in_private_network(|| async {
        let asked = lookup_nameserver().await;
        let origin_saw = http_origin(addr(ORIGIN, 80), "origin").await;
        let decoy_saw = http_origin(addr(SERVICE, 80), "decoy").await;
        let policy = POLICY.replace(
            "    - 203.0.113.0/24",
            "    - 203.0.113.0/24\n    - 10.99.0.7/32",
        );
        let _sidecar = start_sidecar_resolving(
            &policy,
            "",
            &format!("  nameservers: [{PLATFORM_DNS}:53]\n  cache_entries: 20"),
        )
        .await;

        let get = |host: String| async move {
            exchange(
                addr(SIDECAR, 3128),
                format!("GET http://{host}/ HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
        };
        let direct = get(SERVICE.to_string()).await;
        assert!(
            direct.ends_with("decoy saw /"),
            "positive control: the sidecar may dial the decoy's address: {direct}"
        );
        const NAMES: usize = 100;
        for n in 0..NAMES {
            let answer = get(format!("n{n}.cdn.allowed.test")).await;
            assert!(answer.ends_with("origin saw /"), "n{n}: {answer}");
        }
        assert_eq!(headers_of(&origin_saw).len(), NAMES);
        assert_eq!(
            headers_of(&decoy_saw).len(),
            1,
            "the decoy record was never dialled"
        );
        let held = metric("af_egress_resolver_cache_entries").await;
        assert!((1..=20).contains(&held), "{held} names held, bound 20");

        // Kept: the last name again costs the nameserver nothing.
        let before = asked.load(std::sync::atomic::Ordering::Relaxed);
        let again = get(format!("n{}.cdn.allowed.test", NAMES - 1)).await;
        assert!(again.ends_with("origin saw /"), "{again}");
        assert_eq!(
            asked.load(std::sync::atomic::Ordering::Relaxed),
            before,
            "answered from the cache"
        );

        let big = get("big.cdn.allowed.test".to_string()).await;
        assert!(
            big.ends_with("origin saw /"),
            "the truncated answer was asked again over TCP: {big}"
        );
    });
}

/// A relay's destination is fixed by the configuration: a connection to a relay the manifest named
/// reaches its host at a private address and is recorded with its bytes each way; one the policy
/// allows by name reaches it through the policy's address rule; and the same private host is
/// refused when only the policy would let it through (no address rule), as are an unlisted host,
/// a captured one and a named host that resolves to the metadata address. Each refusal is judged
/// where the packet would land: the private host counts every connection that reaches it, and
/// only the named relay's arrives (the positive control, through the same sidecar).
#[test]
fn relays_reach_their_fixed_destination_when_decided_and_record_bytes_each_way() {
    use tokio::io::AsyncReadExt;
    in_private_network(|| async {
        let private = tcp_origin(addr(PRIVATE, 5432)).await;
        let public = tcp_origin(addr(ORIGIN, 5432)).await;
        let relays = format!(
            "relays:
  - {{listen: {SIDECAR}:6001, host: db.private.test, port: 5432, named_by: database.host}}
  - {{listen: {SIDECAR}:6002, host: api.allowed.test, port: 5432}}
  - {{listen: {SIDECAR}:6003, host: rebind-private.allowed.test, port: 5432}}
  - {{listen: {SIDECAR}:6004, host: unlisted.test, port: 5432}}
  - {{listen: {SIDECAR}:6005, host: hooks.chat.test, port: 5432}}
  - {{listen: {SIDECAR}:6006, host: rebind-metadata.allowed.test, port: 5432, named_by: database.host}}
  - {{listen: {SIDECAR}:6007, host: {PRIVATE}, port: 5432}}
"
        );
        let _sidecar = start_sidecar_resolving(
            POLICY,
            &relays,
            &format!("    db.private.test: [{PRIVATE}]"),
        )
        .await;
        let exchange = |port: u16| async move {
            let mut client = TcpStream::connect(addr(SIDECAR, port)).await.unwrap();
            // Refused connections are closed unread: the write may already find them gone.
            let _ = client.write_all(b"startup-packet").await;
            let _ = client.shutdown().await;
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
                .await
                .expect("the relay ends the connection");
            String::from_utf8_lossy(&answer).into_owned()
        };
        assert_eq!(exchange(6001).await, "ack:14", "the named relay");
        assert_eq!(
            exchange(6002).await,
            "ack:14",
            "the relay the policy allows"
        );
        for refused in [6003, 6004, 6005, 6006, 6007] {
            assert_eq!(exchange(refused).await, "", "relay on {refused}");
        }
        let records = decisions_once("?verdict=allow", |r| {
            r["protocol"] == "relay" && r["host"] == "api.allowed.test" && r["bytes_down"] == 6
        })
        .await;
        let named = records
            .iter()
            .find(|r| r["host"] == "db.private.test")
            .expect("the named relay's record");
        assert_eq!(named["method"], "TCP");
        assert_eq!(named["rule"], "database.host");
        assert_eq!(named["resolved"], format!("{PRIVATE}:5432"));
        assert_eq!(named["bytes_up"], 14);
        assert_eq!(named["bytes_down"], 6);
        let allowed = records
            .iter()
            .find(|r| r["host"] == "api.allowed.test")
            .unwrap();
        assert_eq!(allowed["rule"], "api.allowed.test via 203.0.113.0/24");
        let denied = decisions_once("?verdict=deny", |r| r["host"] == PRIVATE).await;
        let reason = |host: &str| {
            denied
                .iter()
                .find(|r| r["host"] == host && r["protocol"] == "relay")
                .unwrap_or_else(|| panic!("no refusal of {host}: {denied:?}"))["rule"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            reason("rebind-private.allowed.test"),
            format!("resolved-to-private:{PRIVATE}")
        );
        assert_eq!(reason("unlisted.test"), "not-listed");
        assert_eq!(reason("hooks.chat.test"), "captured-host-not-relayed");
        assert_eq!(
            reason("rebind-metadata.allowed.test"),
            format!("resolved-to-link-local:{METADATA}")
        );
        assert_eq!(reason(PRIVATE), "ip-literal");
        assert_eq!(
            private.lock().unwrap().as_slice(),
            ["14 bytes"],
            "only the named relay's connection reached the private host"
        );
        assert_eq!(public.lock().unwrap().as_slice(), ["14 bytes"]);
    });
}
