//! Crash tests with real processes, on both pairs (PostgreSQL + Redis, SQLite + in-process
//! queue): `afe worker` killed with SIGKILL in the middle of a node, or after its paid call but
//! before the completion committed; paused with SIGSTOP until its lease was taken over; stopped
//! with SIGTERM. The scripted executor writes each step to a calls file, so executions are
//! counted across processes.

mod engine;

use afe_store::{LedgerState, NodeState, Store, TicketState};
use engine::{Engine, Pair};
use serde_json::json;

fn servers() -> Pair {
    Pair::Servers {
        postgres: afe_testkit::postgres_admin_url(),
        redis: afe_testkit::redis_url(),
    }
}

macro_rules! on_both_pairs {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres_and_redis() {
                super::$name(super::servers()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite_and_embedded() {
                super::$name(super::engine::Pair::Embedded).await;
            }
        }
    )+};
}

on_both_pairs!(
    a_worker_killed_in_the_middle_of_a_node_is_taken_over_without_rerunning_completed_nodes,
    a_worker_killed_between_paying_and_committing_gets_exactly_one_retry,
    a_paused_worker_whose_lease_was_taken_over_writes_nothing_when_it_resumes,
    sigterm_lets_the_node_finish_then_releases_the_ticket,
    an_executor_that_overspends_stops_the_ticket_and_the_ledger_adds_up,
    a_hundred_tickets_through_four_workers_each_node_run_exactly_once,
);

async fn a_worker_killed_in_the_middle_of_a_node_is_taken_over_without_rerunning_completed_nodes(
    pair: Pair,
) {
    let mut engine = Engine::start(pair, json!({"n2": {"sleep_ms": 2000}}), None).await;
    let ticket = engine.tickets(1).await.remove(0);
    engine.worker("first", &[]);
    engine.wait_for("start", &ticket, "n2", 1).await;
    engine.signal("first", "KILL");
    engine.worker("second", &[]);
    let ended = engine.ended(std::slice::from_ref(&ticket)).await;
    assert_eq!(ended[0].state, TicketState::Done, "{}", engine.logs());
    // n1 completed before the kill: never executed again. n2 was interrupted: run again.
    assert_eq!(engine.count("start", &ticket, "n1"), 1);
    assert_eq!(engine.count("start", &ticket, "n2"), 2);
    assert_eq!(engine.count("done", &ticket, "n2"), 1);
    assert_eq!(engine.count("start", &ticket, "n3"), 1);
    let runs = engine.store.node_runs(&ticket).await.unwrap();
    let n2 = runs.iter().find(|r| r.node == "n2").unwrap();
    assert_eq!(n2.attempts, 2);
    assert_eq!(n2.output, Some(json!({"node": "n2", "attempt": 2})));
    engine.close().await;
}

async fn a_worker_killed_between_paying_and_committing_gets_exactly_one_retry(pair: Pair) {
    let mut engine = Engine::start(
        pair,
        json!({"n2": {"cost_usd": 0.25, "hold_after_paid_ms": 3000}}),
        Some(5.0),
    )
    .await;
    let ticket = engine.tickets(1).await.remove(0);
    engine.worker("first", &[]);
    engine.wait_for("paid", &ticket, "n2", 1).await;
    engine.signal("first", "KILL");
    engine.worker("second", &["--grace", "1s"]);
    let ended = engine.ended(std::slice::from_ref(&ticket)).await;
    assert_eq!(ended[0].state, TicketState::Done, "{}", engine.logs());
    // The ambiguous window: the call was paid, the completion never committed. Exactly one retry.
    let runs = engine.store.node_runs(&ticket).await.unwrap();
    let n2 = runs.iter().find(|r| r.node == "n2").unwrap();
    assert_eq!(n2.attempts, 2, "exactly one retry, recorded");
    assert_eq!(engine.count("paid", &ticket, "n2"), 2);
    assert_eq!(engine.count("start", &ticket, "n1"), 1);
    assert_eq!(engine.count("start", &ticket, "n3"), 1);
    // The dead worker's reservation was released at takeover; the retry's was settled.
    let ledger = engine.store.ledger(&ticket).await.unwrap();
    let states: Vec<LedgerState> = ledger.iter().map(|e| e.state).collect();
    assert_eq!(states, [LedgerState::Released, LedgerState::Settled]);
    assert_eq!(ledger[1].settled_micros, Some(250_000));
    engine.close().await;
}

