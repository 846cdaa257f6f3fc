//! What a model call can fail with, by cause, each with an `AFE-MOD-0xx` code (docs/errors.md) and
//! what to do; and, for each, whether the provider can have charged for it — the worker retries only
//! what it cannot have paid for. No error carries the key.

use std::time::Duration;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The variable the agent names for its key is not in the worker's environment.
    #[error(
        "AFE-MOD-001 the model key's variable {variable} is not set in the worker's environment"
    )]
    NoKey { variable: String },
    /// The provider refused the key (401, 403).
    #[error("AFE-MOD-002 {provider} refused the key ({status}): {message}")]
    Refused {
        provider: String,
        status: u16,
        message: String,
    },
    /// The account has no credit left (402).
    #[error("AFE-MOD-003 {provider} wants payment (402): {message}")]
    PaymentRequired { provider: String, message: String },
    /// Too many requests (429); the provider's `Retry-After`, when it said one.
    #[error("AFE-MOD-004 {provider} is rate limiting (429){}: {message}", retry_after.map(|d| format!(", retry after {} s", d.as_secs())).unwrap_or_default())]
    RateLimited {
        provider: String,
        retry_after: Option<Duration>,
        message: String,
    },
    /// The provider refused the request itself (400, 404, 422: an unknown model, too long a
    /// context, a schema it does not take).
    #[error("AFE-MOD-005 {provider} refused the request ({status}): {message}")]
    Rejected {
        provider: String,
        status: u16,
        message: String,
    },
    /// The provider failed before it answered (5xx).
    #[error("AFE-MOD-006 {provider} failed ({status}): {message}")]
    Unavailable {
        provider: String,
        status: u16,
        message: String,
    },
    /// The provider said it failed inside a stream it had begun with 200.
    #[error("AFE-MOD-007 {provider} failed during its answer: {message}")]
    InStream { provider: String, message: String },
    /// The answer is not the stream of chunks an OpenAI-compatible endpoint sends, or it ended
    /// before its last chunk.
    #[error("AFE-MOD-008 the answer of {provider} cannot be read: {detail}")]
    Malformed { provider: String, detail: String },
    /// The endpoint could not be reached: nothing was sent.
    #[error("AFE-MOD-009 {provider} cannot be reached at {url}: {detail}")]
    Unreachable {
        provider: String,
        url: String,
        detail: String,
    },
    /// Nothing came for too long after the request was sent.
    #[error("AFE-MOD-010 {provider} sent nothing for {} s", .waited.as_secs())]
    Timeout { provider: String, waited: Duration },
    /// The agent's provider has no endpoint the engine knows, and the agent names none.
    #[error(
        "AFE-MOD-011 provider {provider} has no endpoint afe knows, and the agent names no baseUrl"
    )]
    NoEndpoint { provider: String },
}

impl ModelError {
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::NoKey { .. } => "AFE-MOD-001",
            ModelError::Refused { .. } => "AFE-MOD-002",
            ModelError::PaymentRequired { .. } => "AFE-MOD-003",
            ModelError::RateLimited { .. } => "AFE-MOD-004",
            ModelError::Rejected { .. } => "AFE-MOD-005",
            ModelError::Unavailable { .. } => "AFE-MOD-006",
            ModelError::InStream { .. } => "AFE-MOD-007",
            ModelError::Malformed { .. } => "AFE-MOD-008",
            ModelError::Unreachable { .. } => "AFE-MOD-009",
            ModelError::Timeout { .. } => "AFE-MOD-010",
            ModelError::NoEndpoint { .. } => "AFE-MOD-011",
        }
    }

    pub fn help(&self) -> &'static str {
        match self {
            ModelError::NoKey { .. } => {
                "set the variable in the worker's environment (on Kubernetes: workers.envSecretRefs); the key never goes anywhere else"
            }
            ModelError::Refused { .. } => {
                "check the key in the worker's environment, and that it may use this model"
            }
            ModelError::PaymentRequired { .. } => "add credit to the provider's account",
            ModelError::RateLimited { .. } => {
                "nothing, usually: the call is retried after the provider's delay; if it persists, lower the workers' concurrency"
            }
            ModelError::Rejected { .. } => {
                "check the agent's model name and settings, and the size of what the node sends; the provider's message says which"
            }
            ModelError::Unavailable { .. } => {
                "nothing, usually: the call is retried; if it persists, see the provider's status page"
            }
            ModelError::InStream { .. } => {
                "the provider failed mid-answer; the node fails, and its reservation is settled with what the provider reports"
            }
            ModelError::Malformed { .. } => {
                "check that the agent's baseUrl is an OpenAI-compatible chat completions endpoint"
            }
            ModelError::Unreachable { .. } => {
                "check the agent's baseUrl and that the worker reaches it; the call is retried"
            }
            ModelError::Timeout { .. } => {
                "the provider may be overloaded; the node is retried by a later attempt"
            }
            ModelError::NoEndpoint { .. } => {
                "set the agent's model.baseUrl to the provider's OpenAI-compatible API, or use openrouter or openai"
            }
        }
    }

    /// Whether the provider can have charged for the call: never when it refused or failed before
    /// it answered, or could not be reached; always possible once an answer had begun.
    pub fn may_have_charged(&self) -> bool {
        matches!(
            self,
            ModelError::InStream { .. } | ModelError::Malformed { .. } | ModelError::Timeout { .. }
        )
    }

    /// Whether trying the same call again can succeed and cannot pay twice.
    pub fn retryable(&self) -> bool {
        !self.may_have_charged()
            && matches!(
                self,
                ModelError::RateLimited { .. }
                    | ModelError::Unavailable { .. }
                    | ModelError::Unreachable { .. }
            )
    }

    /// Every code, for docs/errors.md.
    pub const CODES: [&'static str; 11] = [
        "AFE-MOD-001",
        "AFE-MOD-002",
        "AFE-MOD-003",
        "AFE-MOD-004",
        "AFE-MOD-005",
        "AFE-MOD-006",
        "AFE-MOD-007",
        "AFE-MOD-008",
        "AFE-MOD-009",
        "AFE-MOD-010",
        "AFE-MOD-011",
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_cannot_have_been_paid_for_is_retried() {
        let p = || "p".to_string();
        let retried = [
            ModelError::RateLimited {
                provider: p(),
                retry_after: None,
                message: p(),
            },
            ModelError::Unavailable {
                provider: p(),
                status: 503,
                message: p(),
            },
            ModelError::Unreachable {
                provider: p(),
                url: p(),
                detail: p(),
            },
        ];
        for err in &retried {
            assert!(err.retryable() && !err.may_have_charged(), "{err}");
        }
        let not = [
            ModelError::InStream {
                provider: p(),
                message: p(),
            },
            ModelError::Timeout {
                provider: p(),
                waited: Duration::from_secs(1),
            },
            ModelError::Refused {
                provider: p(),
                status: 401,
                message: p(),
            },
        ];
        for err in &not {
            assert!(!err.retryable(), "{err}");
        }
    }
}
