//! `POST /admin/v1/mirror/prefetch` and `GET /admin/v1/mirror/prefetch/{id}`: fill copies ahead
//! of traffic and watch the progress (the job itself: `httpdns_mirror::prefetch`).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use httpdns_mirror::prefetch::PrefetchError;
use serde::Deserialize;

use crate::admin::state::AdminState;
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PrefetchBody {
    /// Mirror request paths, e.g. `/image/a.jpg`.
    paths: Vec<String>,
}

pub(crate) async fn start(State(app): State<AdminState>, bytes: Bytes) -> Result<Response, ApiError> {
    let body: PrefetchBody = super::body::parse(&bytes)?;
    let id = app.mirror.start_prefetch(body.paths).map_err(|e| match e {
        PrefetchError::Invalid(f) => ApiError::invalid(f),
        PrefetchError::Io(e) => ApiError::internal(&e),
    })?;
    let progress = app.mirror.prefetch_progress(&id);
    Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "id": id, "progress": progress }))).into_response())
}

pub(crate) async fn progress(
    State(app): State<AdminState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match app.mirror.prefetch_progress(&id) {
        Some(p) => Ok(Json(p).into_response()),
        None => Err(ApiError::not_found(format!("no prefetch job {id:.64?}"))),
    }
}
