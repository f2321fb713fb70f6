use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use httpdns_catalog::ResourceKind;
use httpdns_store::{Precondition, Resource, StoreError};
use serde::{Deserialize, Serialize};

use super::body;
use crate::admin::state::AdminState;
use crate::error::ApiError;

/// Runs an admin write and then the publish of what it stored, together on a task of their
/// own: the response waits for both, but a client that hangs up cancels neither, so a write
/// that reached the database is in answers when the task ends, not at the next timed sync.
async fn write_then_publish<T, W>(app: &AdminState, write: W) -> Result<Result<T, StoreError>, ApiError>
where
    T: Send + 'static,
    W: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let catalog = app.catalog.clone();
    let task = tokio::spawn(async move {
        let written = write.await?;
        if let Err(e) = catalog.sync().await {
            tracing::warn!(error = %e, "Write stored but the snapshot sync failed; the sync loop will retry.");
        }
        Ok(written)
    });
    task.await.map_err(|e| ApiError::internal(&format!("the write's task ended early: {e}")))
}

fn name_of<R: ResourceKind>(raw: &str) -> Result<String, ApiError> {
    R::canonical_name(raw).map_err(|e| ApiError::bad_request("InvalidName", R::info().name_field, e.message))
}

fn etag(revision: i64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{revision}\"")).expect("digits")
}

fn json_response(status: StatusCode, body: &impl Serialize, revision: Option<i64>) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = (status, bytes).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(r) = revision {
        resp.headers_mut().insert(header::ETAG, etag(r));
    }
    resp
}

pub(crate) async fn get_one<R: ResourceKind>(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let name = name_of::<R>(&raw)?;
    let found = app.catalog.store().get(R::KIND, &name).await.map_err(|e| ApiError::unavailable(&e))?;
    let Some(res) = found else {
        if R::implied(&app.catalog.snapshot()).contains(&name) {
            // Only pools are implied, and a pool's default options are an empty object.
            return Ok(json_response(StatusCode::OK, &serde_json::json!({}), None));
        }
        return Err(ApiError::not_found(format!("no {} {name:?}", R::KIND.as_str())));
    };
    let spec: serde_json::Value = serde_json::from_str(&res.body).map_err(|e| ApiError::internal(&e))?;
    Ok(json_response(StatusCode::OK, &R::shown(spec), Some(res.revision)))
}

/// The optional precondition of a write: `If-None-Match: *` (create only) or `If-Match: "N"`
/// (replace revision `N` only, the `ETag` a read gave), so two editors cannot overwrite each
/// other unseen. Without either, a `PUT` creates or replaces.
fn precondition(headers: &HeaderMap) -> Result<Precondition, ApiError> {
    let text =
        |name: header::HeaderName| headers.get(name).map(|v| v.to_str().unwrap_or("?").trim().to_owned());
    match (text(header::IF_NONE_MATCH), text(header::IF_MATCH)) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "InvalidArgument",
            "If-Match",
            "send If-Match or If-None-Match, not both",
        )),
        (Some(v), None) if v == "*" => Ok(Precondition::Absent),
        (Some(_), None) => {
            Err(ApiError::bad_request("InvalidArgument", "If-None-Match", "only * is supported"))
        }
        (None, Some(v)) => v.trim_matches('"').parse::<i64>().map(Precondition::Revision).map_err(|_| {
            ApiError::bad_request("InvalidArgument", "If-Match", "must be the ETag of a read: \"<revision>\"")
        }),
        (None, None) => Ok(Precondition::None),
    }
}

pub(crate) async fn put_one<R: ResourceKind>(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let name = name_of::<R>(&raw)?;
    let pre = precondition(&headers)?;
    let mut spec: R::Spec = body::parse(&bytes)?;
    if R::has_secrets() {
        let stored = app.catalog.store().get(R::KIND, &name).await.map_err(|e| ApiError::unavailable(&e))?;
        let old = stored.and_then(|r| serde_json::from_str::<R::Spec>(&r.body).ok());
        R::keep_secrets(&mut spec, old.as_ref()).map_err(ApiError::invalid)?;
    }
    R::validate(&spec, &app.validation).map_err(ApiError::invalid)?;
    // Store the canonical form (defaults filled in), so reads and the snapshot agree.
    let canonical = serde_json::to_string(&spec).map_err(|e| ApiError::internal(&e))?;
    let (store, stored_name) = (app.catalog.store().clone(), name.clone());
    let write = async move { store.put_if(R::KIND, &stored_name, &canonical, pre).await };
    let written = write_then_publish(&app, write).await?.map_err(|e| match e {
        StoreError::Precondition { current: Some(_) } if pre == Precondition::Absent => ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            "PreconditionFailed",
            format!("{name} already exists"),
        )
        .with_field("name"),
        StoreError::Precondition { current: Some(r) } => ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            "PreconditionFailed",
            format!("{name} was changed meanwhile (now revision {r}); read it again"),
        )
        .with_field("If-Match"),
        StoreError::Precondition { current: None } => ApiError::new(
            StatusCode::PRECONDITION_FAILED,
            "PreconditionFailed",
            format!("{name} does not exist (any more)"),
        )
        .with_field("If-Match"),
        e => ApiError::unavailable(&e),
    })?;
    tracing::info!(kind = R::KIND.as_str(), %name, revision = written.revision, created = written.created, "Admin write.");
    let status = if written.created { StatusCode::CREATED } else { StatusCode::OK };
    let shown = R::shown(serde_json::to_value(&spec).map_err(|e| ApiError::internal(&e))?);
    Ok(json_response(status, &shown, Some(written.revision)))
}

