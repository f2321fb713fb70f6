//! Per-minute aggregates of client events (`POST /app/events`), one row per replica and key.
//!
//! Like the live tables, these rows change every few seconds and take no store revision. A
//! replica rewrites its own rows (the key names it), so a retried flush is idempotent; readers
//! sum over replicas.

use std::collections::BTreeMap;

use sqlx::Row;

use crate::{Store, StoreError};

/// What the policy controller reads of one minute, carrier, region and cohort.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PolicyCounts {
    /// Request events, sampled ones weighted by `1 / sample_rate`.
    pub requests: f64,
    /// Request events as received, unweighted: how many reports the weighted figures rest on
    /// (one event sampled at `1e-6` weighs a million but is one report).
    pub reports: f64,
    pub errors: f64,
    pub fallbacks: f64,
    pub latency_ms_sum: f64,
    pub latency_count: f64,
}

/// Whether a `request` event's outcome (its reason) is a failure of the delivery: anything but
/// `ok` and `4xx`, since a 4xx is the app asking for what is not there. The one place the rule
/// lives: the policy minutes here, the fleet's figures and the rollouts' sides use it.
pub fn request_failed(reason: &str) -> bool {
    reason != "ok" && reason != "4xx"
}

impl PolicyCounts {
    /// What an event row adds: `request` events are requests (errors by [`request_failed`]),
    /// `dns_fallback` events are fallbacks; the rest add nothing.
    pub fn of(key: &EventKey, c: &EventCounts) -> Self {
        match key.event.as_str() {
            "request" => Self {
                requests: c.count,
                reports: c.count,
                errors: if request_failed(&key.reason) { c.count } else { 0.0 },
                fallbacks: 0.0,
                latency_ms_sum: c.duration_ms_sum,
                latency_count: c.duration_count,
            },
            "dns_fallback" => Self { fallbacks: c.count, ..Self::default() },
            _ => Self::default(),
        }
    }

    pub fn add(&mut self, o: &PolicyCounts) {
        self.requests += o.requests;
        self.reports += o.reports;
        self.errors += o.errors;
        self.fallbacks += o.fallbacks;
        self.latency_ms_sum += o.latency_ms_sum;
        self.latency_count += o.latency_count;
    }

    /// Less `o` (what an earlier reading already counted), never below zero.
    pub fn minus(&self, o: &PolicyCounts) -> Self {
        let d = |a: f64, b: f64| (a - b).max(0.0);
        Self {
            requests: d(self.requests, o.requests),
            reports: d(self.reports, o.reports),
            errors: d(self.errors, o.errors),
            fallbacks: d(self.fallbacks, o.fallbacks),
            latency_ms_sum: d(self.latency_ms_sum, o.latency_ms_sum),
            latency_count: d(self.latency_count, o.latency_count),
        }
    }
}

/// One row of [`Store::policy_minutes`]: every replica summed.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRow {
    pub minute: i64,
    pub isp: String,
    pub region: String,
    pub cohort: String,
    pub counts: PolicyCounts,
}

/// The aggregation key of one row, without the minute and the replica.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKey {
    pub event: String,
    pub isp: String,
    pub region: String,
    pub reason: String,
    /// The unified CDN host (`request`, `host_switch`), `other`, or empty.
    pub host: String,
    /// `on`, `off` or `unknown`: the device's side of the convergence switch.
    pub group: String,
    /// `on`, `off` or `unknown`: the device's side of its place's `httpdnsRate` (the policy
    /// controller's cohorts). Kept in `policy_minutes`, not in `event_minutes`' key.
    pub cohort: String,
}

/// What was counted under one key.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EventCounts {
    /// Events, sampled ones weighted by `1 / sample_rate`.
    pub count: f64,
    pub duration_ms_sum: f64,
    pub duration_count: f64,
}

impl EventCounts {
    pub fn add(&mut self, other: &EventCounts) {
        self.count += other.count;
        self.duration_ms_sum += other.duration_ms_sum;
        self.duration_count += other.duration_count;
    }
}

/// One minute's row of one replica.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    /// Minutes since the Unix epoch.
    pub minute: i64,
    pub key: EventKey,
    pub counts: EventCounts,
}

/// One bucket of [`Store::event_buckets`]: every replica and host and convergence side summed.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBucket {
    /// The bucket's index from the first minute asked for.
    pub bucket: i64,
    pub event: String,
    pub isp: String,
    pub region: String,
    pub reason: String,
    pub count: f64,
}

impl Store {
    /// Writes `replica`'s rows, each replacing the replica's earlier value of its key, in one
    /// transaction (a flush is all or nothing): `event_minutes` without the cohort, and the
    /// controller's `policy_minutes` by carrier, region and cohort. `rows` must hold whole
    /// minutes (each replaces what the replica wrote of its minute).
    pub async fn save_event_minutes(&self, replica: &str, rows: &[EventRow]) -> Result<(), StoreError> {
        self.save_minutes(replica, rows, None).await
    }

