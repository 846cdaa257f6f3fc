//! The queue on Redis streams. One stream of entries (`PREFIX:tickets`, field `ticket`), one
//! consumer group (`workers`); XREADGROUP delivers, XAUTOCLAIM reclaims entries idle past the
//! threshold (a worker keeps its entry fresh with XCLAIM … JUSTID while it works), XPENDING tells
//! how often an entry was delivered, and a dead-lettered entry is copied to `PREFIX:dead` with its
//! reason. Acknowledged entries are deleted, so the stream holds only live work.

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Value};

use crate::{DeadLetter, Delivery, Queue, QueueError, QueueSettings};

pub const GROUP: &str = "workers";

#[derive(Clone)]
pub struct RedisQueue {
    settings: QueueSettings,
    stream: String,
    dead: String,
    /// For commands that answer at once.
    commands: ConnectionManager,
    /// For XREADGROUP … BLOCK, which holds its connection while it waits.
    blocking: ConnectionManager,
}

/// How much longer than its BLOCK a blocking read may take before Redis counts as unavailable.
const BLOCK_SLACK: Duration = Duration::from_secs(5);

impl std::fmt::Debug for RedisQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQueue")
            .field("stream", &self.stream)
            .field("settings", &self.settings)
            .finish()
    }
}

fn protocol(detail: impl Into<String>) -> QueueError {
    QueueError::Protocol {
        detail: detail.into(),
    }
}

/// Text out of a bulk or simple string.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `[id, [field, value, …]]` → (id, the value of `field`).
fn entry_field(entry: &Value, field: &str) -> Option<(String, String)> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let id = text(parts.first()?)?;
    let Value::Array(fields) = parts.get(1)? else {
        return None;
    };
    let value = fields
        .chunks(2)
        .find(|pair| pair.first().and_then(text).as_deref() == Some(field))
        .and_then(|pair| pair.get(1))
        .and_then(text)?;
    Some((id, value))
}

impl RedisQueue {
    /// Connects and makes sure the stream and its group exist. `prefix` names this engine's keys
    /// (tests give each run its own).
    pub async fn connect(
        url: &str,
        prefix: &str,
        settings: QueueSettings,
    ) -> Result<RedisQueue, QueueError> {
        let client = redis::Client::open(url)?;
        let queue = RedisQueue {
            settings,
            stream: format!("{prefix}:tickets"),
            dead: format!("{prefix}:dead"),
            commands: ConnectionManager::new(client.clone()).await?,
            // The client's own response timeout (half a second by default) would cut every
            // blocking read longer than that short — an error where nothing arrived, and an entry
            // arriving in the rest of the wait delivered to a reader no longer listening. The
            // read is bounded by its BLOCK and by `BLOCK_SLACK` here instead.
            blocking: ConnectionManager::new_with_config(
                client,
                ConnectionManagerConfig::new().set_response_timeout(None),
            )
            .await?,
        };
        queue.ensure_group().await?;
        Ok(queue)
    }

