//! Redis restarted under running workers (a private server, stopped and started with its
//! append-only file, as seed 003 runs it): no ticket is lost, none runs a node twice to completion.

mod engine;

use std::time::Duration;

use engine::restarts::{TICKETS, each_ran_to_completion_once, some_done, steps};
use engine::{Engine, Pair};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_run_loses_no_ticket_and_runs_none_twice() {
    let mut redis = afe_testkit::PrivateRedis::start().await;
    let mut engine = Engine::start(
        Pair::Servers {
            postgres: afe_testkit::postgres_admin_url(),
            redis: redis.url(),
        },
        steps(),
        None,
    )
    .await;
    let tickets = engine.tickets(TICKETS).await;
    engine.worker("w1", &[]);
    engine.worker("w2", &[]);
    some_done(&engine, &tickets, 3).await;
    redis.stop().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.resume().await;
    each_ran_to_completion_once(&engine, &tickets).await;
    engine.close().await;
}
