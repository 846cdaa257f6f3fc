//! PostgreSQL restarted under running workers (the machine's cluster, with pg_ctlcluster; this
//! binary holds the only test that touches it, and cargo runs test binaries one at a time): the
//! workers reconnect and finish every ticket, each node completed once.

mod engine;

use std::time::Duration;

use engine::restarts::{TICKETS, each_ran_to_completion_once, some_done, steps};
use engine::{Engine, Pair};

fn pg_ctlcluster(action: &str) {
    let version = std::fs::read_dir("/etc/postgresql")
        .expect("PostgreSQL's clusters are in /etc/postgresql (.ci/install installs it)")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .max()
        .expect("a PostgreSQL cluster");
    let status = std::process::Command::new("pg_ctlcluster")
        .args([&version, "main", action])
        .status()
        .expect("pg_ctlcluster runs (as root)");
    assert!(status.success(), "pg_ctlcluster {version} main {action}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_mid_run_the_workers_reconnect_and_finish() {
    let mut engine = Engine::start(
        Pair::Servers {
            redis: afe_testkit::redis_url(),
        },
        steps(),
        None,
    )
    .await;
    let tickets = engine.tickets(TICKETS).await;
    engine.worker("w1", &[]);
    engine.worker("w2", &[]);
    some_done(&engine, &tickets, 3).await;
    pg_ctlcluster("stop");
    tokio::time::sleep(Duration::from_secs(1)).await;
    pg_ctlcluster("start");
    each_ran_to_completion_once(&engine, &tickets).await;
    engine.close().await;
}
