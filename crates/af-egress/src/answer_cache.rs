//! The sidecar's cache of its own name lookups: bounded by entries, each kept for its answer's
//! TTL within a floor and a ceiling. Pure (the time is passed in), so every rule is a unit test.
//!
//! Bounded because a workload chooses the names: with a wildcard rule (`*.cdn.example.com`) it can
//! invent a new allowed name per request, and each would otherwise be kept for ever.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long answers are kept, and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachePolicy {
    /// An answer is kept at least this long, whatever its TTL: a name with TTL 0 would otherwise
    /// be asked of the resolver on every request.
    pub min_ttl: Duration,
    /// And at most this long, whatever its TTL: an address that changes is followed within it.
    pub max_ttl: Duration,
    /// Names held at most; the next one evicts the expired ones, or else the one that expires
    /// first.
    pub max_entries: usize,
}

/// Addresses kept per name at most: a workload's resolver may answer with hundreds, and only the
/// first usable one is dialled.
pub const MAX_ADDRESSES: usize = 16;

#[derive(Debug)]
struct Cached {
    addresses: Vec<IpAddr>,
    expires: Instant,
}

#[derive(Debug)]
pub struct AnswerCache {
    policy: CachePolicy,
    entries: HashMap<String, Cached>,
}

impl AnswerCache {
    pub fn new(policy: CachePolicy) -> AnswerCache {
        AnswerCache {
            policy,
            entries: HashMap::new(),
        }
    }

    /// The addresses kept for `name` at `now`, while they have not expired.
    pub fn get(&self, name: &str, now: Instant) -> Option<&[IpAddr]> {
        self.entries
            .get(name)
            .filter(|cached| cached.expires > now)
            .map(|cached| cached.addresses.as_slice())
    }

    /// Keeps `addresses` for `name`, answered at `now` with this `ttl` (clamped to the policy's
    /// floor and ceiling). Nothing is kept of an empty answer.
    pub fn insert(&mut self, name: &str, mut addresses: Vec<IpAddr>, ttl: Duration, now: Instant) {
        if addresses.is_empty() || self.policy.max_entries == 0 {
            return;
        }
        addresses.truncate(MAX_ADDRESSES);
        if !self.entries.contains_key(name) && self.entries.len() >= self.policy.max_entries {
            self.make_room(now);
        }
        let keep = ttl.clamp(self.policy.min_ttl, self.policy.max_ttl);
        self.entries.insert(
            name.to_string(),
            Cached {
                addresses,
                expires: now + keep,
            },
        );
    }

    /// Frees one place at least: every expired entry, or else the one that expires first. A
    /// scan of the whole map, made only when it is full and a new name was just asked of the
    /// network, which costs far more.
    fn make_room(&mut self, now: Instant) {
        self.entries.retain(|_, cached| cached.expires > now);
        if self.entries.len() < self.policy.max_entries {
            return;
        }
        let soonest = self
            .entries
            .iter()
            .min_by_key(|(_, cached)| cached.expires)
            .map(|(name, _)| name.clone());
        if let Some(name) = soonest {
            self.entries.remove(&name);
        }
    }

    /// Names held now, expired ones not yet evicted included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: CachePolicy = CachePolicy {
        min_ttl: Duration::from_secs(5),
        max_ttl: Duration::from_secs(300),
        max_entries: 3,
    };

    fn ip(last: u8) -> Vec<IpAddr> {
        vec![IpAddr::from([203, 0, 113, last])]
    }

    #[test]
    fn an_answer_is_kept_for_its_ttl_within_the_floor_and_the_ceiling() {
        let mut cache = AnswerCache::new(POLICY);
        let now = Instant::now();
        cache.insert("a", ip(1), Duration::from_secs(60), now);
        cache.insert("zero", ip(2), Duration::ZERO, now);
        cache.insert("day", ip(3), Duration::from_secs(86_400), now);
        let at = |secs| now + Duration::from_secs(secs);
        assert_eq!(cache.get("a", at(59)), Some(&ip(1)[..]));
        assert_eq!(cache.get("a", at(60)), None, "its TTL is over");
        assert_eq!(cache.get("zero", at(4)), Some(&ip(2)[..]), "the floor");
        assert_eq!(cache.get("zero", at(5)), None);
        assert_eq!(cache.get("day", at(299)), Some(&ip(3)[..]));
        assert_eq!(cache.get("day", at(300)), None, "the ceiling");
    }

    #[test]
    fn the_cache_never_holds_more_than_its_bound_whatever_names_come() {
        let mut cache = AnswerCache::new(POLICY);
        let now = Instant::now();
        for n in 0..1000u32 {
            let when = now + Duration::from_millis(u64::from(n));
            cache.insert(
                &format!("n{n}.cdn.example"),
                ip(1),
                Duration::from_secs(60),
                when,
            );
            assert!(cache.len() <= POLICY.max_entries);
        }
        assert!(
            cache
                .get("n999.cdn.example", now + Duration::from_secs(1))
                .is_some()
        );
    }

    #[test]
    fn a_full_cache_evicts_the_expired_then_the_soonest_to_expire() {
        let mut cache = AnswerCache::new(POLICY);
        let now = Instant::now();
        cache.insert("short", ip(1), Duration::from_secs(10), now);
        cache.insert("long", ip(2), Duration::from_secs(200), now);
        cache.insert("middle", ip(3), Duration::from_secs(100), now);
        cache.insert("new", ip(4), Duration::from_secs(100), now);
        assert_eq!(cache.get("short", now), None, "the soonest to expire went");
        assert!(cache.get("long", now).is_some() && cache.get("new", now).is_some());
        let later = now + Duration::from_secs(150);
        cache.insert("fresh", ip(5), Duration::from_secs(100), later);
        assert_eq!(cache.len(), 2, "the two expired went, not one live entry");
        assert!(cache.get("long", later).is_some() && cache.get("fresh", later).is_some());
    }

    #[test]
    fn empty_answers_and_long_answers_are_not_kept_whole() {
        let mut cache = AnswerCache::new(POLICY);
        let now = Instant::now();
        cache.insert("none", Vec::new(), Duration::from_secs(60), now);
        assert_eq!(cache.len(), 0);
        let many: Vec<IpAddr> = (0..100).map(|n| IpAddr::from([198, 51, 100, n])).collect();
        cache.insert("many", many, Duration::from_secs(60), now);
        assert_eq!(cache.get("many", now).unwrap().len(), MAX_ADDRESSES);
    }
}
