//! Live events. A client subscribes first, then replays from the store after its last event id,
//! and events are deduplicated by id: one that reconnects misses nothing and sees nothing twice.
//!
//! Each process keeps one *feed* per watched ticket (and one for all tickets), whatever the
//! number of subscribers: the feed hears the broker's notices (published after each commit),
//! reads the new events from the store once, and hands them to its subscribers through a bounded
//! channel. It also reads the store every `poll_every` in case notices were lost (a broker
//! restart drops pub/sub messages). A subscriber that falls a whole channel behind is dropped —
//! it reconnects with its last id — so a slow client never makes the server buffer without bound.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use afe_queue::Notifier;
use afe_store::{Admin, Event, StoreError};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

/// How the live streams behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveSettings {
    /// Events a subscriber may be behind before it is dropped.
    pub buffer: usize,
    /// How often a feed reads the store without a notice.
    pub poll_every: Duration,
    /// A send to a client that takes longer than this drops the client.
    pub send_timeout: Duration,
}

impl Default for LiveSettings {
    fn default() -> LiveSettings {
        LiveSettings {
            buffer: 1024,
            poll_every: Duration::from_secs(2),
            send_timeout: Duration::from_secs(10),
        }
    }
}

/// Events read per store query.
const PAGE: i64 = 500;

/// The WebSocket close code for a client dropped for being too slow: 1013, "try again later".
pub const CLOSE_TOO_SLOW: u16 = 1013;

/// Why a subscription ended.
#[derive(Debug)]
pub enum Ended {
    /// The client fell `buffer` events behind.
    TooSlow { last: i64 },
    /// The store could not be read while replaying.
    Store(StoreError),
    /// The process is shutting down.
    Closed,
}

struct Feed {
    sender: broadcast::Sender<Arc<Event>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every live feed of this process.
pub struct Hub {
    store: Arc<dyn Admin>,
    notifier: Arc<dyn Notifier>,
    settings: LiveSettings,
    feeds: Mutex<HashMap<String, Weak<Feed>>>,
    everything: Mutex<Weak<Feed>>,
    subscribers: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("settings", &self.settings)
            .field("subscribers", &self.subscribers())
            .finish()
    }
}

