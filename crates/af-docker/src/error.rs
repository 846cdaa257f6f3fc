//! The local runtime's errors, each becoming an AF-RUN-* error for the person.

use af_runtime::{RuntimeError, RuntimeErrorKind};

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("{operation} failed: {detail}")]
    Platform { operation: String, detail: String },
    #[error("the engine image is not available: {detail}")]
    EngineImage { detail: String },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// A failed call to the daemon, naming what af was doing.
pub fn platform(operation: impl Into<String>, err: impl std::fmt::Display) -> DockerError {
    DockerError::Platform {
        operation: operation.into(),
        detail: err.to_string(),
    }
}

impl From<DockerError> for RuntimeError {
    fn from(err: DockerError) -> RuntimeError {
        match err {
            DockerError::Platform { operation, detail } => {
                RuntimeErrorKind::PlatformFailed { operation, detail }.into()
            }
            DockerError::EngineImage { detail } => RuntimeErrorKind::EngineImage { detail }.into(),
            DockerError::Runtime(err) => err,
        }
    }
}
