//! The bytes of mail the SMTP sink is receiving at once, across every session. A message is held
//! whole until its final "." (it is parsed and put in the inbox only then), up to
//! `limits.max_mail_bytes` each; without a bound across sessions, a workload opening many sessions
//! could make the sidecar — the environment's only way out — hold any amount. A session whose
//! message does not fit in what is left is told to try again later (452, as a mail server short
//! of storage says), and the others go on.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub struct MailBudget {
    limit: usize,
    used: AtomicUsize,
}

impl MailBudget {
    pub fn new(limit: usize) -> MailBudget {
        MailBudget {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// An empty claim on the budget, grown as a message's lines arrive and given back when it
    /// is dropped.
    pub fn claim(&self) -> Claim<'_> {
        Claim {
            budget: self,
            held: 0,
        }
    }

    /// Bytes claimed now, by every session.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// What one message being received holds of the budget.
#[derive(Debug)]
pub struct Claim<'a> {
    budget: &'a MailBudget,
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
        let budget = MailBudget::new(100);
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
    }
}