/// Reads a ticket's events after `last` from the store, in pages.
async fn read_after(store: &dyn Admin, ticket: &str, last: i64) -> Result<Vec<Event>, StoreError> {
    let mut out = Vec::new();
    let mut after = last;
    loop {
        let page = store.events(ticket, after, PAGE).await?;
        let full = page.len() as i64 == PAGE;
        if let Some(event) = page.last() {
            after = event.seq;
        }
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

impl Hub {
    pub fn new(store: Arc<dyn Admin>, notifier: Arc<dyn Notifier>, settings: LiveSettings) -> Hub {
        Hub {
            store,
            notifier,
            settings,
            feeds: Mutex::new(HashMap::new()),
            everything: Mutex::new(Weak::new()),
            subscribers: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Clients subscribed now, over WebSocket or SSE.
    pub fn subscribers(&self) -> usize {
        self.subscribers.load(Ordering::Relaxed)
    }

    /// A ticket's feed, started when nobody watched it yet.
    async fn feed(&self, ticket: &str) -> Result<Arc<Feed>, StoreError> {
        if let Some(feed) = self
            .feeds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(ticket)
            .and_then(Weak::upgrade)
        {
            return Ok(feed);
        }
        let start = self.store.last_seq(ticket).await?;
        let mut feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(feed) = feeds.get(ticket).and_then(Weak::upgrade) {
            return Ok(feed);
        }
        let (sender, _) = broadcast::channel(self.settings.buffer);
        let task = tokio::spawn(ticket_feed(
            self.store.clone(),
            self.notifier.subscribe(),
            ticket.to_string(),
            start,
            sender.clone(),
            self.settings.poll_every,
        ));
        let feed = Arc::new(Feed { sender, task });
        feeds.retain(|_, weak| weak.strong_count() > 0);
        feeds.insert(ticket.to_string(), Arc::downgrade(&feed));
        Ok(feed)
    }

    /// Subscribes to `ticket`'s events after `after`: subscribed first, replayed from the store
    /// on the first `next`.
    pub async fn subscribe(&self, ticket: &str, after: i64) -> Result<Subscription, StoreError> {
        let feed = self.feed(ticket).await?;
        let receiver = feed.sender.subscribe();
        Ok(Subscription {
            store: self.store.clone(),
            ticket: ticket.to_string(),
            last: after.max(0),
            receiver,
            backlog: VecDeque::new(),
            catch_up: true,
            _feed: feed,
            _count: Counted::new(self.subscribers.clone()),
        })
    }

    /// Subscribes to every ticket's events, replaying those written since `since` (ms) first.
    pub fn subscribe_all(&self, since: Option<i64>) -> AllSubscription {
        let feed = {
            let mut everything = self.everything.lock().unwrap_or_else(|e| e.into_inner());
            match everything.upgrade() {
                Some(feed) => feed,
                None => {
                    let (sender, _) = broadcast::channel(self.settings.buffer);
                    let task = tokio::spawn(all_feed(
                        self.store.clone(),
                        self.notifier.subscribe(),
                        sender.clone(),
                        self.settings.poll_every,
                    ));
                    let feed = Arc::new(Feed { sender, task });
                    *everything = Arc::downgrade(&feed);
                    feed
                }
            }
        };
        AllSubscription {
            store: self.store.clone(),
            receiver: feed.sender.subscribe(),
            seen: HashMap::new(),
            replay: since.map(|since| (since, None)),
            backlog: VecDeque::new(),
            _feed: feed,
            _count: Counted::new(self.subscribers.clone()),
        }
    }

    pub fn settings(&self) -> LiveSettings {
        self.settings
    }
}

/// Counts a subscriber for as long as it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(count: Arc<AtomicUsize>) -> Counted {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One ticket's feed: reads the events after `last` whenever a notice names a newer one, and
/// every `poll_every`; ends when nobody listens.
async fn ticket_feed(
    store: Arc<dyn Admin>,
    mut notices: broadcast::Receiver<afe_queue::Notice>,
    ticket: String,
    mut last: i64,
    sender: broadcast::Sender<Arc<Event>>,
    poll_every: Duration,
) {
    let mut poll = tokio::time::interval(poll_every);
    loop {
        let read = tokio::select! {
            notice = notices.recv() => match notice {
                Ok(notice) => notice.ticket == ticket && notice.seq > last,
                Err(RecvError::Lagged(_)) => true,
                Err(RecvError::Closed) => {
                    // No more notices: the poll alone keeps the feed going.
                    poll.tick().await;
                    true
                }
            },
            _ = poll.tick() => true,
        };
        if !read {
            continue;
        }
        match read_after(store.as_ref(), &ticket, last).await {
            Ok(events) => {
                for event in events {
                    last = event.seq;
                    // No receiver right now is fine: subscribers replay from the store.
                    let _ = sender.send(Arc::new(event));
                }
            }
            Err(err) => tracing::debug!(%ticket, error = %err, "live feed cannot read the store"),
        }
    }
}

/// Every ticket's feed: on a notice, the named ticket's events after the last one this feed
/// sent; every `poll_every`, whatever was written in the last seconds (notices a broker restart
/// lost), deduplicated per ticket.
async fn all_feed(
    store: Arc<dyn Admin>,
    mut notices: broadcast::Receiver<afe_queue::Notice>,
    sender: broadcast::Sender<Arc<Event>>,
    poll_every: Duration,
) {
    // The poll looks this far behind the newest event it has seen: a transaction that took
    // longer than this between its clock reading and its commit is only heard by its notice.
    const LOOK_BEHIND_MS: i64 = 5_000;
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut newest_at: Option<i64> = None;
    let mut poll = tokio::time::interval(poll_every);
    loop {
        let events = tokio::select! {
            notice = notices.recv() => match notice {
                Ok(notice) => {
                    let known = last.get(&notice.ticket).copied().unwrap_or(notice.seq - 1);
                    if notice.seq <= known {
                        continue;
                    }
                    read_after(store.as_ref(), &notice.ticket, known).await
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => {
                    poll.tick().await;
                    continue;
                }
            },
            _ = poll.tick() => {
                let Some(at) = newest_at else { continue };
                read_since(store.as_ref(), at - LOOK_BEHIND_MS).await
            }
        };
        let Ok(events) = events else { continue };
        for event in events {
            let known = last.entry(event.ticket.clone()).or_insert(0);
            if event.seq <= *known {
                continue;
            }
            *known = event.seq;
            newest_at = Some(newest_at.map_or(event.at, |at| at.max(event.at)));
            let _ = sender.send(Arc::new(event));
        }
        // Tickets not heard of for a while are forgotten (their next event is read from the
        // notice's seq): the map stays as large as the tickets that are active.
        if last.len() > 100_000 {
            last.clear();
        }
    }
}

async fn read_since(store: &dyn Admin, since: i64) -> Result<Vec<Event>, StoreError> {
    let mut out: Vec<Event> = Vec::new();
    loop {
        let page = store.events_since(since, out.last(), PAGE).await?;
        let full = page.len() as i64 == PAGE;
        out.extend(page);
        if !full {
            return Ok(out);
        }
    }
}

/// One client's view of one ticket's events.
pub struct Subscription {
    store: Arc<dyn Admin>,
    ticket: String,
    last: i64,
    receiver: broadcast::Receiver<Arc<Event>>,
    backlog: VecDeque<Event>,
    /// Read the store after `last` before listening (the replay, or a gap to fill).
    catch_up: bool,
    _feed: Arc<Feed>,
    _count: Counted,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("ticket", &self.ticket)
            .field("last", &self.last)
            .finish()
    }
}

impl Subscription {
    /// The last event id handed out.
    pub fn last(&self) -> i64 {
        self.last
    }

    /// The next event, in order, each exactly once.
    pub async fn next(&mut self) -> Result<Arc<Event>, Ended> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                if event.seq <= self.last {
                    continue;
                }
                self.last = event.seq;
                return Ok(Arc::new(event));
            }
            if self.catch_up {
                let events = read_after(self.store.as_ref(), &self.ticket, self.last)
                    .await
                    .map_err(Ended::Store)?;
                self.catch_up = false;
                self.backlog.extend(events);
                continue;
            }
            match self.receiver.recv().await {
                Ok(event) if event.seq <= self.last => {}
                Ok(event) if event.seq == self.last + 1 => {
                    self.last = event.seq;
                    return Ok(event);
                }
                // A gap (the feed started after a notice was lost): the store has it.
                Ok(_) => self.catch_up = true,
                Err(RecvError::Lagged(_)) => return Err(Ended::TooSlow { last: self.last }),
                Err(RecvError::Closed) => return Err(Ended::Closed),
            }
        }
    }
}

/// One client's view of every ticket's events.
pub struct AllSubscription {
    store: Arc<dyn Admin>,
    receiver: broadcast::Receiver<Arc<Event>>,
    seen: HashMap<String, i64>,
    /// Still replaying from (since, after this event).
    replay: Option<(i64, Option<Event>)>,
    backlog: VecDeque<Event>,
    _feed: Arc<Feed>,
    _count: Counted,
}

impl std::fmt::Debug for AllSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllSubscription")
            .field("tickets", &self.seen.len())
            .finish()
    }
}

