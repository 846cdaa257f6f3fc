//! Which forwarded DNS queries are in flight to the platform's resolver, and whom each answer is
//! for. Decisions only: the responder's event loop does the sending (`dns.rs`).
//!
//! Each forwarded query gets an unpredictable id of the sidecar's own, drawn from a CSPRNG
//! (ChaCha12, seeded from the system), so an answer cannot be forged by guessing a client's id or
//! by predicting the next id from the ones seen; the answer goes back with the client's id
//! restored.
//!
//! Identical queries in flight at the same time are sent once, and the one answer goes to every
//! client that asked, as dnsmasq and unbound do: when sixty replicas look up `db` at the same
//! moment, the platform's resolver sees one query. The queries here are the responder's rebuilt
//! ones ([`crate::dns_wire::Question::forwarded_query`]), and "identical" is strict: every byte
//! after the id (the question, with its case, and whether EDNS is asked for) must match, so
//! clients that ask differently are forwarded separately and each gets the answer to its own
//! question.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::rngs::StdRng;

use crate::dns_wire::{RCODE_SERVFAIL, question_end, read_query};
use crate::udp_batch::Datagram;

/// Forwarded queries in flight at most; beyond that a query is dropped and its client retries
/// (dnsmasq's `dns-forward-max`, 150 by default, does the same). Bounds the table's memory.
pub const MAX_IN_FLIGHT: usize = 4096;
/// Clients answered by one forwarded query at most; the next identical query is sent on its own.
pub const MAX_WAITERS: usize = 64;
/// Queries longer than this are forwarded but never joined (a stub's query is well under 100
/// bytes), so the table holds at most `MAX_IN_FLIGHT` × this many bytes of keys.
const MAX_JOINABLE: usize = 512;
/// Random ids tried before a query is dropped as if the table were full.
const ID_TRIES: usize = 16;

/// What to do with one query for the platform's resolver.
#[derive(Debug, PartialEq, Eq)]
pub enum Forward {
    /// Send these bytes (the query with the sidecar's id) to the resolver.
    Send(Vec<u8>),
    /// An identical query is in flight; its answer will go to this client too.
    Joined,
    /// Dropped: too short to be a query, or too many in flight. The client retries.
    Dropped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Waiter {
    client: SocketAddr,
    id: u16,
}

#[derive(Debug)]
struct InFlight {
    /// The query as sent, with the sidecar's id: what a retransmission sends again.
    query: Box<[u8]>,
    waiters: Vec<Waiter>,
    /// Whether `joinable` maps this query's bytes to this entry.
    joinable: bool,
    /// Tells this entry's expiry record from the records of earlier entries under the same id.
    serial: u64,
}

#[derive(Debug)]
pub struct ForwardTable {
    in_flight: HashMap<u16, InFlight>,
    /// A query's bytes after the id → the sidecar's id for it, for queries that may be joined.
    joinable: HashMap<Box<[u8]>, u16>,
    /// When each entry gives up on its answer, oldest first. Answered entries leave their records
    /// behind; `serial` tells them apart.
    expiry: VecDeque<(Instant, u16, u64)>,
    serial: u64,
    ids: StdRng,
    timeout: Duration,
}

impl ForwardTable {
    /// A table whose entries are forgotten `timeout` after they were sent (their clients have
    /// given up by then), drawing ids from `ids`.
    pub fn new(timeout: Duration, ids: StdRng) -> ForwardTable {
        ForwardTable {
            in_flight: HashMap::new(),
            joinable: HashMap::new(),
            expiry: VecDeque::new(),
            serial: 0,
            ids,
            timeout,
        }
    }

