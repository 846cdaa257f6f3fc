//! Where a worker or the API keeps tickets and hears of them: the store and the broker (Redis
//! streams and pub/sub, or the in-process queue), as both take them on the command line.

use std::sync::Arc;

use afe_queue::{
    EmbeddedNotifier, EmbeddedQueue, Notifier, Queue, QueueError, QueueSettings, RedisNotifier,
    RedisQueue,
};

/// The store and the broker, as `afe worker` and `afe serve` both take them.
#[derive(Debug, clap::Args)]
pub struct Backends {
    /// The store: postgres://USER:PASSWORD@HOST/DB, or sqlite://PATH for one machine.
    #[arg(long, env = "AFE_STORE_URL", default_value = "sqlite://.afe/afe.db")]
    pub store: String,
    /// The broker: redis://HOST:PORT/, or `embedded` (an in-process queue: only this process
    /// hears it; workers elsewhere find tickets by their sweep).
    #[arg(long, env = "AFE_BROKER_URL", default_value = "embedded")]
    pub broker: String,
    /// The prefix of the broker's keys (one engine's streams and channel).
    #[arg(long, default_value = "afe")]
    pub prefix: String,
}

impl Backends {
    /// Makes a SQLite store's folder on first use (the default is .afe/afe.db).
    pub fn make_sqlite_folder(&self) {
        if let Some(path) = self.store.strip_prefix("sqlite://")
            && let Some(parent) =
                std::path::Path::new(path.split('?').next().unwrap_or(path)).parent()
            && !parent.as_os_str().is_empty()
        {
            let _ = std::fs::create_dir_all(parent);
        }
    }
}

/// `embedded`, or a `redis://` URL; `prefix` names one engine's streams and channel.
pub async fn connect(
    url: &str,
    prefix: &str,
    settings: QueueSettings,
) -> Result<(Arc<dyn Queue>, Arc<dyn Notifier>), QueueError> {
    if url == "embedded" {
        return Ok((
            Arc::new(EmbeddedQueue::new(settings)),
            Arc::new(EmbeddedNotifier::default()),
        ));
    }
    let queue = RedisQueue::connect(url, prefix, settings).await?;
    let notifier = RedisNotifier::connect(url, prefix).await?;
    Ok((Arc::new(queue), Arc::new(notifier)))
}
