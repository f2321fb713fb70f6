//! Operators' config API: `/admin/v1/config/...`.
//!
//! Publishing uses optimistic concurrency: `If-Match: "<current version>"` (or `*` to force);
//! `412` when it is not the current version, `428` when a replace has no `If-Match`.
//! `?dry_run=1` validates (and checks the precondition) without writing. Author and summary
//! come from the `X-Config-Author` and `X-Config-Summary` headers; without a summary, one is
//! computed from the difference to the current version.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use httpdns_config::summary::summarize;
use httpdns_config::ConfigDocument;
use httpdns_store::config::{Expect, Publish, PublishError};
use serde::{Deserialize, Serialize};

use crate::admin::audit::AuditNote;
use crate::admin::body::parse as parse_body;
use crate::admin::state::AdminState;
use crate::error::ApiError;
use httpdns_center::cache::etag;
use httpdns_center::publish::publish;

const MAX_HEADER_TEXT: usize = 512;

fn module_of(raw: &str) -> Result<String, ApiError> {
    httpdns_config::validate_module(raw)
        .map_err(|e| ApiError::bad_request("InvalidName", "module", e.message))?;
    Ok(raw.to_owned())
}

/// Reads `If-Match` (every header line): absent, `*`, or a list of entity tags, of which the
/// strong `"N"` name versions (bare digits are accepted too, as clients often send them).
/// Weak tags (`W/"N"`) never match (If-Match compares strongly) and tags that name no version
/// match nothing: the publish is then refused with the module's current version named.
fn expect_of(headers: &HeaderMap) -> Result<Expect, ApiError> {
    let mut lines = headers.get_all(header::IF_MATCH).iter().peekable();
    if lines.peek().is_none() {
        return Ok(Expect::Nothing);
    }
    let mut versions = Vec::new();
    for line in lines {
        for tag in line.to_str().unwrap_or("").split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if tag == "*" {
                return Ok(Expect::Any);
            }
            let bare = tag.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(tag);
            if !bare.is_empty() && bare.len() <= 18 && bare.bytes().all(|b| b.is_ascii_digit()) {
                versions.extend(bare.parse::<i64>().ok());
            }
        }
    }
    Ok(match versions.as_slice() {
        [one] => Expect::Version(*one),
        _ => Expect::OneOf(versions),
    })
}

fn precondition_failed(current: Option<i64>) -> ApiError {
    let msg = match current {
        Some(c) => format!("If-Match does not name the current version; it is \"{c}\""),
        None => "If-Match does not match: the module does not exist".to_owned(),
    };
    ApiError::new(StatusCode::PRECONDITION_FAILED, "PreconditionFailed", msg).with_field("If-Match")
}

fn header_text(headers: &HeaderMap, name: &str, field: &str) -> Result<Option<String>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => match v.to_str() {
            Ok(s) if !s.trim().is_empty() && s.len() <= MAX_HEADER_TEXT => Ok(Some(s.trim().to_owned())),
            _ => Err(ApiError::bad_request(
                "InvalidArgument",
                field,
                format!("{name} must be 1 to {MAX_HEADER_TEXT} visible ASCII characters"),
            )),
        },
    }
}

fn doc_response(status: StatusCode, doc: &ConfigDocument, version: i64) -> Response {
    let mut resp = (status, doc.render_admin(version as u64)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::ETAG, etag(version));
    resp
}

fn parse_stored(json: &str) -> Result<ConfigDocument, ApiError> {
    serde_json::from_str(json).map_err(|e| ApiError::internal(&e))
}

#[derive(Serialize)]
struct ModuleItem {
    module: String,
    version: i64,
    updated_at_ms: i64,
}

pub(crate) async fn list(State(app): State<AdminState>) -> Result<Response, ApiError> {
    let modules = app.config.store().config_modules().await.map_err(|e| ApiError::unavailable(&e))?;
    let items: Vec<ModuleItem> = modules
        .into_iter()
        .map(|(module, version, updated_at_ms)| ModuleItem { module, version, updated_at_ms })
        .collect();
    Ok(axum::Json(serde_json::json!({ "items": items })).into_response())
}

pub(crate) async fn current(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let row = app.config.store().config_current(&module).await.map_err(|e| ApiError::unavailable(&e))?;
    let row = row.ok_or_else(|| ApiError::not_found(format!("no config module {module:?}")))?;
    Ok(doc_response(StatusCode::OK, &parse_stored(&row.document)?, row.version))
}

#[derive(Deserialize)]
pub(crate) struct PutParams {
    dry_run: Option<String>,
}

