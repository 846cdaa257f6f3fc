//! The capture inbox: requests and mail the sidecar answered itself instead of letting out, kept
//! in memory, bounded, oldest dropped first.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use af_runtime::{CapturedItem, InboxEntry};

use crate::config::InboxConfig;

#[derive(Debug)]
struct Inner {
    entries: VecDeque<InboxEntry>,
    next_id: u64,
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
                next_id: 1,
            })),
            config,
        }
    }

    /// The most body a captured item keeps.
    pub fn max_body_bytes(&self) -> usize {
        self.config.max_body_bytes
    }

    /// Stores an item and returns its id.
    pub fn add(&self, item: CapturedItem) -> String {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let id = format!("{:06}", inner.next_id);
        inner.next_id += 1;
        inner.entries.push_back(InboxEntry {
            id: id.clone(),
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            item,
        });
        while inner.entries.len() > self.config.max_entries {
            inner.entries.pop_front();
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
        self.add(CapturedItem::Http {
            method: method.to_string(),
            host: host.to_string(),
            path: path.to_string(),
            headers,
            body: String::from_utf8_lossy(kept).into_owned(),
            truncated: total_body > kept.len() as u64,
        })
    }

    pub fn list(&self) -> Vec<InboxEntry> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .iter()
            .cloned()
            .collect()
    }

    pub fn get(&self, id: &str) -> Option<InboxEntry> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .iter()
            .find(|e| e.id == id)
            .cloned()
    }

    /// Empties the inbox; ids keep counting up, so an old id never names a new entry.
    pub fn clear(&self) -> usize {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let removed = inner.entries.len();
        inner.entries.clear();
        removed
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
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
        let CapturedItem::Http {
            body, truncated, ..
        } = inbox.get(&id).unwrap().item
        else {
            panic!()
        };
        assert_eq!((body.as_str(), truncated), ("abcd", true));
    }
}
