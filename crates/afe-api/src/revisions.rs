//! The revision routes: what configurations were published, and which one new tickets get.

use axum::Json;
use axum::extract::{Path, State};

use crate::ApiState;
use crate::error::{ApiCode, ApiError, Problem};
use crate::views::RevisionView;

/// Every stored revision, newest first.
#[utoipa::path(get, path = "/v1/revisions", tag = "revisions",
    responses((status = 200, body = Vec<RevisionView>), (status = 401, body = Problem),
        (status = 503, body = Problem)))]
pub async fn list(State(state): State<ApiState>) -> Result<Json<Vec<RevisionView>>, ApiError> {
    let current = state.store.current_revision().await?.map(|r| r.hash);
    let revisions = state.store.revisions().await?;
    Ok(Json(
        revisions
            .into_iter()
            .map(|info| {
                let is_current = current.as_deref() == Some(info.hash.as_str());
                RevisionView::of(info, is_current, None)
            })
            .collect(),
    ))
}

/// The current revision, with its normalized document: what a new ticket is pinned to.
#[utoipa::path(get, path = "/v1/revisions/current", tag = "revisions",
    responses((status = 200, body = RevisionView), (status = 401, body = Problem),
        (status = 503, description = "None published yet, or the store is down", body = Problem)))]
pub async fn current(State(state): State<ApiState>) -> Result<Json<RevisionView>, ApiError> {
    let info =
        state.store.current_revision().await?.ok_or_else(|| {
            ApiError::new(ApiCode::NoRevision, "no revision has been published yet")
        })?;
    let document = state.document(&info.hash).await?;
    Ok(Json(RevisionView::of(
        info,
        true,
        Some(document.as_ref().clone()),
    )))
}

/// One revision, with its normalized document.
#[utoipa::path(get, path = "/v1/revisions/{hash}", tag = "revisions",
    params(("hash" = String, Path, description = "The revision's sha256")),
    responses((status = 200, body = RevisionView), (status = 401, body = Problem),
        (status = 404, body = Problem), (status = 503, body = Problem)))]
pub async fn get(
    State(state): State<ApiState>,
    Path(hash): Path<String>,
) -> Result<Json<RevisionView>, ApiError> {
    let current = state.store.current_revision().await?.map(|r| r.hash);
    let info = state
        .store
        .revisions()
        .await?
        .into_iter()
        .find(|r| r.hash == hash)
        .ok_or_else(|| afe_store::StoreError::NotFound {
            what: format!("revision {hash}"),
        })?;
    let document = state.document(&hash).await?;
    Ok(Json(RevisionView::of(
        info,
        current.as_deref() == Some(hash.as_str()),
        Some(document.as_ref().clone()),
    )))
}