pub(crate) async fn put(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
    Query(q): Query<PutParams>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let expect = expect_of(&headers)?;
    let author =
        header_text(&headers, "x-config-author", "X-Config-Author")?.unwrap_or_else(|| "admin".into());
    let given_summary = header_text(&headers, "x-config-summary", "X-Config-Summary")?;
    let doc: ConfigDocument = parse_body(&body)?;
    doc.validate().map_err(ApiError::invalid)?;
    let content = doc.content();
    let stored = serde_json::to_string(&content).map_err(|e| ApiError::internal(&e))?;

    if matches!(q.dry_run.as_deref(), Some("1" | "true")) {
        let cur = app.config.store().config_current(&module).await.map_err(|e| ApiError::unavailable(&e))?;
        expect.check(cur.as_ref().map(|c| c.version)).map_err(publish_error)?;
        let prev = cur.map(|c| parse_stored(&c.document)).transpose()?;
        let summary = given_summary.unwrap_or_else(|| summarize(prev.as_ref(), &content));
        let mut resp = axum::Json(serde_json::json!({
            "valid": true,
            "summary": summary,
            "document": serde_json::from_slice::<serde_json::Value>(&content.render_admin(0)).unwrap_or_default(),
        }))
        .into_response();
        resp.extensions_mut().insert(AuditNote::Unchanged);
        return Ok(resp);
    }

    let publish_to =
        Publish { module: &module, document: &stored, expect, author: &author, rollback_of: None };
    let written = publish(&app.config, publish_to, |prev| {
        given_summary.unwrap_or_else(|| {
            let prev: Option<ConfigDocument> = prev.and_then(|p| serde_json::from_str(p).ok());
            summarize(prev.as_ref(), &content)
        })
    })
    .await
    .map_err(publish_error)?;
    let status = if written.version == 1 { StatusCode::CREATED } else { StatusCode::OK };
    Ok(audited(doc_response(status, &content, written.version), written.version))
}

fn precondition_required(current: i64) -> ApiError {
    ApiError::new(
        StatusCode::PRECONDITION_REQUIRED,
        "PreconditionRequired",
        format!("replacing a module requires If-Match: \"{current}\" (its current version) or If-Match: *"),
    )
    .with_field("If-Match")
}

fn publish_error(e: PublishError) -> ApiError {
    match e {
        PublishError::Precondition { current } => precondition_failed(current),
        PublishError::PreconditionRequired { current } => precondition_required(current),
        PublishError::Store(e) => ApiError::unavailable(&e),
    }
}

#[derive(Deserialize)]
pub(crate) struct HistoryParams {
    before: Option<String>,
    limit: Option<String>,
}

#[derive(Serialize)]
struct HistoryItem {
    version: i64,
    author: String,
    summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollback_of: Option<i64>,
    created_at_ms: i64,
}

pub(crate) async fn history(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
    Query(q): Query<HistoryParams>,
) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let limit = match q.limit.as_deref() {
        None | Some("") => 50,
        Some(s) => s
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| ApiError::bad_request("InvalidArgument", "limit", "must be 1 to 1000"))?,
    };
    let before =
        match q.before.as_deref() {
            None | Some("") => None,
            Some(s) => Some(s.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                ApiError::bad_request("InvalidArgument", "before", "must be a version number")
            })?),
        };
    let store = app.config.store();
    if store.config_current(&module).await.map_err(|e| ApiError::unavailable(&e))?.is_none() {
        return Err(ApiError::not_found(format!("no config module {module:?}")));
    }
    let rows =
        store.config_history(&module, before, limit + 1).await.map_err(|e| ApiError::unavailable(&e))?;
    let more = rows.len() as i64 > limit;
    let items: Vec<HistoryItem> = rows
        .into_iter()
        .take(limit as usize)
        .map(|v| HistoryItem {
            version: v.version,
            author: v.author,
            summary: v.summary,
            rollback_of: v.rollback_of,
            created_at_ms: v.created_at,
        })
        .collect();
    let next = if more { items.last().map(|i| i.version) } else { None };
    Ok(axum::Json(serde_json::json!({ "items": items, "next_before": next })).into_response())
}

pub(crate) async fn version(
    State(app): State<AdminState>,
    Path((raw, n)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let n: i64 = n
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| ApiError::bad_request("InvalidArgument", "version", "must be a version number"))?;
    let row = app.config.store().config_version(&module, n).await.map_err(|e| ApiError::unavailable(&e))?;
    let row = row.ok_or_else(|| ApiError::not_found(format!("no version {n} of {module:?}")))?;
    Ok(doc_response(StatusCode::OK, &parse_stored(&row.document)?, row.version))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RollbackBody {
    to: i64,
}

/// Publishes version `to`'s content as a new, higher version: clients keep the larger
/// `configVersion`, so going back must go up.
pub(crate) async fn rollback(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let req: RollbackBody = parse_body(&body)?;
    let expect = match expect_of(&headers)? {
        Expect::Nothing => Expect::Any,
        e => e,
    };
    let author =
        header_text(&headers, "x-config-author", "X-Config-Author")?.unwrap_or_else(|| "admin".into());
    let store = app.config.store();
    let target = store.config_version(&module, req.to).await.map_err(|e| ApiError::unavailable(&e))?;
    let target = target.ok_or_else(|| {
        ApiError::bad_request(
            "InvalidArgument",
            "to",
            format!("version {} of {module:?} does not exist", req.to),
        )
    })?;
    let content = parse_stored(&target.document)?;
    let publish_to = Publish {
        module: &module,
        document: &target.document,
        expect,
        author: &author,
        rollback_of: Some(req.to),
    };
    let to = req.to;
    let written = publish(&app.config, publish_to, |prev| {
        let prev: Option<ConfigDocument> = prev.and_then(|p| serde_json::from_str(p).ok());
        format!("rollback to version {to}: {}", summarize(prev.as_ref(), &content))
    })
    .await
    .map_err(publish_error)?;
    Ok(audited(doc_response(StatusCode::OK, &content, written.version), written.version))
}

/// A publish's audit entry names the module's versions (the one replaced is the one before).
fn audited(mut resp: Response, version: i64) -> Response {
    let before = (version > 1).then_some(version - 1);
    resp.extensions_mut().insert(AuditNote::Revisions { before, after: Some(version) });
    resp
}
