//! `/admin/v1/vendor-switches`: the vendors' switches `/ss` and `/conf` carry
//! (`crate::vendor_switches`), read and replaced.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;

use super::state::AdminState;
use crate::error::ApiError;
use crate::vendor_switches::{parse, VendorSwitches};

/// `GET /admin/v1/vendor-switches`: the setting as stored.
pub(crate) async fn get(State(app): State<AdminState>) -> Result<Json<VendorSwitches>, ApiError> {
    let rows = app.catalog.store().vendor_switches().await.map_err(|e| ApiError::unavailable(&e))?;
    Ok(Json(VendorSwitches::from_rows(rows)))
}

/// `PUT /admin/v1/vendor-switches`: replaces the whole setting (strict JSON; every account
/// named must exist). This replica answers with it when the call returns, the others within
/// one heartbeat.
pub(crate) async fn put(
    State(app): State<AdminState>,
    body: Bytes,
) -> Result<Json<VendorSwitches>, ApiError> {
    let doc = parse(&body)?;
    let snapshot = app.catalog.snapshot();
    if let Some(id) = doc.accounts.keys().find(|id| snapshot.account(**id).is_none()) {
        return Err(ApiError::bad_request(
            "InvalidArgument",
            format!("accounts.{id}"),
            format!("there is no account {id}"),
        ));
    }
    app.catalog.store().put_vendor_switches(&doc.to_rows()).await.map_err(|e| ApiError::unavailable(&e))?;
    app.service_ips.switches().set(doc.clone());
    tracing::info!(switches = %serde_json::to_string(&doc).unwrap_or_default(), "Vendor switches set.");
    Ok(Json(doc))
}
