//! Queue errors, each with an `AFE-QUE-0xx` code (docs/errors.md).

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The broker could not be reached or refused a command; usually passing (a restart).
    #[error("AFE-QUE-001 the queue is unavailable: {detail}")]
    Unavailable { detail: String },
    /// The broker answered something this version does not understand.
    #[error("AFE-QUE-002 the queue answered in an unexpected form: {detail}")]
    Protocol { detail: String },
}

impl QueueError {
    pub fn code(&self) -> &'static str {
        match self {
            QueueError::Unavailable { .. } => "AFE-QUE-001",
            QueueError::Protocol { .. } => "AFE-QUE-002",
        }
    }

    pub fn help(&self) -> &'static str {
        match self {
            QueueError::Unavailable { .. } => {
                "check that Redis runs and its URL is right; workers retry on their own, and tickets wait in the store"
            }
            QueueError::Protocol { .. } => "use Redis 6.2 or newer (XAUTOCLAIM)",
        }
    }

    pub const CODES: [&'static str; 2] = ["AFE-QUE-001", "AFE-QUE-002"];
}

impl From<redis::RedisError> for QueueError {
    fn from(err: redis::RedisError) -> QueueError {
        if err.kind() == redis::ErrorKind::UnexpectedReturnType {
            QueueError::Protocol {
                detail: err.to_string(),
            }
        } else {
            QueueError::Unavailable {
                detail: err.to_string(),
            }
        }
    }
}
