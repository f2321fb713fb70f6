//! The controller's loop. Every replica runs it; the one holding the store's lease decides.
//!
//! A tick (every `HTTPDNS_CONTROL_TICK_MS`): renew the lease; on the leader, read the recent
//! minutes of `policy_minutes` and add what changed since the last reading to each place's
//! evidence (so evidence is exact to the tick, not to the minute), decide every place, write
//! the places and steps, then publish a new version of every config module that carries a
//! `resolutionPolicy` (devices see the change at their next conditional poll, or at once on a
//! long poll). On every replica, load the places in force.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use httpdns_config::policy::PlaceState;
use httpdns_store::config::{Expect, Publish, PublishError};
use httpdns_store::events::PolicyCounts;
use httpdns_store::policy::{PlaceRow, StepRow};
use httpdns_store::teams::AuditEntry;
use httpdns_store::{Store, StoreError};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::machine::{self, Evidence, Outcome, Status};
use crate::{threshold, PolicyMetrics, PolicyView, Settings};

/// The lease's name in the store.
pub const LEASE: &str = "policy-controller";
/// The author of the versions the controller publishes and the actor of its audit entries.
pub const ACTOR: &str = "controller";
/// Minutes of `policy_minutes` re-read every tick: a replica's flush may land that late.
const RECENT_MINUTES: i64 = 5;
/// What a judged evidence window keeps for the next judgement.
const DECAY: f64 = 0.5;
/// How often thresholds are derived again from history.
const THRESHOLDS_EVERY: Duration = Duration::from_secs(3600);

/// Whether the server's own health checks see a place's nodes up (or it has none).
pub type Checks = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

#[derive(Debug, Clone)]
struct Place {
    status: Status,
    evidence: Evidence,
    /// The figures of the last evaluation.
    rates: serde_json::Value,
}

/// The controller of one replica.
pub struct Controller {
    settings: Settings,
    store: Store,
    view: Arc<PolicyView>,
    metrics: PolicyMetrics,
    checks: Checks,
    holder: String,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").field("settings", &self.settings).field("holder", &self.holder).finish()
    }
}

/// What only the leader keeps between ticks.
#[derive(Default)]
struct Memory {
    places: HashMap<(String, String), Place>,
    seen: HashMap<(i64, String, String, String), PolicyCounts>,
    thresholds: HashMap<(String, String), f64>,
    thresholds_at: Option<Instant>,
    /// Modules still to publish (a failed publish is retried next tick), with the reasons.
    unpublished: Vec<StepRow>,
}

impl Controller {
    pub fn new(
        settings: Settings,
        store: Store,
        view: Arc<PolicyView>,
        metrics: PolicyMetrics,
        checks: Checks,
    ) -> Self {
        let holder = httpdns_auth::instance_id();
        Self { settings, store, view, metrics, checks, holder }
    }

    pub fn view(&self) -> &Arc<PolicyView> {
        &self.view
    }

