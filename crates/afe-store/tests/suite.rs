//! One suite, both stores: every test runs against PostgreSQL (a fresh database of its own) and
//! SQLite (a fresh file). The servers are real; `.ci/install` starts PostgreSQL.

use std::time::Duration;

use afe_store::{
    Admin, Completion, Cursor, Finish, Lease, LedgerState, NewCheckpoint, NewTicket, NodeState,
    Settlement, SqlStore, Store, StoreError, TicketFilter, TicketState,
};
use afe_testkit::{TestDatabase, chain_revision, scratch, sqlite_url};
use serde_json::json;

macro_rules! on_both_stores {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let db = afe_testkit::TestDatabase::create().await;
                let store = afe_store::SqlStore::connect(&db.url).await.unwrap();
                super::$name(&store).await;
                store.close().await;
                db.remove().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let dir = afe_testkit::scratch("afe-store");
                let store = afe_store::SqlStore::connect(&afe_testkit::sqlite_url(&dir))
                    .await
                    .unwrap();
                super::$name(&store).await;
                store.close().await;
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    )+};
}

on_both_stores!(
    claims_are_exclusive_and_a_taken_over_lease_writes_nothing,
    a_node_completes_in_one_transaction_and_never_runs_again,
    bundles_are_stored_in_chunks_and_checked,
    a_reservation_over_budget_stops_the_ticket_and_the_ledger_adds_up,
    a_dead_workers_reservations_are_released_when_its_lease_is_taken_over,
    money_an_agent_reports_spent_is_kept_even_past_the_budget_and_stops_the_ticket,
    a_reservation_whose_call_reached_the_provider_is_settled_not_released,
    a_turn_is_journaled_with_its_settlement,
    events_are_ordered_and_readable_from_any_position,
    tickets_needing_a_worker_are_found_and_dead_letters_fail_only_unheld_tickets,
    release_lets_another_worker_claim_at_once,
    a_ticket_needs_a_stored_revision,
    cancelling_a_running_ticket_takes_its_lease_and_ended_tickets_refuse,
    a_paused_ticket_is_not_claimed_until_resumed,
    a_rerun_copies_the_nodes_before_its_node_with_their_checkpoints,
    tickets_are_listed_newest_first_by_cursor_and_filtered,
    the_newest_publication_is_the_current_revision,
    stats_count_tickets_money_and_node_durations,
);

const LONG: Duration = Duration::from_secs(60);

/// The test's clock: the lease on ticket `id` is over now. Leases are judged by the database's
/// clock; a test that sleeps past a short one races it on a busy machine (eight claims once saw
/// two winners when a 300 ms lease ran out between them), so every lease here is long and ends
/// when the test says.
async fn expire_lease(store: &SqlStore, id: &str) {
    sqlx::query("UPDATE afe_tickets SET lease_expires_at = 0 WHERE id = $1")
        .bind(id.to_string())
        .execute(store.pool())
        .await
        .unwrap();
}

async fn ticket(store: &SqlStore, budget_micros: Option<i64>) -> String {
    let revision = chain_revision(3, None);
    store
        .put_revision(&revision.hash, &revision.normalized)
        .await
        .unwrap();
    // Storing a revision twice changes nothing.
    store
        .put_revision(&revision.hash, &revision.normalized)
        .await
        .unwrap();
    assert_eq!(
        store.revision(&revision.hash).await.unwrap(),
        revision.normalized
    );
    store
        .create_ticket(&NewTicket {
            flow: "work".into(),
            input: json!({"n": 1}),
            revision: revision.hash,
            budget_micros,
        })
        .await
        .unwrap()
        .id
}

async fn claim(store: &SqlStore, id: &str, owner: &str, ttl: Duration) -> Lease {
    store.claim(id, owner, ttl).await.unwrap().unwrap().0
}

fn lost<T: std::fmt::Debug>(result: Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::LeaseLost { .. }))
}

