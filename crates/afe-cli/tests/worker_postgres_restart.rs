//! PostgreSQL restarted under running workers — a private server of this test's own, stopped as a
//! crash would stop it and started again, so the machine's server, which other tests use at the
//! same time, is never touched: the workers reconnect and finish every ticket, each node
//! completed once.

mod engine;

use std::time::Duration;

use engine::restarts::{TICKETS, each_ran_to_completion_once, some_done, steps};
use engine::{Engine, Pair};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_mid_run_the_workers_reconnect_and_finish() {
    let postgres = afe_testkit::PrivatePostgres::start().await;
    let mut engine = Engine::start(
        Pair::Servers {
            postgres: postgres.admin_url(),
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
    postgres.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    postgres.resume().await;
    each_ran_to_completion_once(&engine, &tickets).await;
    engine.close().await;
}
