//! What the restart tests share: a run of tickets, waiting for some to finish, and the check that
//! each ran to completion exactly once.

use std::time::{Duration, Instant};

use afe_store::{Store, TicketState};
use serde_json::json;

use super::Engine;

pub const TICKETS: usize = 30;

pub fn steps() -> serde_json::Value {
    json!({"n1": {"sleep_ms": 50}, "n2": {"sleep_ms": 50}, "n3": {"sleep_ms": 50}})
}

/// Waits until at least `count` tickets are done.
pub async fn some_done(engine: &Engine, tickets: &[String], count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut done = 0;
        for id in tickets {
            if engine
                .store
                .ticket(id)
                .await
                .is_ok_and(|t| t.state == TicketState::Done)
            {
                done += 1;
            }
        }
        if done >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} done\\n{}",
            engine.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every ticket done, each node completed exactly once and each ticket finished once.
pub async fn each_ran_to_completion_once(engine: &Engine, tickets: &[String]) {
    let ended = engine.ended(tickets).await;
    assert!(
        ended.iter().all(|t| t.state == TicketState::Done),
        "{:?}\n{}",
        ended
            .iter()
            .map(|t| (&t.id, t.state, &t.reason))
            .collect::<Vec<_>>(),
        engine.logs()
    );
    for id in tickets {
        let events = engine.store.events(id, 0, 10_000).await.unwrap();
        for node in ["n1", "n2", "n3"] {
            let completions = events
                .iter()
                .filter(|e| e.kind == "node.completed" && e.payload["node"] == node)
                .count();
            assert_eq!(completions, 1, "{id} {node} completed {completions} times");
        }
        let finished = events.iter().filter(|e| e.kind == "ticket.done").count();
        assert_eq!(finished, 1, "{id} finished {finished} times");
    }
}
