//! The Kubernetes runtime's errors, typed by cause, each becoming an AF-RUN-* error for the
//! person. The API server's own answer is kept as it came (its status and reason), so that a
//! refusal of af's credentials is told apart from a server that failed.

use af_runtime::{Category, RuntimeError, RuntimeErrorKind};

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The API server answered `operation` with an error, or could not be reached.
    #[error("{operation} failed: {source}")]
    Api {
        operation: String,
        source: kube::Error,
    },
    /// An answer unlike what the cluster gives for an environment af made (a pod with no name, a
    /// port-forward with no stream).
    #[error("{operation} failed: {detail}")]
    Unexpected { operation: String, detail: String },
    /// af could not write what it meant to send: its own fault.
    #[error("{operation}: {detail}")]
    Internal { operation: String, detail: String },
}

impl KubeError {
    /// The API server's HTTP status, when it answered with one.
    pub fn api_status(&self) -> Option<u16> {
        match self {
            KubeError::Api {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }

    /// Who can act on it: a refusal of af's credentials (401) or permissions (403) is the
    /// person's to grant; anything else the API server did is the platform's.
    pub fn category(&self) -> Category {
        RuntimeError::from(self.runtime_kind()).category()
    }

    /// The AF-RUN error it is.
    fn runtime_kind(&self) -> RuntimeErrorKind {
        match self {
            KubeError::Api { operation, source } => match self.api_status() {
                Some(status @ (401 | 403)) => RuntimeErrorKind::NotAllowed {
                    operation: operation.clone(),
                    status,
                    detail: source.to_string(),
                },
                _ => RuntimeErrorKind::PlatformFailed {
                    operation: operation.clone(),
                    detail: source.to_string(),
                },
            },
            KubeError::Unexpected { operation, detail } => RuntimeErrorKind::PlatformFailed {
                operation: operation.clone(),
                detail: detail.clone(),
            },
            KubeError::Internal { operation, detail } => RuntimeErrorKind::Internal {
                operation: operation.clone(),
                detail: detail.clone(),
            },
        }
    }
}

impl From<KubeError> for RuntimeError {
    fn from(err: KubeError) -> RuntimeError {
        err.runtime_kind().into()
    }
}

/// The API server failed `operation` (or refused af's credentials or permissions for it).
pub fn api(operation: impl Into<String>, source: kube::Error) -> RuntimeError {
    KubeError::Api {
        operation: operation.into(),
        source,
    }
    .into()
}

/// The cluster answered `operation` unlike it does for an environment af made.
pub fn unexpected(operation: impl Into<String>, detail: impl std::fmt::Display) -> RuntimeError {
    KubeError::Unexpected {
        operation: operation.into(),
        detail: detail.to_string(),
    }
    .into()
}

/// af could not write what it meant to send for `operation`.
pub fn internal(operation: impl Into<String>, detail: impl std::fmt::Display) -> RuntimeError {
    KubeError::Internal {
        operation: operation.into(),
        detail: detail.to_string(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(&format!("{reason} for the test"), reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn the_api_servers_refusal_of_af_is_told_apart_from_its_failure() {
        let forbidden = KubeError::Api {
            operation: "creating namespace af-shop-main".into(),
            source: status(403, "Forbidden"),
        };
        assert_eq!(forbidden.api_status(), Some(403));
        assert_eq!(forbidden.category(), Category::Manifest);
        let err = RuntimeError::from(forbidden);
        assert_eq!(err.code(), af_runtime::RunCode::NotAllowed);
        assert!(err.help().contains("kubectl auth can-i"), "{}", err.help());

        let failed = api("listing pods", status(500, "InternalError"));
        assert_eq!(failed.code(), af_runtime::RunCode::PlatformFailed);
        assert_eq!(
            internal("writing the verdict", "x").code(),
            af_runtime::RunCode::Internal
        );
        assert_eq!(
            unexpected("reading the pod", "it has no name").code(),
            af_runtime::RunCode::PlatformFailed
        );
    }
}
