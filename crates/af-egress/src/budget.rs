//! Bytes a workload makes the sidecar hold at once, across all its connections: mail being
//! received (each message is held whole until its final "."), and the bodies of captured
//! requests being read (each kept up to `inbox.max_body_bytes` until it is in the inbox). Each is
//! bounded per message or request; without a bound across connections, a workload opening many
//! could make the sidecar — the environment's only way out — hold any amount. What does not fit
//! is refused (mail: 452, try again later) or not kept (a captured body: cut, and marked so).

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub struct ByteBudget {
    limit: usize,
    used: AtomicUsize,
}

impl ByteBudget {
    pub fn new(limit: usize) -> ByteBudget {
        ByteBudget {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// An empty claim on the budget, grown as a message's or body's bytes arrive and given back
    /// when it is dropped.
    pub fn claim(&self) -> Claim<'_> {
        Claim {
            budget: self,
            held: 0,
        }
    }

    /// Bytes claimed now, by every connection.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// What one message or body being received holds of the budget.
#[derive(Debug)]
pub struct Claim<'a> {
    budget: &'a ByteBudget,
    held: usize,
}

impl Claim<'_> {
    /// Takes `bytes` more; false, taking nothing, when that would pass the budget's limit.
    pub fn grow(&mut self, bytes: usize) -> bool {
        let taken = self
            .budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes)
                    .filter(|&after| after <= self.budget.limit)
            });
        if taken.is_ok() {
            self.held += bytes;
        }
        taken.is_ok()
    }

    /// Takes as much of `bytes` more as the budget has left; returns how much it took.
    pub fn grow_up_to(&mut self, bytes: usize) -> usize {
        let limit = self.budget.limit;
        let before = self
            .budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used + bytes.min(limit.saturating_sub(used)))
            })
            .unwrap_or_else(|used| used);
        let taken = bytes.min(limit.saturating_sub(before));
        self.held += taken;
        taken
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.held, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_share_the_limit_and_give_back_what_they_held() {
        let budget = ByteBudget::new(100);
        let mut first = budget.claim();
        assert!(first.grow(60));
        let mut second = budget.claim();
        assert!(!second.grow(50), "60 + 50 is past 100");
        assert!(second.grow(40), "a refused grow took nothing");
        assert_eq!(budget.in_use(), 100);
        drop(first);
        assert_eq!(budget.in_use(), 40);
        assert!(second.grow(60));
        drop(second);
        assert_eq!(budget.in_use(), 0);
        let mut third = budget.claim();
        assert_eq!(third.grow_up_to(70), 70);
        let mut fourth = budget.claim();
        assert_eq!(fourth.grow_up_to(50), 30, "what is left");
        assert_eq!(fourth.grow_up_to(5), 0);
        drop((third, fourth));
        assert_eq!(budget.in_use(), 0);
    }
}
