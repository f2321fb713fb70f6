//! Guarded rollouts (docs/config-center.md): the states, what both sides did, the rollback and
//! the tick. The admin routes (`/admin/v1/config/{module}/rollout`) are `httpdns-api`'s.
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
use std::sync::Arc;
use std::time::Duration;

use httpdns_config::guard::{decide, Decision, RolloutSpec, Side, Sides};
use httpdns_store::config::{Expect, Publish, PublishError};
use httpdns_store::rollouts::RolloutRow;
use httpdns_store::teams::AuditEntry;
use httpdns_store::StoreError;
use prometheus::IntCounter;
use tokio_util::sync::CancellationToken;

use crate::cache::ConfigCache;

pub const RUNNING: &str = "running";
pub const PAUSED: &str = "paused";
pub const ROLLED_BACK: &str = "rolled_back";
pub const DONE: &str = "done";

/// Why a rollout could not be read or moved.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// The store did not answer.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored spec does not parse.
    #[error("a stored rollout spec does not parse: {0}")]
    Spec(#[from] serde_json::Error),
    /// The rollback's publish failed.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// The version the rollout started from is no longer stored.
    #[error("the rollout's previous version is gone")]
    PreviousGone,
}

/// The stored spec of a rollout.
pub fn spec_of(row: &RolloutRow) -> Result<RolloutSpec, RolloutError> {
    Ok(serde_json::from_str(&row.spec)?)
}

/// The version rolled out and when it was published, if newer than `previous`: while the
/// rollout decides, the module's newest (what the cache gives the share); once finished, the
/// one its last decision named (a rollback published a newer one since).
pub async fn newest(cache: &ConfigCache, row: &RolloutRow) -> Result<Option<(i64, i64)>, RolloutError> {
    let store = cache.store();
    let deciding = row.state == RUNNING || row.state == PAUSED;
    let v = match row.version.filter(|_| !deciding) {
        Some(v) => store.config_version(&row.module, v).await?,
        None => store.config_current(&row.module).await?,
    };
    Ok(v.filter(|c| c.version > row.previous).map(|c| (c.version, c.created_at)))
}

/// Both sides' counts per place (`isp/region`) since the step began (or the newest version
/// appeared, if later), this replica's counts flushed first.
pub async fn places(
    cache: &ConfigCache,
    row: &RolloutRow,
    version: i64,
    since_ms: i64,
) -> Result<BTreeMap<String, Sides>, RolloutError> {
    let store = cache.store();
    if let Err(e) = cache.sides().flush(store).await {
        tracing::warn!(error = %e, "Rollout judged without this replica's latest event counts.");
    }
    let rows = store.version_minutes(version, row.previous, since_ms / 60_000).await?;
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

/// Serves what the store holds now; a failure is logged and left to the refresh loop.
pub async fn refresh(cache: &ConfigCache) {
    if let Err(e) = cache.refresh().await {
        tracing::warn!(error = %e, "Rollout changed but the local refresh failed; the refresh loop will retry.");
    }
}

/// Publishes the previous version's content as a new version, if a newer one was published
/// (devices keep the larger version: going back must go up).
pub async fn roll_back(
    cache: &ConfigCache,
    row: &RolloutRow,
    author: &str,
) -> Result<Option<i64>, RolloutError> {
    let store = cache.store();
    if newest(cache, row).await?.is_none() {
        return Ok(None);
    }
    let prev = store.config_version(&row.module, row.previous).await?;
    let prev = prev.ok_or(RolloutError::PreviousGone)?;
    let publish = Publish {
        module: &row.module,
        document: &prev.document,
        expect: Expect::Any,
        author,
        rollback_of: Some(row.previous),
    };
    let reason = row.reason.clone();
    let written =
        store.config_publish(publish, |_| format!("rollback to version {}: {reason}", row.previous)).await?;
    refresh(cache).await;
    Ok(Some(written.version))
}

/// Every `tick`, until `shutdown`: flushes this replica's per-version counts and decides every
/// running rollout. `audit_write_errors` counts moves whose audit entry could not be written.
pub async fn run(
    cache: Arc<ConfigCache>,
    audit_write_errors: IntCounter,
    tick: Duration,
    shutdown: CancellationToken,
) {
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = shutdown.cancelled() => return,
        }
        if let Err(e) = tick_once(&cache, &audit_write_errors).await {
            tracing::warn!(error = %e, "A rollout tick failed; the next one retries.");
        }
    }
}

async fn tick_once(cache: &ConfigCache, audit_write_errors: &IntCounter) -> Result<(), RolloutError> {
    let store = cache.store();
    let rollouts = store.rollouts_active().await?;
    if rollouts.is_empty() {
        // Nothing to judge; the counts still reach the store for the next rollout's first step.
        return Ok(cache.sides().flush(store).await?);
    }
    for row in rollouts.into_iter().filter(|r| r.state == RUNNING) {
        let spec = spec_of(&row)?;
        let Some((version, published_at)) = newest(cache, &row).await? else { continue };
        let since = row.step_started.max(published_at);
        let elapsed_s = ((httpdns_core::clock::unix_ms() as i64 - since) / 1000).max(0) as u64;
        let places = places(cache, &row, version, since).await?;
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
        if !store.rollout_update(&next).await? {
            continue; // Another replica decided this tick.
        }
        tracing::info!(module = %row.module, state = %next.state, step = next.step, reason = %next.reason, "Rollout moved.");
        let (before, after) = if next.state == ROLLED_BACK {
            (Some(version), roll_back(cache, &next, "rollout").await?)
        } else {
            refresh(cache).await;
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
            audit_write_errors.inc();
            tracing::error!(error = %e, "A rollout moved but its audit entry could not be written.");
        }
    }
    Ok(())
}
