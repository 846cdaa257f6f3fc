//! The local runtime's errors, typed by cause, each becoming an AF-RUN-* error for the person.

use af_runtime::{Category, RuntimeError, RuntimeErrorKind};
use af_sidecar_api::control_client::ControlError;

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The platform failed `operation` (AF-RUN-001).
    #[error("{operation} failed: {cause}")]
    Platform { operation: String, cause: Cause },
    /// The engine image cannot be had (AF-RUN-002).
    #[error("the engine image is not available: {detail}")]
    EngineImage { detail: String },
    /// af could not write what it meant to send (AF-RUN-064): its own fault.
    #[error("{operation}: {detail}")]
    Internal { operation: String, detail: String },
    /// Any other AF-RUN error, already made.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// What failed underneath a [`DockerError::Platform`].
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// The daemon refused or failed the call.
    #[error(transparent)]
    Daemon(#[from] bollard::errors::Error),
    /// The sidecar's control API, reached across the egress network.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A socket or file of the machine af runs on.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// An answer unlike what the daemon gives for an environment af made (a container with no
    /// address, a sidecar with no token): something changed it behind af's back.
    #[error("{0}")]
    Unexpected(String),
}

impl From<String> for Cause {
    fn from(text: String) -> Cause {
        Cause::Unexpected(text)
    }
}

impl From<&str> for Cause {
    fn from(text: &str) -> Cause {
        Cause::Unexpected(text.to_string())
    }
}

/// A failed call to the platform, naming what af was doing.
pub fn platform(operation: impl Into<String>, cause: impl Into<Cause>) -> DockerError {
    DockerError::Platform {
        operation: operation.into(),
        cause: cause.into(),
    }
}

/// Something af could not write out (a policy, a configuration): its own fault, never the
/// platform's.
pub fn internal(operation: impl Into<String>, detail: impl std::fmt::Display) -> DockerError {
    DockerError::Internal {
        operation: operation.into(),
        detail: detail.to_string(),
    }
}

impl DockerError {
    /// Who can act on it.
    pub fn category(&self) -> Category {
        match self {
            DockerError::Platform { .. } | DockerError::EngineImage { .. } => Category::Platform,
            DockerError::Internal { .. } => Category::Internal,
            DockerError::Runtime(err) => err.category(),
        }
    }
}

impl From<DockerError> for RuntimeError {
    fn from(err: DockerError) -> RuntimeError {
        match err {
            DockerError::Platform { operation, cause } => RuntimeErrorKind::PlatformFailed {
                operation,
                detail: cause.to_string(),
            }
            .into(),
            DockerError::EngineImage { detail } => RuntimeErrorKind::EngineImage { detail }.into(),
            DockerError::Internal { operation, detail } => {
                RuntimeErrorKind::Internal { operation, detail }.into()
            }
            DockerError::Runtime(err) => err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_keeps_its_type_and_its_category() {
        let refused = platform(
            "creating network af-x-internal",
            bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message: "network with name af-x-internal already exists".into(),
            },
        );
        assert!(matches!(
            refused,
            DockerError::Platform {
                cause: Cause::Daemon(bollard::errors::Error::DockerResponseServerError {
                    status_code: 409,
                    ..
                }),
                ..
            }
        ));
        assert_eq!(refused.category(), Category::Platform);
        let runtime = RuntimeError::from(refused);
        assert_eq!(runtime.code(), af_runtime::RunCode::PlatformFailed);
        assert!(runtime.message().contains("already exists"), "{runtime}");

        let unexpected = platform("reading the sidecar's address", "it has none");
        assert!(matches!(
            unexpected,
            DockerError::Platform {
                cause: Cause::Unexpected(_),
                ..
            }
        ));

        let ours = internal(
            "writing the sidecar configuration",
            "a map key is not a string",
        );
        assert_eq!(ours.category(), Category::Internal);
        assert_eq!(
            RuntimeError::from(ours).code(),
            af_runtime::RunCode::Internal
        );
    }
}