async fn a_paused_worker_whose_lease_was_taken_over_writes_nothing_when_it_resumes(pair: Pair) {
    let mut engine = Engine::start(pair, json!({"n2": {"sleep_ms": 1500}}), None).await;
    let ticket = engine.tickets(1).await.remove(0);
    engine.worker("paused", &[]);
    engine.wait_for("start", &ticket, "n2", 1).await;
    engine.signal("paused", "STOP");
    // Its lease expires; another worker takes the ticket over and finishes it.
    engine.worker("taker", &[]);
    let ended = engine.ended(std::slice::from_ref(&ticket)).await;
    assert_eq!(ended[0].state, TicketState::Done, "{}", engine.logs());
    let events_before = engine.store.events(&ticket, 0, 10_000).await.unwrap();
    let runs_before = engine.store.node_runs(&ticket).await.unwrap();
    // The paused worker resumes, finishes its node in memory, and tries to write.
    engine.signal("paused", "CONT");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !engine.log("paused").contains("LeaseLost") {
        assert!(
            std::time::Instant::now() < deadline,
            "the resumed worker never noticed: {}",
            engine.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        engine.store.events(&ticket, 0, 10_000).await.unwrap(),
        events_before,
        "no event after the resume"
    );
    assert_eq!(engine.store.node_runs(&ticket).await.unwrap(), runs_before);
    let n2 = runs_before.iter().find(|r| r.node == "n2").unwrap();
    assert_eq!(n2.output, Some(json!({"node": "n2", "attempt": 2})));
    assert_eq!(
        engine.store.ticket(&ticket).await.unwrap().state,
        TicketState::Done
    );
    engine.close().await;
}

async fn sigterm_lets_the_node_finish_then_releases_the_ticket(pair: Pair) {
    let mut engine = Engine::start(pair, json!({"n2": {"sleep_ms": 1000}}), None).await;
    let ticket = engine.tickets(1).await.remove(0);
    engine.worker("leaving", &["--grace", "20s"]);
    engine.wait_for("start", &ticket, "n2", 1).await;
    engine.signal("leaving", "TERM");
    let status = engine
        .exited("leaving", std::time::Duration::from_secs(60))
        .await;
    assert!(status.success(), "{}", engine.logs());
    // It finished n2 and let go before n3.
    assert_eq!(engine.count("done", &ticket, "n2"), 1);
    assert_eq!(engine.count("start", &ticket, "n3"), 0);
    let held = engine.store.ticket(&ticket).await.unwrap();
    assert_eq!(held.state, TicketState::Running);
    assert_eq!(held.lease_owner, None, "released, not left to expire");
    engine.worker("next", &[]);
    let ended = engine.ended(std::slice::from_ref(&ticket)).await;
    assert_eq!(ended[0].state, TicketState::Done, "{}", engine.logs());
    for node in ["n1", "n2", "n3"] {
        assert_eq!(engine.count("start", &ticket, node), 1, "{node} ran once");
    }
    let runs = engine.store.node_runs(&ticket).await.unwrap();
    assert!(
        runs.iter()
            .all(|r| r.state == NodeState::Completed && r.attempts == 1)
    );
    engine.close().await;
}

async fn an_executor_that_overspends_stops_the_ticket_and_the_ledger_adds_up(pair: Pair) {
    // A $1.00 budget; each node reserves $0.40 and the provider reports $0.45.
    let step = json!({"cost_usd": 0.40, "settle_usd": 0.45});
    let mut engine =
        Engine::start(pair, json!({"n1": step, "n2": step, "n3": step}), Some(1.0)).await;
    let ticket = engine.tickets(1).await.remove(0);
    engine.worker("spender", &[]);
    let ended = engine.ended(std::slice::from_ref(&ticket)).await;
    assert_eq!(ended[0].state, TicketState::Failed, "{}", engine.logs());
    assert_eq!(ended[0].reason.as_deref(), Some("BudgetExceeded"));
    // n3 started but its reservation ($0.90 spent + $0.40 > $1.00) was refused: no paid call.
    assert_eq!(engine.count("start", &ticket, "n3"), 1);
    assert_eq!(engine.count("paid", &ticket, "n3"), 0);
    let ledger = engine.store.ledger(&ticket).await.unwrap();
    let settled: i64 = ledger.iter().filter_map(|e| e.settled_micros).sum();
    let paid_calls = engine
        .calls()
        .iter()
        .filter(|c| c.ticket == ticket && c.step == "paid")
        .count() as i64;
    assert_eq!(settled, paid_calls * 450_000, "the ledger adds up exactly");
    assert_eq!(settled, 900_000);
    assert!(ledger.iter().all(|e| e.state == LedgerState::Settled));
    engine.close().await;
}

async fn a_hundred_tickets_through_four_workers_each_node_run_exactly_once(pair: Pair) {
    let mut engine = Engine::start(pair, json!({}), None).await;
    let tickets = engine.tickets(100).await;
    for name in ["w1", "w2", "w3", "w4"] {
        engine.worker(name, &[]);
    }
    let ended = engine.ended(&tickets).await;
    assert!(
        ended.iter().all(|t| t.state == TicketState::Done),
        "{}",
        engine.logs()
    );
    let calls = engine.calls();
    for ticket in &tickets {
        for node in ["n1", "n2", "n3"] {
            let runs = calls
                .iter()
                .filter(|c| &c.ticket == ticket && c.node == node && c.step == "start")
                .count();
            assert_eq!(runs, 1, "{ticket} {node} ran {runs} times");
        }
    }
    engine.close().await;
}