    /// Ticks until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.settings.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut memory: Option<Memory> = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => break,
            }
            let started = Instant::now();
            // Bounded: a hung database must not stop the loop from noticing the shutdown.
            let bound = self.settings.tick.max(Duration::from_secs(5)) * 2;
            match tokio::time::timeout(bound, self.tick(&mut memory)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    self.metrics.tick_errors.inc();
                    tracing::warn!(error = %e, "Policy controller tick failed.");
                }
                Err(_) => {
                    self.metrics.tick_errors.inc();
                    tracing::warn!("Policy controller tick timed out.");
                }
            }
            self.metrics.tick_seconds.set(started.elapsed().as_secs_f64());
        }
    }

    async fn tick(&self, memory: &mut Option<Memory>) -> Result<(), StoreError> {
        let now_ms = httpdns_core::clock::unix_ms() as i64;
        let ttl = (self.settings.tick.as_millis() as i64 * 3).max(3_000);
        let leader = self.store.lease(LEASE, &self.holder, now_ms, ttl).await?;
        self.metrics.leader.set(i64::from(leader));
        if leader {
            if memory.is_none() {
                *memory = Some(self.load().await?);
            }
            let m = memory.as_mut().expect("loaded");
            self.decide(m, now_ms).await?;
        } else {
            // Another replica decides; what this one kept would be stale when it leads again.
            *memory = None;
        }
        self.view.reload(&self.store).await?;
        for r in self.store.policy_places().await? {
            if let Some(state) = PlaceState::parse(&r.state) {
                self.metrics.place(&r.isp, &r.region, state, r.share, r.threshold);
            }
        }
        Ok(())
    }

    /// The leader's memory from the store: each place's state as last written.
    async fn load(&self) -> Result<Memory, StoreError> {
        let mut m = Memory::default();
        for r in self.store.policy_places().await? {
            let Some(state) = PlaceState::parse(&r.state) else { continue };
            let last = self.settings.ramp.len() - 1;
            let step = if state == PlaceState::Healthy { last } else { (r.step.max(0) as usize).min(last) };
            m.places.insert(
                (r.isp, r.region),
                Place {
                    status: Status { state, step, since_ms: r.since },
                    evidence: Evidence::default(),
                    rates: serde_json::from_str(&r.rates).unwrap_or(serde_json::Value::Null),
                },
            );
        }
        Ok(m)
    }

    async fn decide(&self, m: &mut Memory, now_ms: i64) -> Result<(), StoreError> {
        let s = &self.settings;
        let now_minute = now_ms / 60_000;
        if m.thresholds_at.is_none_or(|t| t.elapsed() >= THRESHOLDS_EVERY) {
            let from = now_minute - threshold::HISTORY_DAYS * 24 * 60;
            m.thresholds = self
                .store
                .policy_history(from, threshold::MIN_MINUTE_REQUESTS, threshold::MIN_MINUTE_REPORTS)
                .await?
                .into_iter()
                .map(|r| ((r.isp, r.region), threshold::from_moments(r.minutes, r.sum, r.sum_sq)))
                .collect();
            m.thresholds_at = Some(Instant::now());
        }
        // Evidence: what each (minute, place, cohort) row grew by since the last reading.
        let from = now_minute - RECENT_MINUTES;
        for row in self.store.policy_minutes(from, now_minute).await? {
            let key = (row.minute, row.isp.clone(), row.region.clone(), row.cohort.clone());
            let before = m.seen.get(&key).copied().unwrap_or_default();
            let delta = row.counts.minus(&before);
            m.seen.insert(key, row.counts);
            // A place first seen has had no change to settle from (its `since` is the epoch).
            let place = m.places.entry((row.isp, row.region)).or_insert_with(|| Place {
                status: Status::healthy(&s.ramp, 0),
                evidence: Evidence::default(),
                rates: serde_json::Value::Null,
            });
            if now_ms - place.status.since_ms < s.settle().as_millis() as i64 {
                // Settling after a change: what devices did under the old step is not evidence.
                continue;
            }
            let side = match row.cohort.as_str() {
                "on" => &mut place.evidence.on,
                "off" => &mut place.evidence.off,
                _ => &mut place.evidence.unknown,
            };
            side.add(&delta);
        }
        m.seen.retain(|(minute, ..), _| *minute >= from);

        let mut rows = Vec::with_capacity(m.places.len());
        let mut steps = Vec::new();
        for ((isp, region), place) in &mut m.places {
            let limit =
                m.thresholds.get(&(isp.clone(), region.clone())).copied().unwrap_or(threshold::DEFAULT);
            let figures = figures(&place.evidence, limit);
            let outcome = if s.auto {
                machine::decide(&place.status, &place.evidence, limit, (self.checks)(isp, region), now_ms, s)
            } else {
                Outcome::Stay { reset: false }
            };
            match outcome {
                Outcome::Stay { reset } => {
                    if reset {
                        // A judged window is halved, not dropped: what belongs to its requests
                        // but arrives a tick later (a fallback in the next batch, another
                        // replica's flush) still meets them, and older evidence fades.
                        place.rates = figures;
                        place.evidence = place.evidence.decayed(DECAY);
                    } else if place.evidence.on.requests + place.evidence.unknown.requests > 0.0 {
                        place.rates = figures;
                    }
                }
                Outcome::Change { next, reason } => {
                    tracing::info!(%isp, %region, from = place.status.state.as_str(), to = next.state.as_str(),
                        share = next.share(&s.ramp), %reason, "Policy controller changed a place.");
                    self.metrics.steps.with_label_values(&[next.state.as_str()]).inc();
                    steps.push(StepRow {
                        at: now_ms,
                        isp: isp.clone(),
                        region: region.clone(),
                        from_state: place.status.state.as_str().into(),
                        to_state: next.state.as_str().into(),
                        from_share: place.status.share(&s.ramp),
                        to_share: next.share(&s.ramp),
                        reason,
                        versions: String::new(),
                    });
                    place.status = next;
                    place.rates = figures;
                    place.evidence = Evidence::default();
                }
            }
            rows.push(PlaceRow {
                isp: isp.clone(),
                region: region.clone(),
                state: place.status.state.as_str().into(),
                step: place.status.step as i64,
                share: place.status.share(&s.ramp),
                since: place.status.since_ms,
                threshold: limit,
                rates: place.rates.to_string(),
                updated_at: now_ms,
            });
        }
        // The places first: a replica that loads the version published next loads these too.
        self.store.policy_save(&rows, &steps).await?;
        m.unpublished.extend(steps);
        if !m.unpublished.is_empty() {
            let published = self.publish(&m.unpublished).await?;
            let versions =
                published.iter().map(|(module, _, v)| format!("{module}:{v}")).collect::<Vec<_>>().join(",");
            for step in std::mem::take(&mut m.unpublished) {
                self.store.policy_step_versions(step.at, &step.isp, &step.region, &versions).await?;
                self.audit(&step, &published).await?;
            }
        }
        Ok(())
    }

    /// The audit log's entries of one change: one per config version it published (the module's
    /// version before and after), or one naming the place when no module carries a policy.
    async fn audit(&self, step: &StepRow, published: &[(String, i64, i64)]) -> Result<(), StoreError> {
        let detail = format!(
            "policy: {}/{} {} -> {} (share {} -> {}): {}",
            step.isp,
            step.region,
            step.from_state,
            step.to_state,
            step.from_share,
            step.to_share,
            step.reason
        );
        let entry = |path: String, before: Option<i64>, after: Option<i64>| AuditEntry {
            actor: ACTOR.to_owned(),
            method: "PUT".to_owned(),
            path,
            revision_before: before,
            revision_after: after,
            status: 200,
            detail: detail.clone(),
        };
        if published.is_empty() {
            let path = format!("/admin/v1/policy/places?isp={}&region={}", step.isp, step.region);
            self.store.audit_append(&entry(path, None, None)).await?;
        }
        for (module, before, after) in published {
            let e = entry(format!("/admin/v1/config/{module}"), Some(*before), Some(*after));
            self.store.audit_append(&e).await?;
        }
        Ok(())
    }

    /// Publishes the current content of every module with a `resolutionPolicy` again, as a new
    /// version whose summary gives the reasons. Returns `(module, before, after)`.
    async fn publish(&self, steps: &[StepRow]) -> Result<Vec<(String, i64, i64)>, StoreError> {
        let reason = steps
            .iter()
            .map(|s| format!("{}/{} {} -> {}: {}", s.isp, s.region, s.from_state, s.to_state, s.reason))
            .collect::<Vec<_>>()
            .join("; ");
        let mut out = Vec::new();
        for (module, version, _) in self.store.config_modules().await? {
            let Some(row) = self.store.config_version(&module, version).await? else { continue };
            let has_policy = serde_json::from_str::<serde_json::Value>(&row.document)
                .is_ok_and(|v| v.get("resolutionPolicy").is_some());
            if !has_policy {
                continue;
            }
            let p = Publish {
                module: &module,
                document: &row.document,
                expect: Expect::Version(version),
                author: ACTOR,
                rollback_of: None,
            };
            let summary = format!("policy: {reason}");
            match self.store.config_publish(p, |_| summary).await {
                Ok(v) => out.push((module, version, v.version)),
                // An operator published in between: their version carries the same policy and
                // the places are saved, so devices get the change with it.
                Err(PublishError::Precondition { .. } | PublishError::PreconditionRequired { .. }) => {}
                Err(PublishError::Store(e)) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// The figures the admin API shows for a place.
fn figures(ev: &Evidence, limit: f64) -> serde_json::Value {
    let side = |c: &PolicyCounts| {
        json!({
            "requests": (c.requests * 1000.0).round() / 1000.0,
            "reports": (c.reports * 1000.0).round() / 1000.0,
            "failure_rate": (machine::failure_rate(c) * 10_000.0).round() / 10_000.0,
            "latency_ms": machine::latency(c).map(|l| l.round()),
        })
    };
    json!({"threshold": limit, "on": side(&ev.on), "off": side(&ev.off), "unknown": side(&ev.unknown)})
}
