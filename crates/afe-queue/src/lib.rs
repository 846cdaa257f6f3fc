//! afe's work queue: entries carry only a ticket id (a duplicate is harmless: the store's lease
//! decides who runs a ticket), are delivered to one worker of a group, reclaimed from a worker
//! that went quiet, and dead-lettered after too many deliveries. Redis streams for many
//! machines; the same semantics in process for one. Notifications of new events ride beside it.
//! See docs/afe-store.md.

mod embedded;
mod error;
mod notify;
mod redis_queue;

use std::time::Duration;

use async_trait::async_trait;

pub use embedded::EmbeddedQueue;
pub use error::QueueError;
pub use notify::{EmbeddedNotifier, Notice, Notifier, RedisNotifier};
pub use redis_queue::{GROUP as CONSUMER_GROUP, RedisQueue};

/// How the queue treats entries nobody finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSettings {
    /// An entry delivered but neither acknowledged nor touched for this long goes to the next
    /// worker that asks. Keep it above the store's lease time, so the new worker can claim.
    pub reclaim_after: Duration,
    /// An entry delivered more than this many times is dead-lettered (its ticket fails).
    pub max_deliveries: u64,
}

impl Default for QueueSettings {
    fn default() -> QueueSettings {
        QueueSettings {
            reclaim_after: Duration::from_secs(60),
            max_deliveries: 5,
        }
    }
}

/// One delivery of an entry to a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The entry's id in the queue.
    pub entry: String,
    pub ticket: String,
    /// How many times the entry has been delivered, this time included.
    pub deliveries: u64,
}

/// An entry taken out of circulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    pub ticket: String,
    pub reason: String,
    pub deliveries: u64,
}

#[async_trait]
pub trait Queue: Send + Sync {
    /// `redis` or `embedded`.
    fn backend(&self) -> &'static str;
    fn settings(&self) -> QueueSettings;
    async fn enqueue(&self, ticket: &str) -> Result<(), QueueError>;
    /// The next entry for `consumer`: one reclaimed from a quiet worker first, else a new one,
    /// waiting up to `wait` for one to arrive.
    async fn next(&self, consumer: &str, wait: Duration) -> Result<Option<Delivery>, QueueError>;
    /// Tells the queue `consumer` still works on the entry, so it is not reclaimed.
    async fn touch(&self, consumer: &str, delivery: &Delivery) -> Result<(), QueueError>;
    /// The entry is done with (the ticket ended, or someone else holds it).
    async fn ack(&self, delivery: &Delivery) -> Result<(), QueueError>;
    /// Takes the entry out of circulation, keeping why.
    async fn dead_letter(&self, delivery: &Delivery, reason: &str) -> Result<(), QueueError>;
    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, QueueError>;
    /// Entries waiting or being worked on: the lag an autoscaler reads.
    async fn depth(&self) -> Result<u64, QueueError>;
}
