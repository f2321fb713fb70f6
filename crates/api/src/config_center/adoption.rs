//! `GET /admin/v1/config/{module}/adoption?window=1h`: devices seen per config version, from
//! `httpdns_center::adoption`'s sketches of every replica.

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use httpdns_center::adoption::RETENTION;
use httpdns_config::sketch::STANDARD_ERROR;

use crate::admin::state::AdminState;
use crate::error::ApiError;

/// `GET /admin/v1/config/{module}/adoption?window=1h`.
pub(crate) async fn handle(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    httpdns_config::validate_module(&raw)
        .map_err(|e| ApiError::bad_request("InvalidName", "module", e.message))?;
    let pairs = crate::query::pairs(query.as_deref());
    let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let (window, minutes) = crate::query::window(get("window"), "1h", RETENTION)?;
    let counts = app
        .config
        .adoption()
        .counts(app.config.store(), &raw, minutes)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    let versions: Vec<_> =
        counts.versions.iter().map(|(v, n)| serde_json::json!({"version": v, "devices": n})).collect();
    let current = app.config.get(&raw).map(|p| p.version);
    Ok(axum::Json(serde_json::json!({
        "module": raw,
        "window": window,
        "current_version": current,
        "versions": versions,
        "devices": counts.devices,
        "standard_error": STANDARD_ERROR,
    }))
    .into_response())
}
