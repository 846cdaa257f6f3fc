//! The capture inbox: requests and mail the sidecar answered itself instead of letting out, kept
//! in memory, bounded by entries and by bytes, oldest dropped first. A workload decides what it
//! sends to a captured host, so the bytes bound is what keeps it from growing the sidecar — the
//! environment's only way out — past its memory limit.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use af_runtime::{CapturedItem, InboxEntry};

use crate::config::InboxConfig;

/// What an entry is counted as besides its text: the entry, its id and time, the strings' and
/// the header map's own allocations. An estimate; the text is what a workload controls.
const ENTRY_OVERHEAD: usize = 256;

/// The bytes an entry is counted as against `inbox.max_bytes`.
fn weight(item: &CapturedItem) -> usize {
    let text = match item {
        CapturedItem::Http {
            method,
            host,
            path,
            headers,
            body,
            ..
        } => {
            method.len()
                + host.len()
                + path.len()
                + body.len()
                + headers
                    .iter()
                    .map(|(name, value)| name.len() + value.len() + 64)
                    .sum::<usize>()
        }
        CapturedItem::Mail {
            from,
            to,
            subject,
            body,
            ..
        } => {
            from.len() + to.iter().map(|t| t.len() + 24).sum::<usize>() + subject.len() + body.len()
        }
    };
    ENTRY_OVERHEAD + text
}