    /// [`Store::save_event_minutes`] with each row's raw reports (events as received,
    /// unweighted), `reports[i]` for `rows[i]`. Without them a row's reports read as its count.
    pub async fn save_reported_event_minutes(
        &self,
        replica: &str,
        rows: &[EventRow],
        reports: &[f64],
    ) -> Result<(), StoreError> {
        assert_eq!(rows.len(), reports.len(), "one report count per row");
        self.save_minutes(replica, rows, Some(reports)).await
    }

    async fn save_minutes(
        &self,
        replica: &str,
        rows: &[EventRow],
        reports: Option<&[f64]>,
    ) -> Result<(), StoreError> {
        let mut events: BTreeMap<(i64, EventKey), (EventCounts, Option<f64>)> = BTreeMap::new();
        let mut policy: BTreeMap<(i64, &str, &str, &str), PolicyCounts> = BTreeMap::new();
        for (i, r) in rows.iter().enumerate() {
            let key = EventKey { cohort: String::new(), ..r.key.clone() };
            let e = events.entry((r.minute, key)).or_default();
            e.0.add(&r.counts);
            if let Some(reports) = reports {
                *e.1.get_or_insert(0.0) += reports[i];
            }
            let mut counts = PolicyCounts::of(&r.key, &r.counts);
            if let (Some(reports), "request") = (reports, r.key.event.as_str()) {
                counts.reports = reports[i];
            }
            policy.entry((r.minute, &r.key.isp, &r.key.region, &r.key.cohort)).or_default().add(&counts);
        }
        let mut tx = self.pool.begin().await?;
        for ((minute, key), (counts, reports)) in &events {
            let r = EventRow { minute: *minute, key: key.clone(), counts: *counts };
            sqlx::query(
                "INSERT INTO event_minutes (minute, replica, event, isp, region, reason, host, grp, count, \
                 duration_ms_sum, duration_count, reports) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (minute, replica, event, isp, region, reason, host, grp) DO UPDATE SET \
                 count = excluded.count, duration_ms_sum = excluded.duration_ms_sum, \
                 duration_count = excluded.duration_count, reports = excluded.reports",
            )
            .bind(r.minute)
            .bind(replica)
            .bind(&r.key.event)
            .bind(&r.key.isp)
            .bind(&r.key.region)
            .bind(&r.key.reason)
            .bind(&r.key.host)
            .bind(&r.key.group)
            .bind(r.counts.count)
            .bind(r.counts.duration_ms_sum)
            .bind(r.counts.duration_count)
            // A row without raw reports stores its count, which is what readers take a NULL
            // for; never a NULL bind: PostgreSQL keeps the statement prepared with the first
            // execution's parameter types, and a NULL then a number would not bind.
            .bind(reports.unwrap_or(r.counts.count))
            .execute(&mut *tx)
            .await?;
        }
        for ((minute, isp, region, cohort), c) in &policy {
            sqlx::query(
                "INSERT INTO policy_minutes (minute, replica, isp, region, cohort, requests, errors, \
                 fallbacks, latency_ms_sum, latency_count, reports) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (minute, replica, isp, region, cohort) DO UPDATE SET \
                 requests = excluded.requests, reports = excluded.reports, errors = excluded.errors, fallbacks = excluded.fallbacks, \
                 latency_ms_sum = excluded.latency_ms_sum, latency_count = excluded.latency_count",
            )
            .bind(minute)
            .bind(replica)
            .bind(isp)
            .bind(region)
            .bind(cohort)
            .bind(c.requests)
            .bind(c.errors)
            .bind(c.fallbacks)
            .bind(c.latency_ms_sum)
            .bind(c.latency_count)
            .bind(c.reports)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every replica's `policy_minutes` summed per minute, carrier, region and cohort over
    /// `from..=to`.
    pub async fn policy_minutes(&self, from: i64, to: i64) -> Result<Vec<PolicyRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT minute, isp, region, cohort, SUM(requests), SUM(errors), SUM(fallbacks), \
             SUM(latency_ms_sum), SUM(latency_count), SUM(COALESCE(reports, requests)) FROM policy_minutes WHERE minute >= $1 AND minute <= $2 \
             GROUP BY minute, isp, region, cohort ORDER BY minute, isp, region, cohort",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(policy_row).collect()
    }

    /// Every replica's counts summed per key over the minutes `from..=to`, optionally of one
    /// event type only. Also says how many replicas contributed.
    pub async fn event_totals(
        &self,
        from: i64,
        to: i64,
        event: Option<&str>,
    ) -> Result<(Vec<(EventKey, EventCounts)>, i64), StoreError> {
        let (rows, replicas) = self.reported_event_totals(from, to, event).await?;
        Ok((rows.into_iter().map(|(k, c, _)| (k, c)).collect(), replicas))
    }

    /// [`Store::event_totals`] with each key's raw reports (events as received, unweighted;
    /// the rows of replicas that did not write them count their `count`).
    pub async fn reported_event_totals(
        &self,
        from: i64,
        to: i64,
        event: Option<&str>,
    ) -> Result<(Vec<(EventKey, EventCounts, f64)>, i64), StoreError> {
        // One static statement for both cases: an empty filter matches every event.
        let event = event.unwrap_or("");
        let rows = sqlx::query(
            "SELECT event, isp, region, reason, host, grp, SUM(count), SUM(duration_ms_sum), \
             SUM(duration_count), SUM(COALESCE(reports, count)) FROM event_minutes \
             WHERE minute >= $1 AND minute <= $2 \
             AND ($3 = '' OR event = $3) \
             GROUP BY event, isp, region, reason, host, grp ORDER BY event, isp, region, reason, host, grp",
        )
        .bind(from)
        .bind(to)
        .bind(event)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push((
                EventKey {
                    event: r.try_get(0)?,
                    isp: r.try_get(1)?,
                    region: r.try_get(2)?,
                    reason: r.try_get(3)?,
                    host: r.try_get(4)?,
                    group: r.try_get(5)?,
                    cohort: String::new(),
                },
                EventCounts {
                    count: r.try_get(6)?,
                    duration_ms_sum: r.try_get(7)?,
                    duration_count: r.try_get(8)?,
                },
                r.try_get(9)?,
            ));
        }
        let replicas: i64 = sqlx::query(
            "SELECT COUNT(DISTINCT replica) FROM event_minutes WHERE minute >= $1 AND minute <= $2 \
             AND ($3 = '' OR event = $3)",
        )
        .bind(from)
        .bind(to)
        .bind(event)
        .fetch_one(&self.pool)
        .await?
        .try_get(0)?;
        Ok((out, replicas))
    }