    /// An unused id, or `None` after [`ID_TRIES`] used ones.
    fn free_id(&mut self) -> Option<u16> {
        for _ in 0..ID_TRIES {
            let id: u16 = self.ids.random();
            if !self.in_flight.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// Decides what becomes of `query` (to be sent, under the client's id) from `client`,
    /// received at `now`.
    pub fn forward(&mut self, query: Vec<u8>, client: SocketAddr, now: Instant) -> Forward {
        if query.len() < 12 {
            return Forward::Dropped;
        }
        self.expire(now);
        let waiter = Waiter {
            client,
            id: u16::from_be_bytes([query[0], query[1]]),
        };
        let key = &query[2..];
        if let Some(entry) = self
            .joinable
            .get(key)
            .and_then(|id| self.in_flight.get_mut(id))
        {
            if entry.waiters.contains(&waiter) {
                // The client asked again before the answer came: the query or the answer may
                // have been lost, so ask the resolver again (the same id, one entry).
                return Forward::Send(entry.query.to_vec());
            }
            if entry.waiters.len() < MAX_WAITERS {
                entry.waiters.push(waiter);
                return Forward::Joined;
            }
        }
        if self.in_flight.len() >= MAX_IN_FLIGHT {
            return Forward::Dropped;
        }
        let Some(id) = self.free_id() else {
            return Forward::Dropped;
        };
        let joinable = key.len() <= MAX_JOINABLE;
        if joinable {
            // A full entry's key moves to this one, so the next identical query joins here.
            self.joinable.insert(key.into(), id);
        }
        let mut sent = query;
        sent[..2].copy_from_slice(&id.to_be_bytes());
        self.serial += 1;
        self.expiry.push_back((now + self.timeout, id, self.serial));
        if self.expiry.len() > 2 * MAX_IN_FLIGHT {
            // Answered entries leave their records until the front expires; under a steady load
            // that is the query rate times the timeout. Dropping them now and then keeps the queue
            // within a bound, at a cost spread over thousands of queries.
            let in_flight = &self.in_flight;
            self.expiry
                .retain(|(_, id, serial)| in_flight.get(id).is_some_and(|e| e.serial == *serial));
        }
        self.in_flight.insert(
            id,
            InFlight {
                query: sent.clone().into_boxed_slice(),
                waiters: vec![waiter],
                joinable,
                serial: self.serial,
            },
        );
        Forward::Send(sent)
    }

    /// The resolver's `answer`, once for every client that asked, each with its own id. An answer
    /// nobody waits for (late, or forged) goes to nobody, and so does one whose question is not
    /// the question asked under its id, as resolvers check: the id alone is 16 bits to guess,
    /// and the real answer may still come.
    pub fn answer(&mut self, answer: &[u8], replies: &mut Vec<Datagram>) {
        if answer.len() < 12 {
            return;
        }
        let id = u16::from_be_bytes([answer[0], answer[1]]);
        let Some(asked) = self.in_flight.get(&id) else {
            return;
        };
        let question = 12..question_end(&asked.query).unwrap_or(12);
        if answer.get(question.clone()) != asked.query.get(question) {
            return;
        }
        let Some(entry) = self.remove(id) else {
            return;
        };
        for waiter in entry.waiters {
            let mut reply = answer.to_vec();
            reply[..2].copy_from_slice(&waiter.id.to_be_bytes());
            replies.push((reply, Some(waiter.client)));
        }
    }

    /// A query [`Self::forward`] said to send could not be sent (`sent`: its bytes): its id is
    /// freed at once, and every client waiting for it gets SERVFAIL now instead of waiting out
    /// its own timeout.
    pub fn give_up(&mut self, sent: &[u8], replies: &mut Vec<Datagram>) {
        if sent.len() < 12 {
            return;
        }
        let Some(entry) = self.remove(u16::from_be_bytes([sent[0], sent[1]])) else {
            return;
        };
        let Ok(question) = read_query(&entry.query) else {
            return;
        };
        let failure = question.empty_response(RCODE_SERVFAIL);
        for waiter in entry.waiters {
            let mut reply = failure.clone();
            reply[..2].copy_from_slice(&waiter.id.to_be_bytes());
            replies.push((reply, Some(waiter.client)));
        }
    }

    /// Forwarded queries waiting for their answer.
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn remove(&mut self, id: u16) -> Option<InFlight> {
        let entry = self.in_flight.remove(&id)?;
        if entry.joinable && self.joinable.get(&entry.query[2..]) == Some(&id) {
            self.joinable.remove(&entry.query[2..]);
        }
        Some(entry)
    }

    /// Forgets the entries whose time is up: their clients have given up, and their ids are free.
    fn expire(&mut self, now: Instant) {
        while let Some(&(deadline, id, serial)) = self.expiry.front() {
            if deadline > now {
                break;
            }
            self.expiry.pop_front();
            if self.in_flight.get(&id).is_some_and(|e| e.serial == serial) {
                self.remove(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns_wire::{TYPE_A, TYPE_AAAA, build_query};

    const TIMEOUT: Duration = Duration::from_secs(2);

    fn seeded(seed: u64) -> StdRng {
        rand::SeedableRng::seed_from_u64(seed)
    }

    fn client(n: u8) -> SocketAddr {
        SocketAddr::from(([10, 99, 0, n], 40000))
    }

    fn sent_id(forward: &Forward) -> u16 {
        match forward {
            Forward::Send(bytes) => u16::from_be_bytes([bytes[0], bytes[1]]),
            other => panic!("expected a query to send, got {other:?}"),
        }
    }

    /// The resolver's answer under `id` to the question (`name`, `qtype`).
    fn answer_with(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut answer = build_query(id, name, qtype);
        answer[2] |= 0x80;
        answer
    }

    fn answer_to(id: u16) -> Vec<u8> {
        answer_with(id, "db", TYPE_A)
    }

    #[test]
    fn a_forwarded_query_gets_an_id_of_its_own_and_its_answer_the_clients_id_back() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(42));
        let now = Instant::now();
        let query = build_query(0x1234, "db", TYPE_A);
        let forward = table.forward(query.clone(), client(1), now);
        let Forward::Send(sent) = &forward else {
            panic!("{forward:?}")
        };
        assert_eq!(sent[2..], query[2..], "the query travels as received");
        let mut replies = Vec::new();
        table.answer(&answer_to(sent_id(&forward)), &mut replies);
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].1, Some(client(1)));
        assert_eq!(replies[0].0[..2], [0x12, 0x34]);
        assert_eq!(table.in_flight(), 0);
        table.answer(&answer_to(sent_id(&forward)), &mut replies);
        assert_eq!(
            replies.len(),
            1,
            "a second answer to the same id goes to nobody"
        );
    }

    #[test]
    fn an_answer_to_another_question_under_the_id_goes_to_nobody_and_the_query_waits_on() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(31));
        let now = Instant::now();
        let id = sent_id(&table.forward(build_query(0x0101, "db", TYPE_A), client(1), now));
        let mut replies = Vec::new();
        for forged in [
            answer_with(id, "evil", TYPE_A),
            answer_with(id, "db", TYPE_AAAA),
            answer_to(id)[..14].to_vec(),
        ] {
            table.answer(&forged, &mut replies);
        }
        assert!(replies.is_empty(), "{replies:?}");
        assert_eq!(table.in_flight(), 1);
        table.answer(&answer_to(id), &mut replies);
        assert_eq!(replies.len(), 1, "the real answer still reaches the client");
        assert_eq!(replies[0].0[..2], [0x01, 0x01]);
    }

