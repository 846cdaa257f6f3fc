//! `afe serve` and `afe worker` as real processes on PostgreSQL and Redis, driven through the
//! API and `afe ticket`: a ticket's events stream live over a WebSocket to a client that drops
//! and reconnects halfway, and it sees every stored event once, in order; a configuration changed
//! while a ticket runs gives the next ticket the new revision and leaves the running one on its
//! own, with no process restarted; PostgreSQL down makes the API answer 503 with a code, and it
//! recovers; the token is required.

mod engine;

use std::time::{Duration, Instant};

use afe_store::{Admin, Store, TicketState};
use engine::api::{afe_ticket_with, http_client};
use engine::{Engine, Pair, TOKEN};
use serde_json::{Value, json};

fn servers() -> Pair {
    Pair::Servers {
        postgres: afe_testkit::postgres_admin_url(),
        redis: afe_testkit::redis_url(),
    }
}

/// `afe ticket ARGS` against `server` with the right token; its status, stdout and stderr.
fn afe_ticket(server: &str, args: &[&str]) -> (i32, String, String) {
    afe_ticket_with(server, Some(TOKEN), args)
}

fn start_ticket(server: &str, dir: &std::path::Path, n: i64) -> Value {
    engine::api::start_ticket(server, TOKEN, dir, "work", json!({"n": n}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_live_to_a_client_that_reconnects_halfway_without_gaps_or_duplicates() {
    let gate = afe_testkit::scratch("afe-gate").join("open");
    let steps = json!({
        "n1": {"sleep_ms": 20},
        // The ticket waits here until the client has dropped and come back.
        "n2": {"sleep_ms": 20, "until_file": gate},
        "n3": {"sleep_ms": 20, "cost_usd": 0.01},
    });
    let mut engine = Engine::start(servers(), steps, Some(1.0)).await;
    engine.worker("w1", &[]);
    let server = engine.serve("serve");
    let ticket = start_ticket(&server, &engine.dir, 7);
    let id = ticket["id"].as_str().unwrap().to_string();
    assert_eq!(ticket["state"], "queued");

    // First connection: from the start, until n2 has started; then the client goes away.
    let seen = engine::api::seqs_across_a_reconnect(&server, TOKEN, &id, "n2", async {
        // While it is away, the ticket moves on.
        std::fs::write(&gate, "").unwrap();
        engine.wait_for("done", &id, "n2", 1).await;
    })
    .await;
    let stored: Vec<i64> = engine
        .store
        .events(&id, 0, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seen, stored, "every stored event once, in order");

    // The client follows the same log over SSE and exits as the ticket ended.
    let (status, out, err) = afe_ticket(&server, &["events", &id, "--follow", "--json"]);
    assert_eq!(status, 0, "{err}");
    let followed: Vec<i64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(followed, stored);
    // What the API reports of it.
    let (status, out, err) = afe_ticket(&server, &["get", &id, "--json"]);
    assert_eq!(status, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["state"],
        "done"
    );
    let http = http_client();
    let ledger: Value = serde_json::from_slice(
        &http
            .get(format!("{server}/v1/tickets/{id}/ledger"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(ledger["spentMicros"], 10_000);
    let metrics = http
        .get(format!("{server}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("afe_tickets{state=\"done\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("afe_spent_usd_total 0.01"), "{metrics}");
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_while_a_ticket_runs_pins_the_next_ticket_only_and_restarts_nothing() {
    let gate = afe_testkit::scratch("afe-gate").join("open");
    let steps = json!({"n2": {"until_file": gate}});
    let mut engine = Engine::start(servers(), steps, None).await;
    engine.worker("w1", &["--concurrency", "2"]);
    let server = engine.serve("serve");
    let (serve_pid, worker_pid) = (engine.pid("serve"), engine.pid("w1"));
    let first = start_ticket(&server, &engine.dir, 1);
    let first_id = first["id"].as_str().unwrap().to_string();
    let old = first["revision"].as_str().unwrap().to_string();
    engine.wait_for("start", &first_id, "n2", 1).await;

    // The folder changes: a fourth node.
    afe_testkit::chain_config(&engine.config_dir(), 4, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    let new = loop {
        if let Some(current) = engine.store.current_revision().await.unwrap()
            && current.hash != old
        {
            break current.hash;
        }
        assert!(Instant::now() < deadline, "{}", engine.log("serve"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let second = start_ticket(&server, &engine.dir, 2);
    let second_id = second["id"].as_str().unwrap().to_string();
    assert_eq!(second["revision"], json!(new));
    // The first is still in its node: it kept its revision while it ran.
    let running = engine.store.ticket(&first_id).await.unwrap();
    assert_eq!(running.state, TicketState::Running);
    assert_eq!(running.revision, old);

    std::fs::write(&gate, "").unwrap();
    let ended = engine.ended(&[first_id.clone(), second_id.clone()]).await;
    assert!(
        ended.iter().all(|t| t.state == TicketState::Done),
        "{ended:?}"
    );
    let nodes = |id: &str| {
        engine
            .calls()
            .iter()
            .filter(|c| c.ticket == id && c.step == "done")
            .map(|c| c.node.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(nodes(&first_id), ["n1", "n2", "n3"], "the old flow");
    assert_eq!(nodes(&second_id), ["n1", "n2", "n3", "n4"], "the new flow");
    // Nothing restarted: the same processes, still running.
    assert_eq!(
        (engine.pid("serve"), engine.pid("w1")),
        (serve_pid, worker_pid)
    );
    for name in ["serve", "w1"] {
        let child = &mut engine
            .workers
            .iter_mut()
            .find(|(n, _)| n == name)
            .unwrap()
            .1;
        assert!(child.try_wait().unwrap().is_none(), "{name} exited");
    }
    // An invalid folder is reported and changes nothing.
    std::fs::write(
        engine.config_dir().join("broken.yaml"),
        "kind: Flow\nspec: [",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !engine.log("serve").contains("not a valid config") {
        assert!(Instant::now() < deadline, "{}", engine.log("serve"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        engine.store.current_revision().await.unwrap().unwrap().hash,
        new
    );
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_down_the_api_answers_503_with_a_code_and_recovers() {
    let postgres = afe_testkit::PrivatePostgres::start().await;
    let mut engine = Engine::start(
        Pair::Servers {
            postgres: postgres.admin_url(),
            redis: afe_testkit::redis_url(),
        },
        json!({}),
        None,
    )
    .await;
    let server = engine.serve("serve");
    let http = http_client();
    let get = |path: &str| {
        http.get(format!("{server}{path}"))
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(30))
            .send()
    };
    assert_eq!(get("/v1/tickets").await.unwrap().status(), 200);
    postgres.stop();
    // Until the pool notices, a request may still be answered; then every one is a 503.
    let deadline = Instant::now() + Duration::from_secs(60);
    let problem: Value = loop {
        let answer = get("/v1/tickets").await.unwrap();
        let status = answer.status().as_u16();
        assert!(status == 200 || status == 503, "{status}");
        if status == 503 {
            break serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
        }
        assert!(Instant::now() < deadline, "never 503");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(problem["code"], "AFE-STO-001", "{problem}");
    assert!(!problem["help"].as_str().unwrap().is_empty());
    let ready = http.get(format!("{server}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    // The client says it in a person's words, with the code.
    let (status, _, err) = afe_ticket(&server, &["list"]);
    assert_eq!(status, 1);
    assert!(err.contains("AFE-STO-001"), "{err}");
    postgres.resume().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while get("/v1/tickets").await.unwrap().status() != 200 {
        assert!(
            Instant::now() < deadline,
            "never recovered\n{}",
            engine.log("serve")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready = http.get(format!("{server}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    engine.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_needs_the_token_and_serve_refuses_to_start_without_one() {
    let mut engine = Engine::start(servers(), json!({}), None).await;
    let server = engine.serve("serve");
    for token in [None, Some("wrong")] {
        let (status, _, err) = afe_ticket_with(&server, token, &["list"]);
        assert_eq!(status, 1, "{err}");
        assert!(err.contains("AFE-API-001"), "{err}");
    }
    let (status, _, err) = afe_ticket_with("http://127.0.0.1:9", Some(TOKEN), &["list"]);
    assert_eq!(status, 1);
    assert!(err.contains("AFE-CLI-001"), "{err}");
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_afe"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            &engine.store_url,
        ])
        .env_remove("AFE_API_TOKEN")
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(4));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("AFE-SRV-001"), "{said}");
    // On a laptop, on purpose, it starts and says so.
    let log = engine.dir.join("open.log");
    let (mut open, url) = engine::api::spawn_serve(
        &["--insecure-no-auth", "--store", &engine.store_url],
        None,
        &log,
    );
    let (status, _, err) = afe_ticket_with(&url, None, &["list"]);
    assert_eq!(status, 0, "{err}");
    let _ = open.kill();
    let _ = open.wait();
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("WARNING: --insecure-no-auth"),
        "loudly"
    );
    engine.close().await;
}