pub(crate) async fn delete_one<R: ResourceKind>(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let name = name_of::<R>(&raw)?;
    let (store, stored_name) = (app.catalog.store().clone(), name.clone());
    let write = async move { store.delete(R::KIND, &stored_name).await };
    let deleted = write_then_publish(&app, write).await?.map_err(|e| ApiError::unavailable(&e))?;
    let Some(revision) = deleted else {
        // An implied resource has only default options: removing them changes nothing.
        if R::implied(&app.catalog.snapshot()).contains(&name) {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        return Err(ApiError::not_found(format!("no {} {name:?}", R::KIND.as_str())));
    };
    tracing::info!(kind = R::KIND.as_str(), %name, revision, "Admin delete.");
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(header::ETAG, etag(revision));
    Ok(resp)
}

#[derive(Debug, Deserialize)]
pub(crate) struct ListParams {
    after: Option<String>,
    limit: Option<String>,
    /// Only resources whose name or body contains this text.
    q: Option<String>,
}

#[derive(Serialize)]
struct ListItem {
    name: String,
    revision: i64,
    updated_at_ms: i64,
    spec: serde_json::Value,
}

#[derive(Serialize)]
struct ListBody {
    items: Vec<ListItem>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// Default and largest page size.
const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;

pub(crate) async fn list<R: ResourceKind>(
    State(app): State<AdminState>,
    Query(params): Query<ListParams>,
) -> Result<Response, ApiError> {
    let limit = match params.limit.as_deref() {
        None | Some("") => DEFAULT_LIMIT,
        Some(s) => match s.parse::<i64>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_request(
                    "InvalidArgument",
                    "limit",
                    format!("must be 1 to {MAX_LIMIT}"),
                ))
            }
        },
    };
    let filter = params.q.as_deref().filter(|q| !q.is_empty());
    if filter.is_some_and(|q| q.len() > 256) {
        return Err(ApiError::bad_request("InvalidArgument", "q", "at most 256 bytes"));
    }
    let implied = R::implied(&app.catalog.snapshot());
    // A kind with secrets is searched in what reads show, never in the stored secret (the
    // filter would otherwise tell, one guess at a time, whether a secret contains a string).
    // One more than asked tells whether there is a next page.
    let mut rows: Vec<Resource> = if let (true, Some(q)) = (implied.is_empty() && !R::has_secrets(), filter) {
        app.catalog
            .store()
            .list_matching(R::KIND, params.after.as_deref(), limit + 1, q)
            .await
            .map_err(|e| ApiError::unavailable(&e))?
    } else if implied.is_empty() && filter.is_none() {
        app.catalog
            .store()
            .list(R::KIND, params.after.as_deref(), limit + 1)
            .await
            .map_err(|e| ApiError::unavailable(&e))?
    } else {
        // Implied resources (pools) are few: merge them with the stored ones in memory. Kinds
        // with secrets (mirror rules) are few too, and searched here as reads show them.
        let mut stored =
            app.catalog.store().list(R::KIND, None, i64::MAX).await.map_err(|e| ApiError::unavailable(&e))?;
        for name in implied {
            if !stored.iter().any(|r| r.name == name) {
                stored.push(Resource { kind: R::KIND, name, body: "{}".into(), revision: 0, updated_at: 0 });
            }
        }
        stored.sort_by(|a, b| a.name.cmp(&b.name));
        let after = params.after.as_deref().unwrap_or("");
        stored
            .into_iter()
            .filter(|r| r.name.as_str() > after)
            .filter(|r| {
                filter.is_none_or(|q| {
                    let shown = || match serde_json::from_str(&r.body) {
                        Ok(body) if R::has_secrets() => R::shown(body).to_string(),
                        _ => r.body.clone(),
                    };
                    r.name.contains(q) || shown().contains(q)
                })
            })
            .take(limit as usize + 1)
            .collect()
    };
    let next = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|r| r.name.clone())
    } else {
        None
    };
    let items = rows
        .into_iter()
        .map(|r| {
            let spec = R::shown(serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null));
            ListItem { name: r.name, revision: r.revision, updated_at_ms: r.updated_at, spec }
        })
        .collect();
    Ok(json_response(StatusCode::OK, &ListBody { items, next }, None))
}