async fn claims_are_exclusive_and_a_taken_over_lease_writes_nothing(store: &SqlStore) {
    let id = ticket(store, None).await;
    // Eight workers race for one ticket: exactly one gets it.
    let claims = futures_join(
        (0..8)
            .map(|i| {
                let store = store.clone();
                let id = id.clone();
                tokio::spawn(async move { store.claim(&id, &format!("w{i}"), LONG).await })
            })
            .collect(),
    )
    .await;
    let winners: Vec<Lease> = claims
        .into_iter()
        .filter_map(|c| c.unwrap().map(|(lease, _)| lease))
        .collect();
    assert_eq!(winners.len(), 1, "one claim wins");
    let first = winners[0].clone();
    assert_eq!(first.epoch, 1);
    assert_eq!(store.ticket(&id).await.unwrap().state, TicketState::Running);
    store.start_node(&first, "n1").await.unwrap();
    // The lease expires; another worker takes over with a new epoch.
    expire_lease(store, &id).await;
    let second = claim(store, &id, "w-next", LONG).await;
    assert_eq!(second.epoch, 2);
    // The first worker, resumed, can write nothing at all.
    assert!(lost(store.heartbeat(&first, LONG).await));
    assert!(lost(store.start_node(&first, "n2").await));
    assert!(lost(store.reserve(&first, "n1", "p", 1).await));
    let completion = Completion::output_only("n1", json!("stale"), "x");
    assert!(lost(store.complete_node(&first, completion.clone()).await));
    assert!(lost(store.fail_node(&first, "n1", "x").await));
    assert!(lost(store.finish(&first, Finish::Done).await));
    assert!(lost(store.release(&first).await));
    assert!(lost(
        store.record(&first, "egress.decision", json!({})).await
    ));
    // The new holder can; the heartbeat extends its lease.
    let extended = store.heartbeat(&second, LONG).await.unwrap();
    assert!(extended.expires_at >= second.expires_at);
    store.start_node(&second, "n1").await.unwrap();
    let noted = store
        .record(&second, "egress.decision", json!({"host": "pypi.org"}))
        .await
        .unwrap();
    assert_eq!(noted.kind, "egress.decision");
    assert_eq!(
        store.events(&id, noted.seq - 1, 10).await.unwrap()[0].payload,
        json!({"host": "pypi.org"})
    );
    store.complete_node(&second, completion).await.unwrap();
    let runs = store.node_runs(&id).await.unwrap();
    assert_eq!(runs[0].attempts, 2, "started once by each holder");
    assert_eq!(runs[0].output, Some(json!("stale")));
    // A live lease cannot be claimed.
    assert!(store.claim(&id, "w-other", LONG).await.unwrap().is_none());
}

/// Joins spawned tasks (no futures crate needed).
async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

async fn a_node_completes_in_one_transaction_and_never_runs_again(store: &SqlStore) {
    let id = ticket(store, Some(10_000_000)).await;
    let lease = claim(store, &id, "w", LONG).await;
    store.start_node(&lease, "n1").await.unwrap();
    let reservation = store
        .reserve(&lease, "n1", "openrouter", 500_000)
        .await
        .unwrap();
    let events = store
        .complete_node(
            &lease,
            Completion {
                node: "n1".into(),
                state: NodeState::Completed,
                output: json!({"plan": ["a", "b"]}),
                settlements: vec![Settlement {
                    reservation: reservation.id,
                    usd_micros: 420_000,
                    tokens_in: 1200,
                    tokens_out: 300,
                }],
                checkpoint: Some(NewCheckpoint {
                    head: "5d2c0ffee".into(),
                    git_ref: "refs/afe/x/n1".into(),
                    parent: None,
                    bundle: b"bundle bytes".to_vec(),
                }),
                resume_token: "after:n1:1".into(),
            },
        )
        .await
        .unwrap();
    // The settlement's event, then the completion's, committed together.
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["ledger.settled", "node.completed"]);
    assert_eq!(events[0].payload["usd_micros"], 420_000);
    // Everything the transaction wrote is there together.
    let runs = store.node_runs(&id).await.unwrap();
    assert_eq!(runs[0].state, NodeState::Completed);
    assert_eq!(runs[0].output, Some(json!({"plan": ["a", "b"]})));
    let ledger = store.ledger(&id).await.unwrap();
    assert_eq!(ledger[0].state, LedgerState::Settled);
    assert_eq!(ledger[0].settled_micros, Some(420_000));
    assert_eq!((ledger[0].tokens_in, ledger[0].tokens_out), (1200, 300));
    let checkpoints = store.checkpoints(&id).await.unwrap();
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(
        (
            checkpoints[0].git_ref.as_str(),
            checkpoints[0].head.as_str()
        ),
        ("refs/afe/x/n1", "5d2c0ffee")
    );
    assert_eq!(events[1].payload["checkpoint"], json!(checkpoints[0].id));
    assert_eq!(
        store.bundle(checkpoints[0].id).await.unwrap(),
        b"bundle bytes"
    );
    let ticket = store.ticket(&id).await.unwrap();
    assert_eq!(ticket.resume_token.as_deref(), Some("after:n1:1"));
    // A completed node is never started again.
    assert!(matches!(
        store.start_node(&lease, "n1").await,
        Err(StoreError::InvalidState { .. })
    ));
    // A node cannot complete without having started; a settlement needs an open reservation.
    let unstarted = Completion::output_only("n2", json!(1), "y");
    assert!(matches!(
        store.complete_node(&lease, unstarted).await,
        Err(StoreError::InvalidState { .. })
    ));
    // A failed completion wrote nothing (the whole transaction rolled back).
    store.start_node(&lease, "n2").await.unwrap();
    let bad = Completion {
        node: "n2".into(),
        state: NodeState::Completed,
        output: json!("half"),
        settlements: vec![Settlement {
            reservation: reservation.id, // already settled
            usd_micros: 1,
            tokens_in: 0,
            tokens_out: 0,
        }],
        checkpoint: None,
        resume_token: "z".into(),
    };
    assert!(store.complete_node(&lease, bad).await.is_err());
    let n2 = store
        .node_runs(&id)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.node == "n2")
        .unwrap();
    assert_eq!(n2.state, NodeState::Started);
    assert_eq!(n2.output, None);
    store.finish(&lease, Finish::Done).await.unwrap();
    assert_eq!(store.ticket(&id).await.unwrap().state, TicketState::Done);
    assert!(
        store.claim(&id, "w2", LONG).await.unwrap().is_none(),
        "a done ticket is not claimed"
    );
}