/// `text` cut to at most `limit` bytes, on a character boundary; and whether it was cut.
fn cut(mut text: String, limit: usize) -> (String, bool) {
    if text.len() <= limit {
        return (text, false);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

#[derive(Debug)]
struct Inner {
    /// Shared, so that listing the inbox does not copy every body.
    entries: VecDeque<(Arc<InboxEntry>, usize)>,
    bytes: usize,
    next_id: u64,
    dropped: u64,
}

#[derive(Clone, Debug)]
pub struct Inbox {
    inner: Arc<Mutex<Inner>>,
    config: InboxConfig,
}

impl Inbox {
    pub fn new(config: InboxConfig) -> Inbox {
        Inbox {
            inner: Arc::new(Mutex::new(Inner {
                entries: VecDeque::new(),
                bytes: 0,
                next_id: 1,
                dropped: 0,
            })),
            config,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most body a captured item keeps.
    pub fn max_body_bytes(&self) -> usize {
        self.config.max_body_bytes
    }

    /// Stores an item and returns its id; drops the oldest entries while the inbox holds more
    /// than `max_entries` or more than `max_bytes`.
    pub fn add(&self, item: CapturedItem) -> String {
        let weight = weight(&item);
        let mut inner = self.lock();
        let id = format!("{:06}", inner.next_id);
        inner.next_id += 1;
        let entry = InboxEntry {
            id: id.clone(),
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            item,
        };
        inner.entries.push_back((Arc::new(entry), weight));
        inner.bytes += weight;
        while inner.entries.len() > self.config.max_entries
            || (inner.bytes > self.config.max_bytes && inner.entries.len() > 1)
        {
            let Some((_, dropped)) = inner.entries.pop_front() else {
                break;
            };
            inner.bytes -= dropped;
            inner.dropped += 1;
        }
        id
    }

    /// A captured HTTP request, its body cut at the limit.
    pub fn add_http(
        &self,
        method: &str,
        host: &str,
        path: &str,
        headers: BTreeMap<String, String>,
        body: &[u8],
        total_body: u64,
    ) -> String {
        let kept = &body[..body.len().min(self.config.max_body_bytes)];
        // Lossy decoding may grow invalid bytes threefold (U+FFFD): cut again after it.
        let (body, cut_after_decoding) = cut(
            String::from_utf8_lossy(kept).into_owned(),
            self.config.max_body_bytes,
        );
        self.add(CapturedItem::Http {
            method: method.to_string(),
            host: host.to_string(),
            path: path.to_string(),
            headers,
            body,
            truncated: total_body > kept.len() as u64 || cut_after_decoding,
        })
    }

    /// A captured mail message, its body cut at the limit.
    pub fn add_mail(&self, from: String, to: Vec<String>, subject: String, body: String) -> String {
        let (body, truncated) = cut(body, self.config.max_body_bytes);
        self.add(CapturedItem::Mail {
            from,
            to,
            subject,
            body,
            truncated,
        })
    }

    pub fn list(&self) -> Vec<Arc<InboxEntry>> {
        self.lock()
            .entries
            .iter()
            .map(|(entry, _)| entry.clone())
            .collect()
    }

    pub fn get(&self, id: &str) -> Option<Arc<InboxEntry>> {
        self.lock()
            .entries
            .iter()
            .find(|(entry, _)| entry.id == id)
            .map(|(entry, _)| entry.clone())
    }

    /// Empties the inbox; ids keep counting up, so an old id never names a new entry.
    pub fn clear(&self) -> usize {
        let mut inner = self.lock();
        let removed = inner.entries.len();
        inner.entries.clear();
        inner.bytes = 0;
        removed
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// The bytes the entries held are counted as.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries dropped to stay within the bounds, since the sidecar started.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_truncating_and_never_reusing_ids() {
        let inbox = Inbox::new(InboxConfig {
            max_entries: 2,
            max_body_bytes: 4,
            max_bytes: 1 << 20,
        });
        let first = inbox.add_http("POST", "a", "/", BTreeMap::new(), b"abcdef", 6);
        inbox.add_http("POST", "b", "/", BTreeMap::new(), b"ab", 2);
        inbox.add_http("POST", "c", "/", BTreeMap::new(), b"", 0);
        assert_eq!(inbox.len(), 2);
        assert!(inbox.get(&first).is_none(), "the oldest is dropped");
        let listed = inbox.list();
        let CapturedItem::Http {
            host, truncated, ..
        } = &listed[0].item
        else {
            panic!()
        };
        assert_eq!((host.as_str(), *truncated), ("b", false));
        assert_eq!(inbox.clear(), 2);
        let id = inbox.add_http("GET", "d", "/", BTreeMap::new(), b"abcdef", 6);
        assert_eq!(id, "000004");
        assert_eq!(body_of(&inbox.get(&id).unwrap()), ("abcd", true));
    }

    fn body_of(entry: &InboxEntry) -> (&str, bool) {
        match &entry.item {
            CapturedItem::Http {
                body, truncated, ..
            }
            | CapturedItem::Mail {
                body, truncated, ..
            } => (body.as_str(), *truncated),
        }
    }

    #[test]
    fn what_a_workload_sends_cannot_grow_the_inbox_past_its_bytes() {
        let inbox = Inbox::new(InboxConfig {
            max_entries: 1000,
            max_body_bytes: 10_000,
            max_bytes: 35_000,
        });
        let big = vec![b'x'; 10_000];
        let ids: Vec<String> = (0..10)
            .map(|_| inbox.add_http("POST", "h", "/", BTreeMap::new(), &big, 10_000))
            .collect();
        // Each entry counts 10 000 bytes of body and its overhead: three fit in 35 000.
        assert_eq!(inbox.len(), 3);
        assert!(inbox.bytes() <= 35_000, "{}", inbox.bytes());
        assert_eq!(inbox.dropped(), 7);
        let kept: Vec<String> = inbox.list().iter().map(|e| e.id.clone()).collect();
        assert_eq!(kept, ids[7..], "the newest are kept");
        inbox.clear();
        assert_eq!(inbox.bytes(), 0);
    }

    #[test]
    fn the_newest_entry_is_kept_even_when_it_alone_is_over_the_bound() {
        let inbox = Inbox::new(InboxConfig {
            max_entries: 10,
            max_body_bytes: 100,
            max_bytes: 100,
        });
        inbox.add_http("POST", "h", "/", BTreeMap::new(), &[b'x'; 100], 100);
        let newest = inbox.add_http("POST", "h", "/", BTreeMap::new(), &[b'y'; 100], 100);
        assert_eq!(inbox.list().len(), 1);
        assert_eq!(inbox.list()[0].id, newest);
    }

    #[test]
    fn mail_and_undecodable_bodies_are_cut_at_the_body_limit_too() {
        let inbox = Inbox::new(InboxConfig {
            max_entries: 10,
            max_body_bytes: 9,
            max_bytes: 1 << 20,
        });
        let id = inbox.add_mail(
            "a@b".into(),
            vec!["c@d".into()],
            "s".into(),
            "héllo wörld".into(),
        );
        let mail = inbox.get(&id).unwrap();
        // 9 bytes would split the 'ö' (bytes 8 and 9): the cut falls before it.
        assert_eq!(body_of(&mail), ("héllo w", true));
        let id = inbox.add_mail("a@b".into(), vec![], "s".into(), "short".into());
        assert_eq!(body_of(&inbox.get(&id).unwrap()), ("short", false));
        // Nine invalid bytes decode to nine U+FFFD, 27 bytes: cut again to the limit.
        let id = inbox.add_http("POST", "h", "/", BTreeMap::new(), &[0xff; 9], 9);
        assert_eq!(
            body_of(&inbox.get(&id).unwrap()),
            ("\u{fffd}\u{fffd}\u{fffd}", true)
        );
    }
}
