//! Axum's JSON and query extractors, answering a request they cannot read with the API's own
//! error (AFE-API-005, JSON), not axum's plain-text one.

use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::{ApiCode, ApiError};

/// A JSON body.
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(ApiError::new(
                ApiCode::BadRequest,
                format!("the body cannot be read: {}", rejection.body_text()),
            )),
        }
    }
}

/// Query parameters.
#[derive(Debug)]
pub struct Params<T>(pub T);

impl<S, T> FromRequestParts<S> for Params<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Params(value)),
            Err(rejection) => Err(ApiError::new(
                ApiCode::BadRequest,
                format!("the query cannot be read: {}", rejection.body_text()),
            )),
        }
    }
}

/// A count asked for, within `1..=max` (`default` when absent).
pub fn limit(asked: Option<i64>, default: i64, max: i64) -> Result<i64, ApiError> {
    match asked {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::new(
            ApiCode::BadRequest,
            format!("limit {n} is out of range: ask for 1 to {max}"),
        )),
    }
}

/// A position asked for (an event id, a time): not negative (`default` when absent).
pub fn at_least_zero(name: &str, asked: Option<i64>, default: i64) -> Result<i64, ApiError> {
    match asked {
        None => Ok(default),
        Some(n) if n >= 0 => Ok(n),
        Some(n) => Err(ApiError::new(
            ApiCode::BadRequest,
            format!("{name} {n} is negative: ask for 0 or more"),
        )),
    }
}
