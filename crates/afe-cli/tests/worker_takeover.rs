//! A worker killed in the middle of a node of a real flow (git and exec in the Docker sandbox), on
//! PostgreSQL and Redis: another worker takes the ticket over when the first's lease expires and
//! finishes it — the interrupted node run again from the last checkpoint in a new sandbox, the
//! completed ones never again.

mod tickets;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use afe_queue::{Queue, QueueSettings, RedisQueue};
use afe_store::{NewTicket, SqlStore, Store, TicketState};
use tickets::*;

fn worker(dir: &std::path::Path, name: &str, store: &str, prefix: &str) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_afe"))
        .args(["worker", "--store", store, "--broker"])
        .arg(afe_testkit::redis_url())
        .args(["--prefix", prefix, "--id", name])
        // A lease of seconds: the second worker waits it out, it never races it.
        .args([
            "--lease-ttl",
            "3s",
            "--reclaim-after",
            "4s",
            "--sweep-every",
            "1s",
        ])
        .args(["--requeue-queued-after", "3s"])
        .env("AFE_GIT_TOKEN", TOKEN)
        .env("AFE_LOG", "info,sqlx=warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_ticket_is_taken_over_and_finished() {
    let dir = afe_testkit::scratch("afe-takeover");
    config(&dir, &[], true, None);
    let (server, input) = repository(&dir).await;
    let config = afe_config::load_folder(&dir).unwrap();
    let revision = afe_config::Revision::of(&config);
    let database = afe_testkit::TestDatabase::create().await;
    let store = SqlStore::connect(&database.url).await.unwrap();
    store
        .put_revision(&revision.hash, &revision.normalized)
        .await
        .unwrap();
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&input).unwrap()).unwrap();
    let ticket = store
        .create_ticket(&NewTicket {
            flow: "demo".into(),
            input,
            revision: revision.hash.clone(),
            budget_micros: None,
        })
        .await
        .unwrap()
        .id;
    let prefix = afe_testkit::unique("afe-takeover");
    let queue = RedisQueue::connect(&afe_testkit::redis_url(), &prefix, QueueSettings::default())
        .await
        .unwrap();
    queue.enqueue(&ticket).await.unwrap();

    let mut first = worker(&dir, "first", &database.url, &prefix);
    // The first worker is cut inside the test node: its command is seen running first.
    wait_for_process(&ticket, "sleep 600").await;
    first.kill().unwrap();
    first.wait().unwrap();
    let mut second = worker(&dir, "second", &database.url, &prefix);

    let logs = || {
        ["first", "second"]
            .iter()
            .map(|n| std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    // Until it ends, asked every half second (the deadline only ends a test whose ticket never
    // would; it times nothing).
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    let ended = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the ticket never ended:\n{}",
            logs()
        );
        let found = store.ticket(&ticket).await.unwrap();
        if found.state.is_terminal() {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status();
    let _ = second.wait();
    assert_eq!(
        ended.state,
        TicketState::Done,
        "{:?}\n{}",
        ended.reason,
        logs()
    );

    let runs = attempts(&store, &ticket).await;
    assert_eq!(
        (runs["clone"], runs["change"], runs["test"], runs["push"]),
        (1, 1, 2, 1),
        "completed nodes ran once; the interrupted one again"
    );
    let owners: Vec<String> = store
        .events(&ticket, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "ticket.claimed")
        .map(|e| e.payload["owner"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        owners.first().map(String::as_str),
        Some("first:0"),
        "{owners:?}"
    );
    assert_eq!(
        owners.last().map(String::as_str),
        Some("second:0"),
        "{owners:?}"
    );
    let branch = format!("refs/heads/afe/{ticket}/work");
    assert_eq!(
        server.file("app", &branch, "notes.txt").as_deref(),
        Some(&b"notes\nchanged\n"[..])
    );
    assert_eq!(server.seen.pushes.load(Ordering::SeqCst), 1);
    assert_eq!(
        left_of(&ticket).await,
        (0, 0),
        "the first worker's sandbox went when the second restored into a new one"
    );
}
