//! The guarded rollouts' admin routes (`/admin/v1/config/{module}/rollout`,
//! docs/config-center.md): arm, read, pause, resume, promote, abort. What a rollout is, its
//! sides, its rollback and its tick are `httpdns_center::rollout`'s.

use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use httpdns_center::rollout::{self as center, RolloutError, DONE, PAUSED, ROLLED_BACK, RUNNING};
use httpdns_config::guard::{RolloutSpec, Side, Sides};
use httpdns_store::rollouts::RolloutRow;

use crate::admin::access::Principal;
use crate::admin::body::parse as parse_body;
use crate::admin::state::AdminState;
use crate::error::ApiError;

fn module_of(raw: &str) -> Result<String, ApiError> {
    httpdns_config::validate_module(raw)
        .map_err(|e| ApiError::bad_request("InvalidName", "module", e.message))?;
    Ok(raw.to_owned())
}

/// A rollout failure as this layer's error: the store's is a 503, the rest are internal.
fn failed(e: RolloutError) -> ApiError {
    match e {
        RolloutError::Store(e) => ApiError::unavailable(&e),
        e => ApiError::internal(&e),
    }
}

fn spec_of(row: &RolloutRow) -> Result<RolloutSpec, ApiError> {
    center::spec_of(row).map_err(failed)
}

async fn newest(app: &AdminState, row: &RolloutRow) -> Result<Option<(i64, i64)>, ApiError> {
    center::newest(&app.config, row).await.map_err(failed)
}

async fn refresh(app: &AdminState) {
    center::refresh(&app.config).await;
}

fn side_json(s: &Side) -> serde_json::Value {
    serde_json::json!({
        "requests": s.requests, "errors": s.errors, "fallbacks": s.fallbacks,
        "error_rate": s.error_rate(), "fallback_rate": s.fallback_rate(),
    })
}

async fn view(app: &AdminState, row: &RolloutRow) -> Result<serde_json::Value, ApiError> {
    let spec = spec_of(row)?;
    let newest = newest(app, row).await?;
    let mut all = Sides::default();
    let mut by_place = Vec::new();
    if let Some((version, at)) = newest {
        for (place, s) in
            center::places(&app.config, row, version, row.step_started.max(at)).await.map_err(failed)?
        {
            all.new.add(&s.new);
            all.old.add(&s.old);
            by_place.push(
                serde_json::json!({"place": place, "new": side_json(&s.new), "old": side_json(&s.old)}),
            );
        }
    }
    Ok(serde_json::json!({
        "module": row.module,
        "state": row.state,
        "step": row.step,
        "share": row.share,
        "previous": row.previous,
        "version": newest.map(|(v, _)| v),
        "waiting_for_publish": newest.is_none() && row.state == RUNNING,
        "step_started_ms": row.step_started,
        "reason": row.reason,
        "spec": spec,
        "new": side_json(&all.new),
        "old": side_json(&all.old),
        "places": by_place,
    }))
}

pub(crate) async fn put(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let spec: RolloutSpec = parse_body(&body)?;
    spec.validate().map_err(ApiError::invalid)?;
    let store = app.config.store();
    let cur = store.config_current(&module).await.map_err(|e| ApiError::unavailable(&e))?;
    let cur =
        cur.ok_or_else(|| ApiError::not_found(format!("no config module {module:?}: publish it first")))?;
    let existed = store.rollout_get(&module).await.map_err(|e| ApiError::unavailable(&e))?.is_some();
    let row = RolloutRow {
        module: module.clone(),
        previous: cur.version,
        spec: serde_json::to_string(&spec).map_err(|e| ApiError::internal(&e))?,
        state: RUNNING.into(),
        step: 0,
        share: spec.steps[0],
        step_started: httpdns_core::clock::unix_ms() as i64,
        reason: format!("armed: the next publish goes to {} of the devices first", spec.steps[0]),
        updated_at: 0,
        version: None,
    };
    let updated_at = store.rollout_put(&row).await.map_err(|e| ApiError::unavailable(&e))?;
    refresh(&app).await;
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    let row = RolloutRow { updated_at, ..row };
    Ok((status, axum::Json(view(&app, &row).await?)).into_response())
}

pub(crate) async fn get(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let row = app.config.store().rollout_get(&module).await.map_err(|e| ApiError::unavailable(&e))?;
    let row = row.ok_or_else(|| ApiError::not_found(format!("no rollout of {module:?}")))?;
    Ok(axum::Json(view(&app, &row).await?).into_response())
}

/// An operator's action: from one of `from`, to the row `change` makes.
async fn act(
    app: &AdminState,
    raw: &str,
    from: &[&str],
    change: impl FnOnce(&mut RolloutRow, &RolloutSpec),
) -> Result<RolloutRow, ApiError> {
    let module = module_of(raw)?;
    let store = app.config.store();
    let row = store.rollout_get(&module).await.map_err(|e| ApiError::unavailable(&e))?;
    let mut row = row.ok_or_else(|| ApiError::not_found(format!("no rollout of {module:?}")))?;
    if !from.contains(&row.state.as_str()) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!("the rollout is {}; this needs it {}", row.state, from.join(" or ")),
        )
        .with_field("state"));
    }
    let spec = spec_of(&row)?;
    row.version = newest(app, &row).await?.map(|(v, _)| v);
    change(&mut row, &spec);
    if !store.rollout_update(&row).await.map_err(|e| ApiError::unavailable(&e))? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "Conflict",
            "the rollout changed meanwhile; read it and retry",
        )
        .with_field("state"));
    }
    Ok(row)
}

async fn answer(app: &AdminState, raw: &str) -> Result<Response, ApiError> {
    refresh(app).await;
    let row = app.config.store().rollout_get(raw).await.map_err(|e| ApiError::unavailable(&e))?;
    let row = row.ok_or_else(|| ApiError::not_found("the rollout is gone"))?;
    Ok(axum::Json(view(app, &row).await?).into_response())
}

pub(crate) async fn pause(
    State(app): State<AdminState>,
    Extension(who): Extension<Principal>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    act(&app, &raw, &[RUNNING], |r, _| {
        r.state = PAUSED.into();
        r.reason = format!("paused by {}", who.name);
    })
    .await?;
    answer(&app, &raw).await
}

pub(crate) async fn resume(
    State(app): State<AdminState>,
    Extension(who): Extension<Principal>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    act(&app, &raw, &[PAUSED], |r, _| {
        r.state = RUNNING.into();
        r.step_started = httpdns_core::clock::unix_ms() as i64;
        r.reason = format!("resumed by {}", who.name);
    })
    .await?;
    answer(&app, &raw).await
}

pub(crate) async fn promote(
    State(app): State<AdminState>,
    Extension(who): Extension<Principal>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    act(&app, &raw, &[RUNNING, PAUSED], |r, spec| {
        r.state = DONE.into();
        r.step = spec.steps.len() as i64 - 1;
        r.share = 1.0;
        r.reason = format!("promoted by {}", who.name);
    })
    .await?;
    answer(&app, &raw).await
}

pub(crate) async fn abort(
    State(app): State<AdminState>,
    Extension(who): Extension<Principal>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let row = act(&app, &raw, &[RUNNING, PAUSED], |r, _| {
        r.state = ROLLED_BACK.into();
        r.reason = format!("aborted by {}", who.name);
    })
    .await?;
    center::roll_back(&app.config, &row, &who.name).await.map_err(failed)?;
    answer(&app, &raw).await
}