async fn bundles_are_stored_in_chunks_and_checked(store: &SqlStore) {
    let store = store.clone().with_chunk_size(1000);
    let id = ticket(&store, None).await;
    let lease = claim(&store, &id, "w", LONG).await;
    store.start_node(&lease, "n1").await.unwrap();
    let bundle: Vec<u8> = (0..2500u32).map(|i| (i % 253) as u8).collect();
    store
        .complete_node(
            &lease,
            Completion {
                node: "n1".into(),
                state: NodeState::Completed,
                output: json!(null),
                settlements: vec![],
                checkpoint: Some(NewCheckpoint {
                    head: String::new(),
                    git_ref: "refs/afe/t/n1".into(),
                    parent: None,
                    bundle: bundle.clone(),
                }),
                resume_token: "r".into(),
            },
        )
        .await
        .unwrap();
    let checkpoint = store.checkpoints(&id).await.unwrap().remove(0);
    assert_eq!(checkpoint.size, 2500);
    assert_eq!(store.bundle(checkpoint.id).await.unwrap(), bundle);
    let chunks: i64 = sqlx_count(&store, checkpoint.id).await;
    assert_eq!(chunks, 3, "2500 bytes in chunks of 1000");
    // A chunk changed behind the store's back is caught, not handed on.
    corrupt_a_chunk(&store, checkpoint.id).await;
    assert!(matches!(
        store.bundle(checkpoint.id).await,
        Err(StoreError::Corrupt { .. })
    ));
}

async fn sqlx_count(store: &SqlStore, checkpoint: i64) -> i64 {
    use sqlx::Row;
    let statement = store
        .dialect()
        .sql("SELECT CAST(COUNT(*) AS BIGINT) FROM afe_checkpoint_chunks WHERE checkpoint = $1");
    sqlx::query(&statement)
        .bind(checkpoint)
        .fetch_one(store.pool())
        .await
        .unwrap()
        .try_get(0)
        .unwrap()
}

async fn corrupt_a_chunk(store: &SqlStore, checkpoint: i64) {
    let statement = store
        .dialect()
        .sql("UPDATE afe_checkpoint_chunks SET data = $2 WHERE checkpoint = $1 AND seq = 1");
    sqlx::query(&statement)
        .bind(checkpoint)
        .bind(vec![0u8; 1000])
        .execute(store.pool())
        .await
        .unwrap();
}

async fn a_reservation_over_budget_stops_the_ticket_and_the_ledger_adds_up(store: &SqlStore) {
    let id = ticket(store, Some(1_000_000)).await;
    let lease = claim(store, &id, "w", LONG).await;
    let mut spent = 0;
    for node in ["n1", "n2"] {
        store.start_node(&lease, node).await.unwrap();
        let r = store.reserve(&lease, node, "p", 400_000).await.unwrap();
        store
            .complete_node(
                &lease,
                Completion {
                    node: node.into(),
                    state: NodeState::Completed,
                    output: json!(null),
                    settlements: vec![Settlement {
                        reservation: r.id,
                        usd_micros: 450_000,
                        tokens_in: 1,
                        tokens_out: 1,
                    }],
                    checkpoint: None,
                    resume_token: node.into(),
                },
            )
            .await
            .unwrap();
        spent += 450_000;
    }
    store.start_node(&lease, "n3").await.unwrap();
    // 900 000 spent; 400 000 more would pass the 1 000 000 budget.
    let refused = store.reserve(&lease, "n3", "p", 400_000).await;
    match refused {
        Err(StoreError::BudgetExceeded {
            budget,
            committed,
            asked,
            ..
        }) => assert_eq!((budget, committed, asked), (1_000_000, 900_000, 400_000)),
        other => panic!("expected BudgetExceeded, got {other:?}"),
    }
    let ticket = store.ticket(&id).await.unwrap();
    assert_eq!(ticket.state, TicketState::Failed);
    assert_eq!(ticket.reason.as_deref(), Some("BudgetExceeded"));
    // It does not keep spending: nothing more can be written under the lease.
    assert!(lost(store.reserve(&lease, "n3", "p", 1).await));
    let ledger = store.ledger(&id).await.unwrap();
    let settled: i64 = ledger.iter().filter_map(|e| e.settled_micros).sum();
    assert_eq!(settled, spent);
    assert!(ledger.iter().all(|e| e.state == LedgerState::Settled));
    assert_eq!(
        ledger.len(),
        2,
        "the refused reservation was never recorded"
    );
    let kinds: Vec<String> = store
        .events(&id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.ends_with(&["budget.exceeded".to_string(), "ticket.failed".to_string()]));
}