    /// Every replica's counts of the events `events` over the minutes `from..=to`, summed per
    /// bucket of `step` minutes (bucket `b` holds the minutes `from + b * step` onwards),
    /// event, carrier, region and reason: the per-minute series behind the console's charts.
    pub async fn event_buckets(
        &self,
        from: i64,
        to: i64,
        step: i64,
        events: [&str; 3],
    ) -> Result<Vec<EventBucket>, StoreError> {
        let rows = sqlx::query(
            "SELECT (minute - $1) / $3 AS bucket, event, isp, region, reason, SUM(count) FROM event_minutes \
             WHERE minute >= $1 AND minute <= $2 AND event IN ($4, $5, $6) \
             GROUP BY bucket, event, isp, region, reason ORDER BY bucket, event, isp, region, reason",
        )
        .bind(from)
        .bind(to)
        .bind(step.max(1))
        .bind(events[0])
        .bind(events[1])
        .bind(events[2])
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push(EventBucket {
                bucket: r.try_get(0)?,
                event: r.try_get(1)?,
                isp: r.try_get(2)?,
                region: r.try_get(3)?,
                reason: r.try_get(4)?,
                count: r.try_get(5)?,
            });
        }
        Ok(out)
    }

    /// Deletes the rows of minutes before `minute` (the retention); returns how many went.
    pub async fn prune_event_minutes(&self, minute: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM event_minutes WHERE minute < $1")
            .bind(minute)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM policy_minutes WHERE minute < $1").bind(minute).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }
}

impl Store {
    /// [`Store::policy_minutes`] of one place.
    pub async fn policy_place_minutes(
        &self,
        isp: &str,
        region: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<PolicyRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT minute, isp, region, cohort, SUM(requests), SUM(errors), SUM(fallbacks), \
             SUM(latency_ms_sum), SUM(latency_count), SUM(COALESCE(reports, requests)) FROM policy_minutes WHERE minute >= $1 AND minute <= $2 \
             AND isp = $3 AND region = $4 GROUP BY minute, isp, region, cohort ORDER BY minute, cohort",
        )
        .bind(from)
        .bind(to)
        .bind(isp)
        .bind(region)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(policy_row).collect()
    }
}

fn policy_row(r: &sqlx::any::AnyRow) -> Result<PolicyRow, StoreError> {
    Ok(PolicyRow {
        minute: r.try_get(0)?,
        isp: r.try_get(1)?,
        region: r.try_get(2)?,
        cohort: r.try_get(3)?,
        counts: PolicyCounts {
            requests: r.try_get(4)?,
            errors: r.try_get(5)?,
            fallbacks: r.try_get(6)?,
            latency_ms_sum: r.try_get(7)?,
            latency_count: r.try_get(8)?,
            reports: r.try_get(9)?,
        },
    })
}
