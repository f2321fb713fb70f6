//! Admin endpoints of the mirroring gateway: rules and image styles (through the generic
//! resource handlers), purge, direct writes and the per-prefix report.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use httpdns_mirror::PurgeError;
use serde::Deserialize;

use crate::admin::state::AdminState;
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PurgeBody {
    /// A request path on the mirror listener, e.g. `/image/a.jpg`.
    path: String,
    /// Remove everything under `path` rather than the one object.
    #[serde(default)]
    prefix: bool,
}

fn purge_error(e: PurgeError) -> ApiError {
    match e {
        PurgeError::BadPath(k) => ApiError::bad_request("InvalidArgument", "path", k.0),
        PurgeError::Store(e) => ApiError::object_store_unavailable(&e),
    }
}

/// `POST /admin/v1/mirror/purge` `{"path": "/image/a.jpg", "prefix": false}`.
pub(crate) async fn purge(State(app): State<AdminState>, bytes: Bytes) -> Result<Response, ApiError> {
    let body: PurgeBody = super::body::parse(&bytes)?;
    let path = if body.prefix { body.path.trim_end_matches('/') } else { body.path.as_str() };
    let purged = app.mirror.purge(path, body.prefix).await.map_err(purge_error)?;
    tracing::info!(path = %body.path, prefix = body.prefix, purged, "Mirror purge.");
    Ok(Json(serde_json::json!({ "path": body.path, "prefix": body.prefix, "purged": purged }))
        .into_response())
}

/// `PUT /admin/v1/mirror/objects/{*path}`: the body becomes the stored copy of the mirror
/// path `/{path}` (percent-encoded exactly as a client would request it).
pub(crate) async fn write(
    State(app): State<AdminState>,
    uri: Uri,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    // The raw (still percent-encoded) path, as the gateway sees its requests: `Path<String>`
    // would decode it once more than a GET of the same URL does.
    let path = uri.path().strip_prefix("/admin/v1/mirror/objects").unwrap_or("").to_owned();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    let meta = app.mirror.write(&path, &content_type, bytes).await.map_err(purge_error)?;
    tracing::info!(%path, bytes = meta.length, "Mirror object written by the admin API.");
    let body = serde_json::json!({ "path": format!("/{}", path.trim_start_matches('/')), "etag": meta.etag, "length": meta.length, "content_type": meta.content_type });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `GET /admin/v1/mirror/objects/{*path}`: whether the mirror path `/{path}` has a stored copy,
/// and its size, ETag, content type and age. `404` when it has none.
pub(crate) async fn lookup(State(app): State<AdminState>, uri: Uri) -> Result<Response, ApiError> {
    let path = uri.path().strip_prefix("/admin/v1/mirror/objects").unwrap_or("").to_owned();
    let shown = format!("/{}", path.trim_start_matches('/'));
    match app.mirror.lookup(&path).await.map_err(purge_error)? {
        None => Err(ApiError::not_found(format!("no stored copy of {shown}"))),
        Some(meta) => {
            let now = httpdns_core::clock::unix_ms();
            Ok(Json(serde_json::json!({
                "path": shown,
                "length": meta.length,
                "etag": meta.etag,
                "content_type": meta.content_type,
                "origin_etag": meta.origin_etag,
                "stored_at_ms": meta.stored_at_ms,
                "age_s": now.saturating_sub(meta.stored_at_ms) / 1000,
            }))
            .into_response())
        }
    }
}

/// `GET /admin/v1/mirror/report`: per rule (prefix) figures since start.
pub(crate) async fn report(State(app): State<AdminState>) -> Response {
    Json(serde_json::json!({ "store": app.mirror.objects.backend_name(), "rules": app.mirror.report() }))
        .into_response()
}
