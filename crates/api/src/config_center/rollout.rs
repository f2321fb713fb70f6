//! Guarded rollouts (`/admin/v1/config/{module}/rollout`, docs/config-center.md).
//!
//! `PUT` arms a rollout of the module's *next* publish: the version current then is
//! `previous`, which every device outside the share keeps (a device that had the new version
//! would keep it, since clients keep the larger version, so the new version must not reach
//! anyone before the rollout exists). Once a newer version is published, the config cache gives
//! it to the devices whose bucket (`rollout.<module>.<version>` + device id) is inside the
//! current step's share. Every [`run`] tick, each replica flushes its per-version event counts
//! and, for every running rollout, `httpdns_config::guard::decide` judges both sides' rates per
//! carrier and region since the step began: hold, advance, done, or roll back (publish the
//! previous content as a new version, author `rollout`, with the reason). A tick's change is
//! conditional on the row it read, so of replicas ticking together one decides; automatic
//! changes are written to the audit log as actor `rollout`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use httpdns_config::guard::{decide, Decision, RolloutSpec, Side, Sides};
use httpdns_store::config::{Expect, Publish};
use httpdns_store::rollouts::RolloutRow;
use httpdns_store::teams::AuditEntry;
use tokio_util::sync::CancellationToken;

use crate::admin::access::Principal;
use crate::admin::parse_body;
use crate::error::ApiError;
use crate::state::AppState;

const RUNNING: &str = "running";
const PAUSED: &str = "paused";
const ROLLED_BACK: &str = "rolled_back";
const DONE: &str = "done";

fn module_of(raw: &str) -> Result<String, ApiError> {
    httpdns_config::validate_module(raw)
        .map_err(|e| ApiError::bad_request("InvalidName", "module", e.message))?;
    Ok(raw.to_owned())
}

fn unavailable(e: httpdns_store::StoreError) -> ApiError {
    ApiError::unavailable(&e)
}

fn spec_of(row: &RolloutRow) -> Result<RolloutSpec, ApiError> {
    serde_json::from_str(&row.spec).map_err(|e| ApiError::internal(&e))
}

/// The version rolled out and when it was published, if newer than `previous`: while the
/// rollout decides, the module's newest (what the cache gives the share); once finished, the
/// one its last decision named (a rollback published a newer one since).
async fn newest(app: &AppState, row: &RolloutRow) -> Result<Option<(i64, i64)>, ApiError> {
    let store = app.config.store();
    let deciding = row.state == RUNNING || row.state == PAUSED;
    let v = match row.version.filter(|_| !deciding) {
        Some(v) => store.config_version(&row.module, v).await.map_err(unavailable)?,
        None => store.config_current(&row.module).await.map_err(unavailable)?,
    };
    Ok(v.filter(|c| c.version > row.previous).map(|c| (c.version, c.created_at)))
}

/// Both sides' counts per place (`isp/region`) since the step began (or the newest version
/// appeared, if later).
async fn places(
    app: &AppState,
    row: &RolloutRow,
    version: i64,
    since_ms: i64,
) -> Result<BTreeMap<String, Sides>, ApiError> {
    let store = app.config.store();
    if let Err(e) = app.config.sides().flush(store).await {
        tracing::warn!(error = %e, "Rollout judged without this replica's latest event counts.");
    }
    let rows = store.version_minutes(version, row.previous, since_ms / 60_000).await.map_err(unavailable)?;
    let mut out: BTreeMap<String, Sides> = BTreeMap::new();
    for r in rows {
        let sides = out.entry(format!("{}/{}", r.isp, r.region)).or_default();
        let side = Side { requests: r.requests, errors: r.errors, fallbacks: r.fallbacks };
        if r.version == version {
            sides.new.add(&side);
        } else {
            sides.old.add(&side);
        }
    }
    Ok(out)
}

fn side_json(s: &Side) -> serde_json::Value {
    serde_json::json!({
        "requests": s.requests, "errors": s.errors, "fallbacks": s.fallbacks,
        "error_rate": s.error_rate(), "fallback_rate": s.fallback_rate(),
    })
}

async fn view(app: &AppState, row: &RolloutRow) -> Result<serde_json::Value, ApiError> {
    let spec = spec_of(row)?;
    let newest = newest(app, row).await?;
    let mut all = Sides::default();
    let mut by_place = Vec::new();
    if let Some((version, at)) = newest {
        for (place, s) in places(app, row, version, row.step_started.max(at)).await? {
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
    State(app): State<AppState>,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let spec: RolloutSpec = parse_body(&body)?;
    spec.validate().map_err(ApiError::invalid)?;
    let store = app.config.store();
    let cur = store.config_current(&module).await.map_err(unavailable)?;
    let cur =
        cur.ok_or_else(|| ApiError::not_found(format!("no config module {module:?}: publish it first")))?;
    let existed = store.rollout_get(&module).await.map_err(unavailable)?.is_some();
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
    let updated_at = store.rollout_put(&row).await.map_err(unavailable)?;
    refresh(&app).await;
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    let row = RolloutRow { updated_at, ..row };
    Ok((status, axum::Json(view(&app, &row).await?)).into_response())
}

pub(crate) async fn get(State(app): State<AppState>, Path(raw): Path<String>) -> Result<Response, ApiError> {
    let module = module_of(&raw)?;
    let row = app.config.store().rollout_get(&module).await.map_err(unavailable)?;
    let row = row.ok_or_else(|| ApiError::not_found(format!("no rollout of {module:?}")))?;
    Ok(axum::Json(view(&app, &row).await?).into_response())
}

async fn refresh(app: &AppState) {
    if let Err(e) = app.config.refresh().await {
        tracing::warn!(error = %e, "Rollout changed but the local refresh failed; the refresh loop will retry.");
    }
}

/// An operator's action: from one of `from`, to the row `change` makes.
async fn act(
    app: &AppState,
    raw: &str,
    from: &[&str],
    change: impl FnOnce(&mut RolloutRow, &RolloutSpec),
) -> Result<RolloutRow, ApiError> {
    let module = module_of(raw)?;
    let store = app.config.store();
    let row = store.rollout_get(&module).await.map_err(unavailable)?;
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
    if !store.rollout_update(&row).await.map_err(unavailable)? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "Conflict",
            "the rollout changed meanwhile; read it and retry",
        )
        .with_field("state"));
    }
    Ok(row)
}

