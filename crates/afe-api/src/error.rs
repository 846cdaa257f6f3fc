//! What the API answers when it cannot do what was asked: a status and a JSON body with the code
//! (`AFE-API-0xx`, or the store's or queue's own), what happened and what to do.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use afe_queue::QueueError;
use afe_store::StoreError;

/// The body of every error answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// `AFE-API-0xx`, `AFE-STO-0xx` or `AFE-QUE-0xx` (docs/errors.md).
    pub code: String,
    pub message: String,
    /// What to do next.
    pub help: String,
    /// Each problem of an input that does not match its Schema.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub problem: Problem,
}

/// The API's own codes, each with its status and advice. Every one is in docs/errors.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiCode {
    /// No bearer token, or not the right one.
    Unauthorized,
    /// The input does not match the flow's input Schema.
    InputInvalid,
    /// The current revision has no such flow.
    NoSuchFlow,
    /// No revision has been published yet.
    NoRevision,
    /// A query or path parameter cannot be read.
    BadRequest,
    /// The flow has no node of that id to rerun from.
    NoSuchNode,
    /// A checkpoint's diff could not be made (git).
    NoDiff,
}

impl ApiCode {
    pub const ALL: [ApiCode; 7] = [
        ApiCode::Unauthorized,
        ApiCode::InputInvalid,
        ApiCode::NoSuchFlow,
        ApiCode::NoRevision,
        ApiCode::BadRequest,
        ApiCode::NoSuchNode,
        ApiCode::NoDiff,
    ];

    pub fn code(self) -> &'static str {
        match self {
            ApiCode::Unauthorized => "AFE-API-001",
            ApiCode::InputInvalid => "AFE-API-002",
            ApiCode::NoSuchFlow => "AFE-API-003",
            ApiCode::NoRevision => "AFE-API-004",
            ApiCode::BadRequest => "AFE-API-005",
            ApiCode::NoSuchNode => "AFE-API-006",
            ApiCode::NoDiff => "AFE-API-007",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            ApiCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiCode::InputInvalid => StatusCode::UNPROCESSABLE_ENTITY,
            ApiCode::NoSuchFlow | ApiCode::NoSuchNode => StatusCode::NOT_FOUND,
            ApiCode::NoRevision => StatusCode::SERVICE_UNAVAILABLE,
            ApiCode::BadRequest => StatusCode::BAD_REQUEST,
            ApiCode::NoDiff => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn help(self) -> &'static str {
        match self {
            ApiCode::Unauthorized => {
                "send `Authorization: Bearer <token>` with the server's AFE_API_TOKEN (afe ticket reads it from AFE_API_TOKEN)"
            }
            ApiCode::InputInvalid => {
                "fix the input's fields as listed; GET /v1/revisions/current shows the flow's input Schema"
            }
            ApiCode::NoSuchFlow => {
                "name one of the current revision's flows (GET /v1/revisions/current)"
            }
            ApiCode::NoRevision => {
                "start `afe serve -c DIR` with a valid config folder: it publishes the folder's revision"
            }
            ApiCode::BadRequest => "fix the parameter as the message says (see /openapi.json)",
            ApiCode::NoSuchNode => "name a node of the ticket's flow (GET /v1/tickets/{id}/nodes)",
            ApiCode::NoDiff => {
                "make sure `git` is on afe serve's PATH (the afe-stack image has it); the message says what git said"
            }
        }
    }
}

impl ApiError {
    pub fn new(code: ApiCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status: code.status(),
            problem: Problem {
                code: code.code().to_string(),
                message: message.into(),
                help: code.help().to_string(),
                problems: Vec::new(),
            },
        }
    }

    pub fn with_problems(mut self, problems: Vec<String>) -> ApiError {
        self.problem.problems = problems;
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> ApiError {
        let status = match &err {
            StoreError::NotFound { .. } => StatusCode::NOT_FOUND,
            StoreError::Conflict { .. } | StoreError::LeaseLost { .. } => StatusCode::CONFLICT,
            StoreError::Unavailable { .. } | StoreError::Schema { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            StoreError::BudgetExceeded { .. }
            | StoreError::Corrupt { .. }
            | StoreError::InvalidState { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            problem: Problem {
                code: err.code().to_string(),
                message: err.to_string(),
                help: err.help().to_string(),
                problems: Vec::new(),
            },
        }
    }
}

impl From<QueueError> for ApiError {
    fn from(err: QueueError) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            problem: Problem {
                code: err.code().to_string(),
                message: err.to_string(),
                help: err.help().to_string(),
                problems: Vec::new(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(code = %self.problem.code, message = %self.problem.message, "answered {}", self.status);
        }
        (self.status, Json(self.problem)).into_response()
    }
}