/// An ACP agent pays its own model and reports what it spent afterwards: each report is a ledger
/// entry settled at once; the one that takes the ticket past its budget is still kept (it was
/// spent), and the ticket stops as a refused reservation would stop it.
async fn money_an_agent_reports_spent_is_kept_even_past_the_budget_and_stops_the_ticket(
    store: &SqlStore,
) {
    let id = ticket(store, Some(1_000_000)).await;
    let lease = claim(store, &id, "w", LONG).await;
    store.start_node(&lease, "review").await.unwrap();
    let events = store.spent(&lease, "review", "acp", 600_000).await.unwrap();
    assert_eq!(events[0].kind, "ledger.spent");
    assert_eq!(events[0].payload["usd_micros"], 600_000);
    match store.spent(&lease, "review", "acp", 500_000).await {
        Err(StoreError::BudgetExceeded {
            budget,
            committed,
            asked,
            ..
        }) => assert_eq!((budget, committed, asked), (1_000_000, 600_000, 500_000)),
        other => panic!("expected BudgetExceeded, got {other:?}"),
    }
    let ticket = store.ticket(&id).await.unwrap();
    assert_eq!(ticket.state, TicketState::Failed);
    assert_eq!(ticket.reason.as_deref(), Some("BudgetExceeded"));
    let ledger = store.ledger(&id).await.unwrap();
    assert!(ledger.iter().all(|e| e.state == LedgerState::Settled));
    let settled: i64 = ledger.iter().filter_map(|e| e.settled_micros).sum();
    assert_eq!(settled, 1_100_000, "both reports are in the ledger");
    assert!(lost(store.spent(&lease, "review", "acp", 1).await));
}

async fn a_dead_workers_reservations_are_released_when_its_lease_is_taken_over(store: &SqlStore) {
    let id = ticket(store, Some(1_000_000)).await;
    let dead = claim(store, &id, "dead", LONG).await;
    store.start_node(&dead, "n1").await.unwrap();
    store.reserve(&dead, "n1", "p", 900_000).await.unwrap();
    expire_lease(store, &id).await;
    let next = claim(store, &id, "next", LONG).await;
    let ledger = store.ledger(&id).await.unwrap();
    assert_eq!(ledger[0].state, LedgerState::Released);
    // The budget it held is free again.
    store.start_node(&next, "n1").await.unwrap();
    store.reserve(&next, "n1", "p", 900_000).await.unwrap();
}

/// A dead worker's reservation whose call reached the provider (it has a generation) is not
/// released: it may have been charged. It stays counted against the budget until the next holder
/// settles it with what the provider reports; a reservation whose call never went out is released.
/// Every movement is an event.
async fn a_reservation_whose_call_reached_the_provider_is_settled_not_released(store: &SqlStore) {
    let id = ticket(store, Some(1_000_000)).await;
    let dead = claim(store, &id, "dead", LONG).await;
    store.start_node(&dead, "n1").await.unwrap();
    let sent = store.reserve(&dead, "n1", "p", 400_000).await.unwrap();
    assert_eq!(sent.events[0].kind, "ledger.reserved");
    assert_eq!(sent.events[0].payload["usd_micros"], 400_000);
    store
        .note_generation(&dead, sent.id, "gen-7")
        .await
        .unwrap();
    let unsent = store.reserve(&dead, "n1", "p", 300_000).await.unwrap();
    expire_lease(store, &id).await;
    let (next, claimed) = store.claim(&id, "next", LONG).await.unwrap().unwrap();
    assert_eq!(claimed[0].kind, "ledger.released");
    assert_eq!(claimed[0].payload["reservations"], json!([unsent.id]));
    let ledger = store.ledger(&id).await.unwrap();
    assert_eq!(ledger[0].generation.as_deref(), Some("gen-7"));
    assert_eq!(
        (ledger[0].state, ledger[1].state),
        (LedgerState::Reserved, LedgerState::Released)
    );
    // Still counted: 400,000 of 1,000,000 held, so 700,000 more does not fit.
    store.start_node(&next, "n1").await.unwrap();
    assert!(matches!(
        store.reserve(&next, "n1", "p", 700_000).await,
        Err(StoreError::BudgetExceeded {
            committed: 400_000,
            ..
        })
    ));
    let id = ticket(store, Some(1_000_000)).await;
    let dead = claim(store, &id, "dead", LONG).await;
    store.start_node(&dead, "n1").await.unwrap();
    let sent = store.reserve(&dead, "n1", "p", 400_000).await.unwrap();
    store
        .note_generation(&dead, sent.id, "gen-8")
        .await
        .unwrap();
    expire_lease(store, &id).await;
    let next = claim(store, &id, "next", LONG).await;
    // Settled with what the provider reported, by the next holder; then 700,000 fits.
    let settled = store
        .settle(
            &next,
            &[Settlement {
                reservation: sent.id,
                usd_micros: 250_000,
                tokens_in: 10,
                tokens_out: 2,
            }],
        )
        .await
        .unwrap();
    assert_eq!(settled[0].kind, "ledger.settled");
    assert_eq!(settled[0].payload["usd_micros"], 250_000);
    assert!(lost(store.note_generation(&dead, sent.id, "late").await));
    store.start_node(&next, "n1").await.unwrap();
    store.reserve(&next, "n1", "p", 700_000).await.unwrap();
    assert!(
        matches!(
            store
                .settle(
                    &next,
                    &[Settlement {
                        reservation: sent.id,
                        usd_micros: 1,
                        tokens_in: 0,
                        tokens_out: 0
                    }]
                )
                .await,
            Err(StoreError::InvalidState { .. })
        ),
        "settled once, never twice"
    );
}

