//! The queue in process, for one machine (`afe run --local`, `afe serve` with SQLite): the same
//! semantics as the Redis streams — one delivery per worker, reclaim after silence, delivery
//! counts, dead letters — in a mutex.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::{DeadLetter, Delivery, Queue, QueueError, QueueSettings};

#[derive(Debug)]
struct Pending {
    ticket: String,
    consumer: String,
    touched: Instant,
    deliveries: u64,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    waiting: VecDeque<(u64, String)>,
    pending: BTreeMap<u64, Pending>,
    dead: Vec<DeadLetter>,
}

#[derive(Debug, Default)]
pub struct EmbeddedQueue {
    settings: QueueSettings,
    state: Mutex<State>,
    arrived: Notify,
}

impl EmbeddedQueue {
    pub fn new(settings: QueueSettings) -> EmbeddedQueue {
        EmbeddedQueue {
            settings,
            state: Mutex::default(),
            arrived: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind, still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A reclaimed entry if one went quiet, else a waiting one.
    fn take(&self, consumer: &str) -> Option<Delivery> {
        let mut state = self.state();
        let now = Instant::now();
        let quiet = state
            .pending
            .iter()
            .find(|(_, p)| now.duration_since(p.touched) >= self.settings.reclaim_after)
            .map(|(id, _)| *id);
        if let Some(id) = quiet {
            let pending = state.pending.get_mut(&id)?;
            pending.consumer = consumer.to_string();
            pending.touched = now;
            pending.deliveries += 1;
            return Some(Delivery {
                entry: id.to_string(),
                ticket: pending.ticket.clone(),
                deliveries: pending.deliveries,
            });
        }
        let (id, ticket) = state.waiting.pop_front()?;
        state.pending.insert(
            id,
            Pending {
                ticket: ticket.clone(),
                consumer: consumer.to_string(),
                touched: now,
                deliveries: 1,
            },
        );
        Some(Delivery {
            entry: id.to_string(),
            ticket,
            deliveries: 1,
        })
    }

    fn remove(&self, delivery: &Delivery) -> Option<Pending> {
        let id = delivery.entry.parse().ok()?;
        self.state().pending.remove(&id)
    }
}

#[async_trait]
impl Queue for EmbeddedQueue {
    fn backend(&self) -> &'static str {
        "embedded"
    }

    fn settings(&self) -> QueueSettings {
        self.settings
    }

    async fn enqueue(&self, ticket: &str) -> Result<(), QueueError> {
        {
            let mut state = self.state();
            state.next_id += 1;
            let id = state.next_id;
            state.waiting.push_back((id, ticket.to_string()));
        }
        self.arrived.notify_one();
        Ok(())
    }

    async fn next(&self, consumer: &str, wait: Duration) -> Result<Option<Delivery>, QueueError> {
        let deadline = Instant::now() + wait;
        loop {
            let arrived = self.arrived.notified();
            if let Some(delivery) = self.take(consumer) {
                return Ok(Some(delivery));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            // Wake for a new entry, or in time to reclaim a quiet one.
            let nap = left.min(self.settings.reclaim_after.max(Duration::from_millis(10)));
            let _ = tokio::time::timeout(nap, arrived).await;
        }
    }

    async fn touch(&self, consumer: &str, delivery: &Delivery) -> Result<(), QueueError> {
        if let Ok(id) = delivery.entry.parse::<u64>()
            && let Some(pending) = self.state().pending.get_mut(&id)
            && pending.consumer == consumer
        {
            pending.touched = Instant::now();
        }
        Ok(())
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), QueueError> {
        self.remove(delivery);
        Ok(())
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) -> Result<(), QueueError> {
        self.remove(delivery);
        self.state().dead.push(DeadLetter {
            ticket: delivery.ticket.clone(),
            reason: reason.to_string(),
            deliveries: delivery.deliveries,
        });
        Ok(())
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, QueueError> {
        Ok(self.state().dead.clone())
    }

    async fn depth(&self) -> Result<u64, QueueError> {
        let state = self.state();
        Ok((state.waiting.len() + state.pending.len()) as u64)
    }
}
