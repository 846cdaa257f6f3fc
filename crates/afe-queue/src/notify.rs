//! Notifications: "ticket T has new events up to seq N", published after the store commits, so a
//! subscriber (the API's WebSocket clients) reads the events from the store and never sees one
//! that could still roll back. Redis pub/sub between processes; a broadcast channel in process.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::QueueError;

/// One committed event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub ticket: String,
    pub seq: i64,
    pub kind: String,
}

impl Notice {
    fn to_message(&self) -> String {
        format!("{} {} {}", self.ticket, self.seq, self.kind)
    }

    fn from_message(text: &str) -> Option<Notice> {
        let mut parts = text.splitn(3, ' ');
        Some(Notice {
            ticket: parts.next()?.to_string(),
            seq: parts.next()?.parse().ok()?,
            kind: parts.next()?.to_string(),
        })
    }
}

#[async_trait]
pub trait Notifier: Send + Sync {
    async fn publish(&self, notice: &Notice) -> Result<(), QueueError>;
    /// Notices from now on. A slow subscriber misses notices (it lags) rather than holding
    /// publishers up; it catches up by reading the store from its last seq.
    fn subscribe(&self) -> broadcast::Receiver<Notice>;
}

const CAPACITY: usize = 4096;

#[derive(Debug)]
pub struct EmbeddedNotifier {
    sender: broadcast::Sender<Notice>,
}

impl Default for EmbeddedNotifier {
    fn default() -> EmbeddedNotifier {
        EmbeddedNotifier {
            sender: broadcast::channel(CAPACITY).0,
        }
    }
}

#[async_trait]
impl Notifier for EmbeddedNotifier {
    async fn publish(&self, notice: &Notice) -> Result<(), QueueError> {
        let _ = self.sender.send(notice.clone());
        Ok(())
    }

    fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.sender.subscribe()
    }
}

/// Publishes on a Redis channel; a task of its own listens to it, reconnecting after a restart,
/// and passes what it hears to this process's subscribers.
pub struct RedisNotifier {
    channel: String,
    commands: redis::aio::ConnectionManager,
    sender: broadcast::Sender<Notice>,
    listener: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for RedisNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisNotifier")
            .field("channel", &self.channel)
            .finish()
    }
}

impl Drop for RedisNotifier {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl RedisNotifier {
    pub async fn connect(url: &str, prefix: &str) -> Result<RedisNotifier, QueueError> {
        let client = redis::Client::open(url)?;
        let channel = format!("{prefix}:events");
        let sender = broadcast::channel(CAPACITY).0;
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let listener = tokio::spawn(listen(
            client.clone(),
            channel.clone(),
            sender.clone(),
            ready_tx,
        ));
        // Subscribed before the first publish, so a caller that subscribes and then acts misses
        // nothing.
        let _ = tokio::time::timeout(Duration::from_secs(5), ready).await;
        Ok(RedisNotifier {
            channel,
            commands: redis::aio::ConnectionManager::new(client).await?,
            sender,
            listener,
        })
    }
}

async fn listen(
    client: redis::Client,
    channel: String,
    sender: broadcast::Sender<Notice>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    use futures_util::StreamExt;
    let mut ready = Some(ready);
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => {
                if pubsub.subscribe(&channel).await.is_ok() {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    let mut messages = pubsub.on_message();
                    while let Some(message) = messages.next().await {
                        if let Some(notice) = message
                            .get_payload::<String>()
                            .ok()
                            .and_then(|t| Notice::from_message(&t))
                        {
                            let _ = sender.send(notice);
                        }
                    }
                }
                tracing::debug!(%channel, "notification subscription ended; resubscribing");
            }
            Err(err) => tracing::debug!(%channel, error = %err, "cannot subscribe yet"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[async_trait]
impl Notifier for RedisNotifier {
    async fn publish(&self, notice: &Notice) -> Result<(), QueueError> {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.channel)
            .arg(notice.to_message())
            .query_async(&mut self.commands.clone())
            .await?;
        Ok(())
    }

    fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.sender.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_survive_their_wire_form() {
        let notice = Notice {
            ticket: "t-1".into(),
            seq: 7,
            kind: "node.completed".into(),
        };
        assert_eq!(Notice::from_message(&notice.to_message()), Some(notice));
        assert_eq!(Notice::from_message("t 1"), None);
    }
}