/// A turn is journaled with its answer's settlement in one transaction, replaced when its tools'
/// results are added, read back in order, and written by the lease's holder only.
async fn a_turn_is_journaled_with_its_settlement(store: &SqlStore) {
    let id = ticket(store, None).await;
    let lease = claim(store, &id, "w", LONG).await;
    store.start_node(&lease, "fix").await.unwrap();
    let paid = store.reserve(&lease, "fix", "p", 50_000).await.unwrap();
    let settlement = Settlement {
        reservation: paid.id,
        usd_micros: 42_000,
        tokens_in: 900,
        tokens_out: 80,
    };
    let events = store
        .save_turn(
            &lease,
            "fix",
            0,
            &json!({"answer": "call ws.read"}),
            std::slice::from_ref(&settlement),
            ("model.turn", json!({"node": "fix", "turn": 0})),
        )
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["ledger.settled", "model.turn"]);
    store
        .save_turn(
            &lease,
            "fix",
            0,
            &json!({"answer": "call ws.read", "results": ["the file"]}),
            &[],
            ("tool.results", json!({"node": "fix", "turn": 0})),
        )
        .await
        .unwrap();
    store
        .save_turn(
            &lease,
            "fix",
            1,
            &json!({"answer": "done"}),
            &[],
            ("model.turn", json!({})),
        )
        .await
        .unwrap();
    let turns = store.turns(&id, "fix").await.unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].payload["results"][0], "the file");
    assert_eq!(turns[1].turn, 1);
    assert!(store.turns(&id, "other").await.unwrap().is_empty());
    let ledger = store.ledger(&id).await.unwrap();
    assert_eq!(ledger[0].settled_micros, Some(42_000));
    // Settled once: journaling it again with the same settlement is refused, and nothing of
    // that transaction is written.
    assert!(matches!(
        store
            .save_turn(
                &lease,
                "fix",
                2,
                &json!({}),
                &[settlement],
                ("model.turn", json!({}))
            )
            .await,
        Err(StoreError::InvalidState { .. })
    ));
    assert_eq!(store.turns(&id, "fix").await.unwrap().len(), 2);
    expire_lease(store, &id).await;
    let _next = claim(store, &id, "next", LONG).await;
    assert!(lost(
        store
            .save_turn(&lease, "fix", 2, &json!({}), &[], ("model.turn", json!({})))
            .await
    ));
}

async fn events_are_ordered_and_readable_from_any_position(store: &SqlStore) {
    let id = ticket(store, None).await;
    let lease = claim(store, &id, "w", LONG).await;
    for node in ["n1", "n2", "n3"] {
        store.start_node(&lease, node).await.unwrap();
        store
            .complete_node(&lease, Completion::output_only(node, json!(node), node))
            .await
            .unwrap();
    }
    store.finish(&lease, Finish::Done).await.unwrap();
    let all = store.events(&id, 0, 1000).await.unwrap();
    let seqs: Vec<i64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=all.len() as i64).collect::<Vec<_>>(),
        "dense and ordered"
    );
    let kinds: Vec<&str> = all.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ticket.created",
            "ticket.claimed",
            "node.started",
            "node.completed",
            "node.started",
            "node.completed",
            "node.started",
            "node.completed",
            "ticket.done"
        ]
    );
    // A client that saw up to 4 reconnects and gets the rest, in pages.
    let rest = store.events(&id, 4, 3).await.unwrap();
    assert_eq!(rest.iter().map(|e| e.seq).collect::<Vec<_>>(), [5, 6, 7]);
    assert!(store.events(&id, 9, 10).await.unwrap().is_empty());
}