impl AllSubscription {
    fn fresh(&mut self, event: &Event) -> bool {
        let seen = self.seen.entry(event.ticket.clone()).or_insert(0);
        if event.seq <= *seen {
            return false;
        }
        *seen = event.seq;
        true
    }

    pub async fn next(&mut self) -> Result<Arc<Event>, Ended> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                if self.fresh(&event) {
                    return Ok(Arc::new(event));
                }
                continue;
            }
            if let Some((since, after)) = self.replay.take() {
                let page = self
                    .store
                    .events_since(since, after.as_ref(), PAGE)
                    .await
                    .map_err(Ended::Store)?;
                if page.len() as i64 == PAGE {
                    self.replay = Some((since, page.last().cloned()));
                }
                self.backlog.extend(page);
                continue;
            }
            match self.receiver.recv().await {
                Ok(event) => match self.seen.get(&event.ticket) {
                    // A gap in a ticket this client has seen (a lost notice): the store has it.
                    Some(seen) if event.seq > seen + 1 => {
                        let missing = read_after(self.store.as_ref(), &event.ticket, *seen)
                            .await
                            .map_err(Ended::Store)?;
                        self.backlog.extend(missing);
                    }
                    _ => {
                        if self.fresh(&event) {
                            return Ok(event);
                        }
                    }
                },
                Err(RecvError::Lagged(_)) => return Err(Ended::TooSlow { last: 0 }),
                Err(RecvError::Closed) => return Err(Ended::Closed),
            }
        }
    }
}
