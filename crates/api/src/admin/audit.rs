//! The audit log's HTTP side: every change through the admin API (and so the console and
//! `httpdns apply`, which call it) is recorded by the guard after it succeeded, and
//! `GET /admin/v1/audit` pages through the log. Automatic changes (the policy controller,
//! rollouts) append through `httpdns_store::Store::audit_append` themselves.
//!
//! The entry is written after the change committed, not in its transaction: one place sees
//! every route, including routes added later, instead of each handler remembering to. If that
//! write fails the change stands, the failure is logged at error level and counted in
//! `audit_write_errors_total`, and the response carries `X-Audit: failed`.

use axum::extract::{Query, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use httpdns_store::teams::{AuditEntry, AuditRecord};
use serde::Deserialize;

use super::access::Principal;
use crate::admin::state::AdminState;
use crate::error::ApiError;

/// What a handler may add to its response so the audit entry says more than the store
/// revisions around the request: a config module's versions before and after a publish, or
/// that a request changed nothing (a dry run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditNote {
    /// Versions (or revisions) before and after, in place of the store's.
    Revisions { before: Option<i64>, after: Option<i64> },
    /// Nothing was changed: no entry.
    Unchanged,
}

/// Runs a change and records it when it succeeded.
pub(crate) async fn record(app: &AdminState, who: &Principal, req: Request, next: Next) -> Response {
    let store = app.config.store().clone();
    let before = store.revision().await.ok();
    let method = req.method().to_string();
    let path = match req.uri().query() {
        Some(q) => format!("{}?{q}", req.uri().path()),
        None => req.uri().path().to_owned(),
    };
    let agent = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.chars().take(128).collect::<String>());
    let mut resp = next.run(req).await;
    if !resp.status().is_success() {
        return resp;
    }
    let (revision_before, revision_after) = match resp.extensions().get::<AuditNote>() {
        Some(AuditNote::Unchanged) => return resp,
        Some(AuditNote::Revisions { before, after }) => (*before, *after),
        None => (before, store.revision().await.ok()),
    };
    let detail = if who.console { "console".to_owned() } else { agent.unwrap_or_default() };
    let entry = AuditEntry {
        actor: who.name.clone(),
        method,
        path,
        revision_before,
        revision_after,
        status: resp.status().as_u16(),
        detail,
    };
    if let Err(e) = store.audit_append(&entry).await {
        app.metrics.audit_write_errors.inc();
        tracing::error!(error = %e, actor = %entry.actor, path = %entry.path, "A change was made but its audit entry could not be written.");
        resp.headers_mut().insert("x-audit", HeaderValue::from_static("failed"));
    }
    resp
}

#[derive(Deserialize)]
pub(crate) struct AuditParams {
    after: Option<String>,
    before: Option<String>,
    limit: Option<String>,
}

fn cursor(raw: Option<&str>, field: &'static str) -> Result<Option<i64>, ApiError> {
    match raw {
        None | Some("") => Ok(None),
        Some(s) => s.parse::<i64>().ok().filter(|n| *n >= 0).map(Some).ok_or_else(|| {
            ApiError::bad_request("InvalidArgument", field, "must be an entry's seq (an integer >= 0)")
        }),
    }
}

fn item(r: &AuditRecord) -> serde_json::Value {
    serde_json::json!({
        "seq": r.seq,
        "at_ms": r.at,
        "actor": r.entry.actor,
        "method": r.entry.method,
        "path": r.entry.path,
        "revision_before": r.entry.revision_before,
        "revision_after": r.entry.revision_after,
        "status": r.entry.status,
        "detail": r.entry.detail,
    })
}

/// `GET /admin/v1/audit?after=&limit=`: entries after `after`, oldest first, with
/// `next_after` while there are more; or `?before=` (and with neither) the newest first, with
/// `next_before`.
pub(crate) async fn list(
    State(app): State<AdminState>,
    Query(q): Query<AuditParams>,
) -> Result<Response, ApiError> {
    let limit = match q.limit.as_deref() {
        None | Some("") => 100,
        Some(s) => s
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| ApiError::bad_request("InvalidArgument", "limit", "must be 1 to 1000"))?,
    };
    let after = cursor(q.after.as_deref(), "after")?;
    let before = cursor(q.before.as_deref(), "before")?;
    let store = app.config.store();
    let body = match (after, before) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("InvalidArgument", "before", "give after or before, not both"))
        }
        (Some(after), None) => {
            let rows = store.audit_after(after, limit + 1).await.map_err(|e| ApiError::unavailable(&e))?;
            let more = rows.len() as i64 > limit;
            let items: Vec<_> = rows.iter().take(limit as usize).map(item).collect();
            let next = if more { rows.get(limit as usize - 1).map(|r| r.seq) } else { None };
            serde_json::json!({"items": items, "next_after": next})
        }
        (None, before) => {
            let rows = store
                .audit_before(before.unwrap_or(i64::MAX), limit + 1)
                .await
                .map_err(|e| ApiError::unavailable(&e))?;
            let more = rows.len() as i64 > limit;
            let items: Vec<_> = rows.iter().take(limit as usize).map(item).collect();
            let next = if more { rows.get(limit as usize - 1).map(|r| r.seq) } else { None };
            serde_json::json!({"items": items, "next_before": next})
        }
    };
    Ok(axum::Json(body).into_response())
}