    #[test]
    fn identical_queries_in_flight_are_sent_once_and_answered_to_every_client() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(7));
        let now = Instant::now();
        let first = table.forward(build_query(1, "db", TYPE_A), client(1), now);
        assert_eq!(
            table.forward(build_query(2, "db", TYPE_A), client(2), now),
            Forward::Joined
        );
        assert_eq!(
            table.forward(build_query(1, "db", TYPE_A), client(3), now),
            Forward::Joined,
            "the same id from another client is another client"
        );
        let mut replies = Vec::new();
        table.answer(&answer_to(sent_id(&first)), &mut replies);
        let mut got: Vec<(SocketAddr, [u8; 2])> = replies
            .iter()
            .map(|(r, c)| (c.unwrap(), [r[0], r[1]]))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (client(1), [0, 1]),
                (client(2), [0, 2]),
                (client(3), [0, 1])
            ]
        );
        // Once answered, the same question is forwarded afresh.
        assert!(matches!(
            table.forward(build_query(4, "db", TYPE_A), client(1), now),
            Forward::Send(_)
        ));
    }

    #[test]
    fn queries_that_differ_in_any_byte_are_forwarded_separately() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(9));
        let now = Instant::now();
        let a = build_query(1, "db", TYPE_A);
        let mut no_recursion = a.clone();
        no_recursion[2] &= !0x01;
        for query in [
            a.clone(),
            build_query(1, "db", TYPE_AAAA),
            build_query(1, "DB", TYPE_A),
            build_query(1, "cache", TYPE_A),
            no_recursion,
        ] {
            assert!(
                matches!(
                    table.forward(query.clone(), client(1), now),
                    Forward::Send(_)
                ),
                "{query:?}"
            );
        }
        assert_eq!(table.in_flight(), 5);
    }

    #[test]
    fn a_client_asking_again_has_the_query_sent_again_under_the_same_id() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(11));
        let now = Instant::now();
        let query = build_query(5, "db", TYPE_A);
        let first = table.forward(query.clone(), client(1), now);
        let again = table.forward(query.clone(), client(1), now + Duration::from_secs(1));
        assert_eq!(first, again);
        let mut replies = Vec::new();
        table.answer(&answer_to(sent_id(&first)), &mut replies);
        assert_eq!(replies.len(), 1, "answered once, not once per retry");
    }

    #[test]
    fn a_full_entry_starts_another_and_later_queries_join_that_one() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(13));
        let now = Instant::now();
        let query = |id| build_query(id, "db", TYPE_A);
        let first = sent_id(&table.forward(query(0), client(0), now));
        for n in 1..MAX_WAITERS as u16 {
            assert_eq!(table.forward(query(n), client(1), now), Forward::Joined);
        }
        let second = sent_id(&table.forward(query(1000), client(2), now));
        assert_ne!(first, second);
        assert_eq!(table.forward(query(1001), client(3), now), Forward::Joined);
        let mut replies = Vec::new();
        table.answer(&answer_to(first), &mut replies);
        assert_eq!(replies.len(), MAX_WAITERS);
        replies.clear();
        table.answer(&answer_to(second), &mut replies);
        assert_eq!(replies.len(), 2);
    }

    #[test]
    fn entries_expire_after_the_timeout_and_free_their_ids() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(17));
        let now = Instant::now();
        let first = sent_id(&table.forward(build_query(1, "db", TYPE_A), client(1), now));
        let later = now + TIMEOUT + Duration::from_millis(1);
        let second = table.forward(build_query(2, "db", TYPE_A), client(2), later);
        assert!(
            matches!(second, Forward::Send(_)),
            "an expired query is not joined"
        );
        assert_eq!(table.in_flight(), 1);
        let mut replies = Vec::new();
        table.answer(&answer_to(first), &mut replies);
        assert!(replies.is_empty(), "a late answer goes to nobody");
    }

    #[test]
    fn the_table_is_bounded() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(19));
        let now = Instant::now();
        let mut dropped = 0;
        for n in 0..MAX_IN_FLIGHT + 10 {
            let query = build_query(1, &format!("n{n}"), TYPE_A);
            if table.forward(query.clone(), client(1), now) == Forward::Dropped {
                dropped += 1;
            }
        }
        assert_eq!(table.in_flight(), MAX_IN_FLIGHT);
        assert!(dropped >= 10);
        assert!(table.joinable.len() <= MAX_IN_FLIGHT);
    }

    /// Answered queries do not pile up in the expiry queue, whatever the rate.
    #[test]
    fn the_expiry_queue_is_bounded_under_a_steady_load() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(29));
        let now = Instant::now();
        let mut replies = Vec::new();
        for n in 0..10 * MAX_IN_FLIGHT {
            let name = format!("n{n}");
            let forward = table.forward(build_query(1, &name, TYPE_A), client(1), now);
            table.answer(&answer_with(sent_id(&forward), &name, TYPE_A), &mut replies);
        }
        assert_eq!(replies.len(), 10 * MAX_IN_FLIGHT);
        assert_eq!(table.in_flight(), 0);
        assert!(
            table.expiry.len() <= 2 * MAX_IN_FLIGHT + 1,
            "{}",
            table.expiry.len()
        );
    }

    #[test]
    fn a_query_that_cannot_be_sent_is_answered_servfail_to_every_client_at_once() {
        let mut table = ForwardTable::new(TIMEOUT, seeded(23));
        let now = Instant::now();
        let Forward::Send(sent) = table.forward(build_query(0x4242, "web", TYPE_A), client(1), now)
        else {
            panic!("expected a send")
        };
        table.forward(build_query(0x0707, "web", TYPE_A), client(2), now);
        let mut replies = Vec::new();
        table.give_up(&sent, &mut replies);
        assert_eq!(replies.len(), 2);
        assert_eq!(
            (replies[0].1, &replies[0].0[..2]),
            (Some(client(1)), &[0x42, 0x42][..])
        );
        assert_eq!(
            (replies[1].1, &replies[1].0[..2]),
            (Some(client(2)), &[0x07, 0x07][..])
        );
        assert!(replies.iter().all(|(r, _)| r[3] & 0x0f == RCODE_SERVFAIL));
        assert_eq!(table.in_flight(), 0, "its id is free");
        replies.clear();
        table.give_up(&sent, &mut replies);
        assert!(replies.is_empty());
    }
}
