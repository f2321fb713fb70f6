//! `/admin/v1/tokens/{name}`: named admin tokens with a role (admins only change them).
//!
//! `PUT` makes (or replaces) a token and answers its secret once, as `{"token": "..."}`; only
//! its SHA-256 is stored ([`access::token_hash`]). `GET /admin/v1/tokens` lists names, roles
//! and who made them, never secrets; `DELETE` revokes at once on every replica (the guard reads
//! the table on each request, and a console session checks its token is still the same).

use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::access::{self, Principal, Role};
use super::body::parse as parse_body;
use crate::admin::state::AdminState;
use crate::error::ApiError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    role: String,
}

fn name_of(raw: &str) -> Result<String, ApiError> {
    let valid = !raw.is_empty()
        && raw.len() <= 64
        && raw.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !valid {
        return Err(ApiError::bad_request(
            "InvalidName",
            "name",
            "a token name is 1 to 64 of a-z, 0-9, '-' and '_'",
        ));
    }
    if access::RESERVED.contains(&raw) {
        return Err(ApiError::bad_request(
            "InvalidName",
            "name",
            format!("{raw:?} is reserved for the audit log's automatic and bootstrap actors"),
        ));
    }
    Ok(raw.to_owned())
}

pub(crate) async fn put(
    State(app): State<AdminState>,
    Extension(who): Extension<Principal>,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let name = name_of(&raw)?;
    let req: TokenBody = parse_body(&body)?;
    let role = Role::parse(&req.role).ok_or_else(|| {
        ApiError::bad_request("InvalidArgument", "role", "must be \"viewer\", \"operator\" or \"admin\"")
    })?;
    let secret = access::new_secret()?;
    let existed = app
        .config
        .store()
        .token_put(&name, role.as_str(), &access::token_hash(&secret), &who.name)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    tracing::info!(%name, role = role.as_str(), by = %who.name, "Admin token made.");
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    let body = serde_json::json!({"name": name, "role": role.as_str(), "token": secret});
    Ok((status, axum::Json(body)).into_response())
}

pub(crate) async fn list(State(app): State<AdminState>) -> Result<Response, ApiError> {
    let rows = app.config.store().token_list().await.map_err(|e| ApiError::unavailable(&e))?;
    let items: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({"name": r.name, "role": r.role, "created_by": r.created_by, "created_at_ms": r.created_at})
        })
        .collect();
    Ok(axum::Json(serde_json::json!({ "items": items })).into_response())
}

pub(crate) async fn get_one(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let name = name_of(&raw)?;
    let row = app.config.store().token_by_name(&name).await.map_err(|e| ApiError::unavailable(&e))?;
    let r = row.ok_or_else(|| ApiError::not_found(format!("no token {name:?}")))?;
    let body = serde_json::json!({"name": r.name, "role": r.role, "created_by": r.created_by, "created_at_ms": r.created_at});
    Ok(axum::Json(body).into_response())
}

pub(crate) async fn delete(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let name = name_of(&raw)?;
    if !app.config.store().token_delete(&name).await.map_err(|e| ApiError::unavailable(&e))? {
        return Err(ApiError::not_found(format!("no token {name:?}")));
    }
    tracing::info!(%name, "Admin token revoked.");
    Ok(StatusCode::NO_CONTENT.into_response())
}
