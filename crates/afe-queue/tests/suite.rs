//! One suite, both queues: every test runs against Redis (keys of its own) and the in-process
//! queue. Redis is real; `.ci/install` starts it.

use std::sync::Arc;
use std::time::Duration;

use afe_queue::{
    EmbeddedNotifier, EmbeddedQueue, Notice, Notifier, Queue, QueueSettings, RedisNotifier,
    RedisQueue,
};

/// Long enough that no stall of a busy machine between two calls passes for quiet (300 ms once
/// did), so "not yet reclaimed" holds; where an entry must be reclaimed, the test asks until it
/// is, within [`PATIENCE`], instead of sleeping a guess.
const RECLAIM: Duration = Duration::from_secs(3);
const PATIENCE: Duration = Duration::from_secs(60);

/// The next delivery for `consumer`, asked until there is one.
async fn next_reclaimed(queue: &Arc<dyn Queue>, consumer: &str) -> afe_queue::Delivery {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(delivery) = queue.next(consumer, WAIT).await.unwrap() {
            return delivery;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the entry was not reclaimed within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn settings() -> QueueSettings {
    QueueSettings {
        reclaim_after: RECLAIM,
        max_deliveries: 3,
    }
}

async fn redis() -> Arc<dyn Queue> {
    let url = afe_testkit::redis_url();
    Arc::new(
        RedisQueue::connect(&url, &afe_testkit::unique("afe-test"), settings())
            .await
            .unwrap_or_else(|err| {
                panic!("Redis is not reachable at {url} ({err}); run `bash .ci/install`, which installs and starts it")
            }),
    )
}

fn embedded() -> Arc<dyn Queue> {
    Arc::new(EmbeddedQueue::new(settings()))
}

macro_rules! on_both_queues {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(super::redis().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$name(super::embedded()).await;
            }
        }
    )+};
}

on_both_queues!(
    each_entry_goes_to_one_consumer_and_ack_removes_it,
    an_entry_left_quiet_is_reclaimed_with_its_delivery_count,
    a_touched_entry_is_not_reclaimed,
    dead_letters_keep_their_reason,
    a_wait_longer_than_half_a_second_with_nothing_to_deliver_is_none,
);

const WAIT: Duration = Duration::from_millis(200);

async fn each_entry_goes_to_one_consumer_and_ack_removes_it(queue: Arc<dyn Queue>) {
    for ticket in ["t1", "t2", "t3"] {
        queue.enqueue(ticket).await.unwrap();
    }
    assert_eq!(queue.depth().await.unwrap(), 3);
    let a = queue.next("a", WAIT).await.unwrap().unwrap();
    let b = queue.next("b", WAIT).await.unwrap().unwrap();
    let c = queue.next("a", WAIT).await.unwrap().unwrap();
    let mut tickets = vec![a.ticket.clone(), b.ticket.clone(), c.ticket.clone()];
    tickets.sort();
    assert_eq!(tickets, ["t1", "t2", "t3"], "each entry delivered once");
    assert!([&a, &b, &c].iter().all(|d| d.deliveries == 1));
    assert!(
        queue.next("b", WAIT).await.unwrap().is_none(),
        "nothing left"
    );
    for delivery in [&a, &b, &c] {
        queue.ack(delivery).await.unwrap();
    }
    assert_eq!(queue.depth().await.unwrap(), 0);
    // A waiting consumer gets an entry enqueued while it waits.
    let waiting = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.next("late", Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    queue.enqueue("t4").await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap().unwrap().ticket, "t4");
}

async fn an_entry_left_quiet_is_reclaimed_with_its_delivery_count(queue: Arc<dyn Queue>) {
    queue.enqueue("t").await.unwrap();
    let first = queue.next("dies", WAIT).await.unwrap().unwrap();
    assert!(
        queue.next("other", WAIT).await.unwrap().is_none(),
        "not yet quiet"
    );
    let second = next_reclaimed(&queue, "other").await;
    assert_eq!(second.ticket, "t");
    assert_eq!(second.entry, first.entry);
    assert_eq!(second.deliveries, 2);
    let third = next_reclaimed(&queue, "third").await;
    assert_eq!(third.deliveries, 3);
}