    /// Creates the group (and the stream) unless it exists; after a Redis restart without
    /// persistence it is made again.
    async fn ensure_group(&self) -> Result<(), QueueError> {
        let created: Result<Value, redis::RedisError> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.stream)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.commands.clone())
            .await;
        match created {
            Ok(_) => Ok(()),
            Err(err) if err.code() == Some("BUSYGROUP") => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// Runs a command on the consumer group. When Redis lost the group (a restart without its
    /// data), the group is made again and the answer is `None`: nothing was read this time.
    async fn in_group(
        &self,
        command: &redis::Cmd,
        connection: &ConnectionManager,
    ) -> Result<Option<Value>, QueueError> {
        match command.query_async(&mut connection.clone()).await {
            Ok(reply) => Ok(Some(reply)),
            Err(err) if err.code() == Some("NOGROUP") => {
                self.ensure_group().await?;
                Ok(None)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// How often the entry has been delivered (XPENDING's count).
    async fn deliveries(&self, entry: &str) -> Result<u64, QueueError> {
        let reply: Value = redis::cmd("XPENDING")
            .arg(&self.stream)
            .arg(GROUP)
            .arg(entry)
            .arg(entry)
            .arg(1)
            .query_async(&mut self.commands.clone())
            .await?;
        let Value::Array(rows) = reply else {
            return Err(protocol("XPENDING did not answer a list"));
        };
        match rows.first() {
            Some(Value::Array(row)) => match row.get(3) {
                Some(Value::Int(count)) => Ok(u64::try_from(*count).unwrap_or(0)),
                _ => Err(protocol("XPENDING row without a delivery count")),
            },
            _ => Ok(1),
        }
    }

    /// One entry idle past the threshold, now this consumer's.
    async fn reclaim(&self, consumer: &str) -> Result<Option<Delivery>, QueueError> {
        let mut command = redis::cmd("XAUTOCLAIM");
        command
            .arg(&self.stream)
            .arg(GROUP)
            .arg(consumer)
            .arg(self.settings.reclaim_after.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(1);
        let Some(reply) = self.in_group(&command, &self.commands).await? else {
            return Ok(None);
        };
        let Value::Array(parts) = reply else {
            return Err(protocol("XAUTOCLAIM did not answer a list"));
        };
        let Some(Value::Array(entries)) = parts.get(1) else {
            return Err(protocol("XAUTOCLAIM answered without entries"));
        };
        let Some((entry, ticket)) = entries.first().and_then(|e| entry_field(e, "ticket")) else {
            return Ok(None);
        };
        let deliveries = self.deliveries(&entry).await?;
        Ok(Some(Delivery {
            entry,
            ticket,
            deliveries,
        }))
    }

    async fn read_new(
        &self,
        consumer: &str,
        wait: Duration,
    ) -> Result<Option<Delivery>, QueueError> {
        let mut command = redis::cmd("XREADGROUP");
        command
            .arg("GROUP")
            .arg(GROUP)
            .arg(consumer)
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(wait.as_millis().max(1) as u64)
            .arg("STREAMS")
            .arg(&self.stream)
            .arg(">");
        let reply =
            tokio::time::timeout(wait + BLOCK_SLACK, self.in_group(&command, &self.blocking))
                .await
                .map_err(|_| QueueError::Unavailable {
                    detail: format!(
                        "Redis did not answer a read blocking for {} ms within {} s more",
                        wait.as_millis(),
                        BLOCK_SLACK.as_secs()
                    ),
                })?;
        let Some(reply) = reply? else {
            return Ok(None);
        };
        let Value::Array(streams) = reply else {
            return Ok(None); // nil: nothing arrived in time
        };
        let entry = streams.first().and_then(|stream| match stream {
            Value::Array(parts) => match parts.get(1) {
                Some(Value::Array(entries)) => entries.first().cloned(),
                _ => None,
            },
            _ => None,
        });
        Ok(entry
            .as_ref()
            .and_then(|e| entry_field(e, "ticket"))
            .map(|(entry, ticket)| Delivery {
                entry,
                ticket,
                deliveries: 1,
            }))
    }

    async fn remove(&self, entry: &str) -> Result<(), QueueError> {
        let mut conn = self.commands.clone();
        let _: Value = redis::pipe()
            .cmd("XACK")
            .arg(&self.stream)
            .arg(GROUP)
            .arg(entry)
            .cmd("XDEL")
            .arg(&self.stream)
            .arg(entry)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}

#[async_trait]
impl Queue for RedisQueue {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn settings(&self) -> QueueSettings {
        self.settings
    }

    async fn enqueue(&self, ticket: &str) -> Result<(), QueueError> {
        let _: String = self
            .commands
            .clone()
            .xadd(&self.stream, "*", &[("ticket", ticket)])
            .await?;
        Ok(())
    }

    async fn next(&self, consumer: &str, wait: Duration) -> Result<Option<Delivery>, QueueError> {
        if let Some(delivery) = self.reclaim(consumer).await? {
            return Ok(Some(delivery));
        }
        self.read_new(consumer, wait).await
    }

    async fn touch(&self, consumer: &str, delivery: &Delivery) -> Result<(), QueueError> {
        let _: Value = redis::cmd("XCLAIM")
            .arg(&self.stream)
            .arg(GROUP)
            .arg(consumer)
            .arg(0)
            .arg(&delivery.entry)
            .arg("JUSTID")
            .query_async(&mut self.commands.clone())
            .await?;
        Ok(())
    }

    async fn ack(&self, delivery: &Delivery) -> Result<(), QueueError> {
        self.remove(&delivery.entry).await
    }

    async fn dead_letter(&self, delivery: &Delivery, reason: &str) -> Result<(), QueueError> {
        let deliveries = delivery.deliveries.to_string();
        let _: String = self
            .commands
            .clone()
            .xadd(
                &self.dead,
                "*",
                &[
                    ("ticket", delivery.ticket.as_str()),
                    ("reason", reason),
                    ("deliveries", deliveries.as_str()),
                ],
            )
            .await?;
        self.remove(&delivery.entry).await
    }

    async fn dead_letters(&self) -> Result<Vec<DeadLetter>, QueueError> {
        let reply: Value = redis::cmd("XRANGE")
            .arg(&self.dead)
            .arg("-")
            .arg("+")
            .query_async(&mut self.commands.clone())
            .await?;
        let Value::Array(entries) = reply else {
            return Err(protocol("XRANGE did not answer a list"));
        };
        Ok(entries
            .iter()
            .filter_map(|entry| {
                let (_, ticket) = entry_field(entry, "ticket")?;
                let (_, reason) = entry_field(entry, "reason")?;
                let (_, deliveries) = entry_field(entry, "deliveries")?;
                Some(DeadLetter {
                    ticket,
                    reason,
                    deliveries: deliveries.parse().unwrap_or(0),
                })
            })
            .collect())
    }

    async fn depth(&self) -> Result<u64, QueueError> {
        let length: u64 = self.commands.clone().xlen(&self.stream).await?;
        Ok(length)
    }
}
