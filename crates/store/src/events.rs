//! Per-minute aggregates of client events (`POST /app/events`), one row per replica and key.
//!
//! Like the live tables, these rows change every few seconds and take no store revision. A
//! replica rewrites its own rows (the key names it), so a retried flush is idempotent; readers
//! sum over replicas.

use sqlx::Row;

use crate::{Store, StoreError};

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
    /// transaction (a flush is all or nothing).
    pub async fn save_event_minutes(&self, replica: &str, rows: &[EventRow]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for r in rows {
            sqlx::query(
                "INSERT INTO event_minutes (minute, replica, event, isp, region, reason, host, grp, count, \
                 duration_ms_sum, duration_count) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (minute, replica, event, isp, region, reason, host, grp) DO UPDATE SET \
                 count = excluded.count, duration_ms_sum = excluded.duration_ms_sum, \
                 duration_count = excluded.duration_count",
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
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every replica's counts summed per key over the minutes `from..=to`, optionally of one
    /// event type only. Also says how many replicas contributed.
    pub async fn event_totals(
        &self,
        from: i64,
        to: i64,
        event: Option<&str>,
    ) -> Result<(Vec<(EventKey, EventCounts)>, i64), StoreError> {
        // One static statement for both cases: an empty filter matches every event.
        let event = event.unwrap_or("");
        let rows = sqlx::query(
            "SELECT event, isp, region, reason, host, grp, SUM(count), SUM(duration_ms_sum), \
             SUM(duration_count) FROM event_minutes WHERE minute >= $1 AND minute <= $2 \
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
                },
                EventCounts {
                    count: r.try_get(6)?,
                    duration_ms_sum: r.try_get(7)?,
                    duration_count: r.try_get(8)?,
                },
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
        Ok(done.rows_affected())
    }
}