async fn a_touched_entry_is_not_reclaimed(queue: Arc<dyn Queue>) {
    queue.enqueue("t").await.unwrap();
    let held = queue.next("alive", WAIT).await.unwrap().unwrap();
    // Touched ten times as often as it would go quiet, for longer than it takes to.
    for _ in 0..15 {
        tokio::time::sleep(RECLAIM / 10).await;
        queue.touch("alive", &held).await.unwrap();
    }
    assert!(
        queue.next("other", WAIT).await.unwrap().is_none(),
        "an entry kept fresh stays with its consumer"
    );
    queue.ack(&held).await.unwrap();
}

/// The Redis client's own response timeout (500 ms) once cut every longer blocking read short:
/// a worker's idle one-second poll came back as "queue unavailable".
async fn a_wait_longer_than_half_a_second_with_nothing_to_deliver_is_none(queue: Arc<dyn Queue>) {
    assert!(
        queue
            .next("idle", Duration::from_secs(1))
            .await
            .unwrap()
            .is_none()
    );
    // And one that arrives during a long wait is delivered to the waiting reader. The wait is
    // far longer than the pause before the entry: the reader returns as soon as it arrives, so
    // its length costs nothing, and no stall of the machine can outlast it.
    let waiting = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.next("waiting", Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    queue.enqueue("late").await.unwrap();
    let delivered = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("delivered while waiting");
    assert_eq!(delivered.ticket, "late");
}

async fn dead_letters_keep_their_reason(queue: Arc<dyn Queue>) {
    queue.enqueue("poison").await.unwrap();
    let delivery = queue.next("w", WAIT).await.unwrap().unwrap();
    queue
        .dead_letter(&delivery, "DeadLettered: delivered 4 times")
        .await
        .unwrap();
    let dead = queue.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].ticket, "poison");
    assert_eq!(dead[0].reason, "DeadLettered: delivered 4 times");
    assert_eq!(queue.depth().await.unwrap(), 0);
    tokio::time::sleep(RECLAIM + Duration::from_millis(100)).await;
    assert!(
        queue.next("w", WAIT).await.unwrap().is_none(),
        "out of circulation"
    );
}

#[tokio::test]
async fn the_redis_group_is_made_again_when_redis_lost_it() {
    let url = afe_testkit::redis_url();
    let prefix = afe_testkit::unique("afe-test");
    let queue = RedisQueue::connect(&url, &prefix, settings())
        .await
        .unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{prefix}:tickets"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(queue.next("w", WAIT).await.unwrap().is_none());
    queue.enqueue("t").await.unwrap();
    assert_eq!(queue.next("w", WAIT).await.unwrap().unwrap().ticket, "t");
}

async fn notices_reach_subscribers(notifier: Arc<dyn Notifier>) {
    let mut subscriber = notifier.subscribe();
    for seq in 1..=3 {
        notifier
            .publish(&Notice {
                ticket: "t".into(),
                seq,
                kind: "node.completed".into(),
            })
            .await
            .unwrap();
    }
    for seq in 1..=3 {
        let notice = tokio::time::timeout(Duration::from_secs(5), subscriber.recv())
            .await
            .expect("a notice arrives")
            .unwrap();
        assert_eq!((notice.ticket.as_str(), notice.seq), ("t", seq));
    }
}

#[tokio::test]
async fn notices_reach_subscribers_through_redis() {
    let notifier =
        RedisNotifier::connect(&afe_testkit::redis_url(), &afe_testkit::unique("afe-test"))
            .await
            .unwrap();
    notices_reach_subscribers(Arc::new(notifier)).await;
}

#[tokio::test]
async fn notices_reach_subscribers_in_process() {
    notices_reach_subscribers(Arc::new(EmbeddedNotifier::default())).await;
}