async fn answer(app: &AppState, raw: &str) -> Result<Response, ApiError> {
    refresh(app).await;
    let row = app.config.store().rollout_get(raw).await.map_err(unavailable)?;
    let row = row.ok_or_else(|| ApiError::not_found("the rollout is gone"))?;
    Ok(axum::Json(view(app, &row).await?).into_response())
}

pub(crate) async fn pause(
    State(app): State<AppState>,
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
    State(app): State<AppState>,
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
    State(app): State<AppState>,
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
    State(app): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let row = act(&app, &raw, &[RUNNING, PAUSED], |r, _| {
        r.state = ROLLED_BACK.into();
        r.reason = format!("aborted by {}", who.name);
    })
    .await?;
    roll_back(&app, &row, &who.name).await?;
    answer(&app, &raw).await
}

/// Publishes the previous version's content as a new version, if a newer one was published
/// (devices keep the larger version: going back must go up).
async fn roll_back(app: &AppState, row: &RolloutRow, author: &str) -> Result<Option<i64>, ApiError> {
    let store = app.config.store();
    if newest(app, row).await?.is_none() {
        return Ok(None);
    }
    let prev = store.config_version(&row.module, row.previous).await.map_err(unavailable)?;
    let prev = prev.ok_or_else(|| ApiError::internal(&"the rollout's previous version is gone"))?;
    let publish = Publish {
        module: &row.module,
        document: &prev.document,
        expect: Expect::Any,
        author,
        rollback_of: Some(row.previous),
    };
    let reason = row.reason.clone();
    let written = store
        .config_publish(publish, |_| format!("rollback to version {}: {reason}", row.previous))
        .await
        .map_err(|e| ApiError::internal(&e))?;
    refresh(app).await;
    Ok(Some(written.version))
}

/// Every `tick`, until `shutdown`: flushes this replica's per-version counts and decides every
/// running rollout.
pub async fn run(app: AppState, tick: Duration, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = shutdown.cancelled() => return,
        }
        if let Err(e) = tick_once(&app).await {
            tracing::warn!(error = %e.message, "A rollout tick failed; the next one retries.");
        }
    }
}

async fn tick_once(app: &AppState) -> Result<(), ApiError> {
    let store = app.config.store();
    let rollouts = store.rollouts_active().await.map_err(unavailable)?;
    if rollouts.is_empty() {
        // Nothing to judge; the counts still reach the store for the next rollout's first step.
        return app.config.sides().flush(store).await.map_err(unavailable);
    }
    for row in rollouts.into_iter().filter(|r| r.state == RUNNING) {
        let spec = spec_of(&row)?;
        let Some((version, published_at)) = newest(app, &row).await? else { continue };
        let since = row.step_started.max(published_at);
        let elapsed_s = ((httpdns_core::clock::unix_ms() as i64 - since) / 1000).max(0) as u64;
        let places = places(app, &row, version, since).await?;
        let step = row.step as usize;
        let mut next = RolloutRow { version: Some(version), ..row.clone() };
        match decide(&spec, step, elapsed_s, &places) {
            Decision::Hold => continue,
            Decision::Advance(k) => {
                next.step = k as i64;
                next.share = spec.steps[k];
                next.step_started = httpdns_core::clock::unix_ms() as i64;
                next.reason = format!("step {k}: {} of the devices on version {version}", spec.steps[k]);
            }
            Decision::Done => {
                next.state = DONE.into();
                next.share = 1.0;
                next.reason = format!("done: every step held; version {version} for every device");
            }
            Decision::RollBack(why) => {
                next.state = ROLLED_BACK.into();
                next.reason = format!("rolled back: {why}");
            }
        }
        if !store.rollout_update(&next).await.map_err(unavailable)? {
            continue; // Another replica decided this tick.
        }
        tracing::info!(module = %row.module, state = %next.state, step = next.step, reason = %next.reason, "Rollout moved.");
        let (before, after) = if next.state == ROLLED_BACK {
            (Some(version), roll_back(app, &next, "rollout").await?)
        } else {
            refresh(app).await;
            (Some(row.previous), Some(version))
        };
        let entry = AuditEntry {
            actor: "rollout".into(),
            method: "POST".into(),
            path: format!("/admin/v1/config/{}/rollout", row.module),
            revision_before: before,
            revision_after: after,
            status: 200,
            detail: next.reason.clone(),
        };
        if let Err(e) = store.audit_append(&entry).await {
            app.metrics.audit_write_errors.inc();
            tracing::error!(error = %e, "A rollout moved but its audit entry could not be written.");
        }
    }
    Ok(())
}