async fn tickets_needing_a_worker_are_found_and_dead_letters_fail_only_unheld_tickets(
    store: &SqlStore,
) {
    let queued = ticket(store, None).await;
    let held = ticket(store, None).await;
    let abandoned = ticket(store, None).await;
    let _live = claim(store, &held, "alive", LONG).await;
    let _gone = claim(store, &abandoned, "gone", LONG).await;
    expire_lease(store, &abandoned).await;
    let mut needing = store.needing_work(Duration::ZERO).await.unwrap();
    needing.sort();
    let mut expected = vec![queued.clone(), abandoned.clone()];
    expected.sort();
    assert_eq!(needing, expected, "queued and abandoned, not the one held");
    assert!(
        !store
            .needing_work(Duration::from_secs(3600))
            .await
            .unwrap()
            .contains(&queued),
        "a fresh queued ticket is left to its queue entry"
    );
    // A dead-lettered entry fails its ticket only when nobody holds it.
    assert!(
        store
            .fail_unheld(&held, "DeadLettered")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.ticket(&held).await.unwrap().state,
        TicketState::Running
    );
    let events = store
        .fail_unheld(&abandoned, "DeadLettered: test")
        .await
        .unwrap();
    assert_eq!(events[0].kind, "ticket.failed");
    let ticket = store.ticket(&abandoned).await.unwrap();
    assert_eq!(ticket.state, TicketState::Failed);
    assert_eq!(ticket.reason.as_deref(), Some("DeadLettered: test"));
}

async fn release_lets_another_worker_claim_at_once(store: &SqlStore) {
    let id = ticket(store, Some(5_000_000)).await;
    let first = claim(store, &id, "leaving", LONG).await;
    store.start_node(&first, "n1").await.unwrap();
    store.reserve(&first, "n1", "p", 1_000_000).await.unwrap();
    store.release(&first).await.unwrap();
    let ledger = store.ledger(&id).await.unwrap();
    assert_eq!(ledger[0].state, LedgerState::Released);
    let second = claim(store, &id, "next", LONG).await;
    assert_eq!(second.epoch, first.epoch + 1);
    assert!(lost(store.start_node(&first, "n1").await));
}

#[tokio::test]
async fn migrations_are_idempotent_concurrent_and_refuse_a_newer_schema() {
    let db = TestDatabase::create().await;
    // Four processes' worth of pools migrate at once: one applies, none fails.
    let connects: Vec<_> = (0..4)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move { SqlStore::connect(&url).await })
        })
        .collect();
    let mut applied = 0;
    for store in futures_join(connects).await {
        let store = store.unwrap();
        applied += store.migrated().applied.len();
        store.close().await;
    }
    assert_eq!(applied, afe_store::MIGRATIONS.len());
    let store = SqlStore::connect(&db.url).await.unwrap();
    assert!(store.migrate().await.unwrap().applied.is_empty());
    sqlx::query(
        "INSERT INTO afe_schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    store.close().await;
    match SqlStore::connect(&db.url).await {
        Err(StoreError::Schema { detail }) => assert!(detail.contains("999"), "{detail}"),
        other => panic!("a newer schema must be refused, got {other:?}"),
    }
    db.remove().await;

    let dir = scratch("afe-store");
    let url = sqlite_url(&dir);
    let first = SqlStore::connect(&url).await.unwrap();
    assert_eq!(first.migrated().applied.len(), afe_store::MIGRATIONS.len());
    let second = SqlStore::connect(&url).await.unwrap();
    assert!(second.migrated().applied.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_url_that_is_neither_store_is_refused_with_what_to_write() {
    match SqlStore::connect("mysql://x").await {
        Err(err) => assert!(err.to_string().contains("postgres://"), "{err}"),
        Ok(_) => panic!("mysql is not a store"),
    }
}

async fn a_ticket_needs_a_stored_revision(store: &SqlStore) {
    let refused = store
        .create_ticket(&NewTicket {
            flow: "work".into(),
            input: json!({}),
            revision: "0".repeat(64),
            budget_micros: None,
        })
        .await;
    match refused {
        Err(StoreError::NotFound { what }) => assert!(what.contains("revision"), "{what}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
}

fn conflict<T: std::fmt::Debug>(result: Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::Conflict { .. }))
}

async fn cancelling_a_running_ticket_takes_its_lease_and_ended_tickets_refuse(store: &SqlStore) {
    let id = ticket(store, Some(10_000_000)).await;
    let lease = claim(store, &id, "w", LONG).await;
    store.start_node(&lease, "n1").await.unwrap();
    let unsent = store.reserve(&lease, "n1", "p", 100).await.unwrap();
    let (cancelled, events) = store.cancel(&id, "asked by alice").await.unwrap();
    assert_eq!(cancelled.state, TicketState::Cancelled);
    assert_eq!(cancelled.reason.as_deref(), Some("asked by alice"));
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["ledger.released", "ticket.cancelled"]);
    // The worker that held it can write nothing more, its heartbeat included.
    assert!(lost(store.heartbeat(&lease, LONG).await));
    assert!(lost(store.record(&lease, "x", json!({})).await));
    let ledger = store.ledger(&id).await.unwrap();
    assert_eq!(ledger[0].id, unsent.id);
    assert_eq!(ledger[0].state, LedgerState::Released);
    // Nobody claims it again, and what has ended cannot be cancelled, paused or resumed.
    assert!(store.claim(&id, "w2", LONG).await.unwrap().is_none());
    assert!(conflict(store.cancel(&id, "again").await));
    assert!(conflict(store.pause(&id).await));
    assert!(conflict(store.resume(&id).await));
    assert!(matches!(
        store.cancel("no-such-ticket", "x").await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn a_paused_ticket_is_not_claimed_until_resumed(store: &SqlStore) {
    let id = ticket(store, None).await;
    let lease = claim(store, &id, "w", LONG).await;
    let (paused, _) = store.pause(&id).await.unwrap();
    assert_eq!(paused.state, TicketState::Paused);
    assert_eq!(paused.lease_owner, None);
    assert!(lost(store.heartbeat(&lease, LONG).await));
    // Not claimable, not swept back into the queue, not resumable twice.
    assert!(store.claim(&id, "w2", LONG).await.unwrap().is_none());
    assert!(
        !store
            .needing_work(Duration::ZERO)
            .await
            .unwrap()
            .contains(&id)
    );
    assert!(conflict(store.pause(&id).await));
    let (resumed, events) = store.resume(&id).await.unwrap();
    assert_eq!(resumed.state, TicketState::Queued);
    assert_eq!(events[0].kind, "ticket.resumed");
    assert!(conflict(store.resume(&id).await));
    let next = claim(store, &id, "w2", LONG).await;
    assert_eq!(next.epoch, lease.epoch + 2, "pausing took an epoch");
}

async fn a_rerun_copies_the_nodes_before_its_node_with_their_checkpoints(store: &SqlStore) {
    let id = ticket(store, Some(5_000_000)).await;
    let lease = claim(store, &id, "w", LONG).await;
    let mut parent = None;
    for node in ["n1", "n2", "n3"] {
        store.start_node(&lease, node).await.unwrap();
        store
            .complete_node(
                &lease,
                Completion {
                    checkpoint: Some(NewCheckpoint {
                        head: format!("head-{node}"),
                        git_ref: format!("refs/afe/{node}"),
                        parent,
                        bundle: format!("bundle of {node}").into_bytes(),
                    }),
                    ..Completion::output_only(node, json!({"node": node}), "t")
                },
            )
            .await
            .unwrap();
        parent = store.checkpoints(&id).await.unwrap().last().map(|c| c.id);
    }
    store.finish(&lease, Finish::Done).await.unwrap();
    // From a node that never ran, or with a node before it that never ran: refused.
    assert!(conflict(store.rerun(&id, "n9", &[]).await));
    assert!(conflict(
        store.rerun(&id, "n3", &["n1".into(), "n7".into()]).await
    ));
    let keep = ["n1".to_string(), "n2".to_string()];
    let (rerun, events) = store.rerun(&id, "n3", &keep).await.unwrap();
    assert_ne!(rerun.id, id);
    assert_eq!(rerun.state, TicketState::Queued);
    let original = store.ticket(&id).await.unwrap();
    assert_eq!(
        (
            &rerun.flow,
            &rerun.input,
            &rerun.revision,
            rerun.budget_micros
        ),
        (
            &original.flow,
            &original.input,
            &original.revision,
            original.budget_micros
        )
    );
    assert_eq!(events[0].ticket, id);
    assert_eq!(events[0].kind, "ticket.rerun");
    assert_eq!(events[1].payload["rerunOf"], json!(id));
    let runs = store.node_runs(&rerun.id).await.unwrap();
    let copied: Vec<(&str, NodeState)> = runs.iter().map(|r| (r.node.as_str(), r.state)).collect();
    assert_eq!(
        copied,
        [("n1", NodeState::Completed), ("n2", NodeState::Completed)]
    );
    assert_eq!(runs[1].output, Some(json!({"node": "n2"})));
    // The checkpoints of n1 and n2, chained to each other, with the same bytes.
    let checkpoints = store.checkpoints(&rerun.id).await.unwrap();
    assert_eq!(checkpoints.len(), 2);
    assert_eq!(checkpoints[0].parent, None);
    assert_eq!(checkpoints[1].parent, Some(checkpoints[0].id));
    assert_eq!(checkpoints[1].head, "head-n2");
    assert_eq!(
        store.bundle(checkpoints[1].id).await.unwrap(),
        b"bundle of n2"
    );
    // It runs like any ticket.
    let lease = claim(store, &rerun.id, "w", LONG).await;
    assert!(store.start_node(&lease, "n2").await.is_err(), "n2 is done");
    store.start_node(&lease, "n3").await.unwrap();
}

async fn tickets_are_listed_newest_first_by_cursor_and_filtered(store: &SqlStore) {
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(ticket(store, None).await);
    }
    // The clock is the database's: give the tickets distinct, known times.
    for (at, id) in ids.iter().enumerate() {
        sqlx::query("UPDATE afe_tickets SET created_at = $1 WHERE id = $2")
            .bind(1000 + at as i64)
            .bind(id.clone())
            .execute(store.pool())
            .await
            .unwrap();
    }
    store.cancel(&ids[1], "x").await.unwrap();
    let everything = TicketFilter::default();
    let mut seen = Vec::new();
    let mut after: Option<Cursor> = None;
    loop {
        let page = store.tickets(&everything, after.as_ref(), 2).await.unwrap();
        assert!(page.tickets.len() <= 2);
        seen.extend(page.tickets.iter().map(|t| t.id.clone()));
        let Some(next) = page.next else { break };
        // A cursor survives its trip through a client.
        after = Some(Cursor::decode(&next.encode()).unwrap());
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first);
    let cancelled = TicketFilter {
        state: Some(TicketState::Cancelled),
        ..TicketFilter::default()
    };
    let page = store.tickets(&cancelled, None, 10).await.unwrap();
    assert_eq!(page.tickets.len(), 1);
    assert_eq!(page.tickets[0].id, ids[1]);
    let window = TicketFilter {
        flow: Some("work".into()),
        created_after: Some(1001),
        created_before: Some(1003),
        ..TicketFilter::default()
    };
    let page = store.tickets(&window, None, 10).await.unwrap();
    let found: Vec<&str> = page.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(found, [ids[2].as_str(), ids[1].as_str()]);
    let other_flow = TicketFilter {
        flow: Some("other".into()),
        ..TicketFilter::default()
    };
    assert!(
        store
            .tickets(&other_flow, None, 10)
            .await
            .unwrap()
            .tickets
            .is_empty()
    );
    assert_eq!(Cursor::decode("nonsense"), None);
    assert_eq!(Cursor::decode("12.a'b"), None);
}

async fn the_newest_publication_is_the_current_revision(store: &SqlStore) {
    assert_eq!(store.current_revision().await.unwrap(), None);
    let first = chain_revision(2, None);
    let second = chain_revision(3, None);
    for revision in [&first, &second] {
        store
            .put_revision(&revision.hash, &revision.normalized)
            .await
            .unwrap();
    }
    assert!(store.publish_revision(&first.hash).await.unwrap());
    assert!(!store.publish_revision(&first.hash).await.unwrap(), "once");
    assert_eq!(
        store.current_revision().await.unwrap().unwrap().hash,
        first.hash
    );
    assert!(store.publish_revision(&second.hash).await.unwrap());
    assert_eq!(
        store.current_revision().await.unwrap().unwrap().hash,
        second.hash
    );
    // Back to the first: it is current again.
    assert!(store.publish_revision(&first.hash).await.unwrap());
    assert_eq!(
        store.current_revision().await.unwrap().unwrap().hash,
        first.hash
    );
    let listed = store.revisions().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|r| r.published_at.is_some()));
    assert!(matches!(
        store.publish_revision("0000").await,
        Err(StoreError::NotFound { .. })
    ));
}

async fn stats_count_tickets_money_and_node_durations(store: &SqlStore) {
    let id = ticket(store, Some(10_000_000)).await;
    ticket(store, None).await;
    let lease = claim(store, &id, "w", LONG).await;
    store.start_node(&lease, "n1").await.unwrap();
    let reservation = store.reserve(&lease, "n1", "p", 900).await.unwrap();
    store.reserve(&lease, "n1", "p", 50).await.unwrap();
    store
        .complete_node(
            &lease,
            Completion {
                settlements: vec![Settlement {
                    reservation: reservation.id,
                    usd_micros: 700,
                    tokens_in: 1,
                    tokens_out: 1,
                }],
                ..Completion::output_only("n1", json!({}), "t")
            },
        )
        .await
        .unwrap();
    store.ping().await.unwrap();
    let stats = store.stats().await.unwrap();
    let mut states = stats.tickets_by_state.clone();
    states.sort_by_key(|(state, _)| state.as_str());
    assert_eq!(
        states,
        [(TicketState::Queued, 1), (TicketState::Running, 1)]
    );
    assert_eq!(stats.spent_micros, 700);
    assert_eq!(stats.reserved_micros, 50);
    assert_eq!(stats.node_durations.len(), 1);
    assert_eq!(
        (
            stats.node_durations[0].flow.as_str(),
            stats.node_durations[0].node.as_str(),
            stats.node_durations[0].count
        ),
        ("work", "n1", 1)
    );
    assert!(stats.node_durations[0].total_ms >= 0);
}
