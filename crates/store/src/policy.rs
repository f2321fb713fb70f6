//! The policy controller's tables: each place's state, every step it took, and the lease that
//! makes one replica the controller (docs/policy.md).
//!
//! Like the live tables these take no store revision: the controller publishes a config
//! version after it writes them, and that version is what replicas and devices follow.

use sqlx::Row;

use crate::{Store, StoreError};

/// A place's row.
#[derive(Debug, Clone, PartialEq)]
pub struct PlaceRow {
    pub isp: String,
    pub region: String,
    /// `healthy`, `degraded` or `recovering`.
    pub state: String,
    pub step: i64,
    pub share: f64,
    /// Milliseconds since the Unix epoch.
    pub since: i64,
    pub threshold: f64,
    /// The last evaluation's figures, as JSON.
    pub rates: String,
    pub updated_at: i64,
}

/// One change of a place.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    /// Milliseconds since the Unix epoch.
    pub at: i64,
    pub isp: String,
    pub region: String,
    pub from_state: String,
    pub to_state: String,
    pub from_share: f64,
    pub to_share: f64,
    pub reason: String,
    /// `module:version` of the versions the change published, comma-separated.
    pub versions: String,
}

fn place_row(r: &sqlx::any::AnyRow) -> Result<PlaceRow, StoreError> {
    Ok(PlaceRow {
        isp: r.try_get(0)?,
        region: r.try_get(1)?,
        state: r.try_get(2)?,
        step: r.try_get(3)?,
        share: r.try_get(4)?,
        since: r.try_get(5)?,
        threshold: r.try_get(6)?,
        rates: r.try_get(7)?,
        updated_at: r.try_get(8)?,
    })
}

impl Store {
    /// Every place the controller has written.
    pub async fn policy_places(&self) -> Result<Vec<PlaceRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT isp, region, state, step, share, since, threshold, rates, updated_at FROM policy_places \
             ORDER BY isp, region",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(place_row).collect()
    }

    /// Writes places (each replacing its row) and steps in one transaction.
    pub async fn policy_save(&self, places: &[PlaceRow], steps: &[StepRow]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for p in places {
            sqlx::query(
                "INSERT INTO policy_places (isp, region, state, step, share, since, threshold, rates, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (isp, region) DO UPDATE SET \
                 state = excluded.state, step = excluded.step, share = excluded.share, since = excluded.since, \
                 threshold = excluded.threshold, rates = excluded.rates, updated_at = excluded.updated_at",
            )
            .bind(&p.isp)
            .bind(&p.region)
            .bind(&p.state)
            .bind(p.step)
            .bind(p.share)
            .bind(p.since)
            .bind(p.threshold)
            .bind(&p.rates)
            .bind(p.updated_at)
            .execute(&mut *tx)
            .await?;
        }
        for s in steps {
            // Two changes of one place in one millisecond cannot happen (one per tick); a
            // retried save of the same step replaces it.
            sqlx::query(
                "INSERT INTO policy_steps (at, isp, region, from_state, to_state, from_share, to_share, reason, \
                 versions) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (at, isp, region) DO UPDATE SET \
                 to_state = excluded.to_state, to_share = excluded.to_share, reason = excluded.reason, \
                 versions = excluded.versions",
            )
            .bind(s.at)
            .bind(&s.isp)
            .bind(&s.region)
            .bind(&s.from_state)
            .bind(&s.to_state)
            .bind(s.from_share)
            .bind(s.to_share)
            .bind(&s.reason)
            .bind(&s.versions)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Records the config versions a step published (written after the publish).
    pub async fn policy_step_versions(
        &self,
        at: i64,
        isp: &str,
        region: &str,
        versions: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE policy_steps SET versions = $1 WHERE at = $2 AND isp = $3 AND region = $4")
            .bind(versions)
            .bind(at)
            .bind(isp)
            .bind(region)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The latest `limit` steps, newest first; of one place when given.
    pub async fn policy_steps(
        &self,
        place: Option<(&str, &str)>,
        limit: i64,
    ) -> Result<Vec<StepRow>, StoreError> {
        let (isp, region) = place.unwrap_or(("", ""));
        let rows = sqlx::query(
            "SELECT at, isp, region, from_state, to_state, from_share, to_share, reason, versions FROM policy_steps \
             WHERE ($1 = '' OR (isp = $1 AND region = $2)) ORDER BY at DESC, isp, region LIMIT $3",
        )
        .bind(isp)
        .bind(region)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push(StepRow {
                at: r.try_get(0)?,
                isp: r.try_get(1)?,
                region: r.try_get(2)?,
                from_state: r.try_get(3)?,
                to_state: r.try_get(4)?,
                from_share: r.try_get(5)?,
                to_share: r.try_get(6)?,
                reason: r.try_get(7)?,
                versions: r.try_get(8)?,
            });
        }
        Ok(out)
    }

    /// Takes or renews the lease `name` for `holder` until `now_ms + ttl_ms`; true when
    /// `holder` has it. A lease another holder let expire is taken over.
    pub async fn lease(
        &self,
        name: &str,
        holder: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let current = sqlx::query("SELECT holder, expires_at FROM leases WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let mine = match current {
            None => {
                sqlx::query(
                    "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
                )
                .bind(name)
                .bind(holder)
                .bind(now_ms + ttl_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1
            }
            Some(row) => {
                let (h, expires): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
                // The compare in the UPDATE keeps two replicas that both saw an expired lease
                // from both taking it: the second matches no row.
                (h == holder || expires < now_ms)
                    && sqlx::query(
                        "UPDATE leases SET holder = $1, expires_at = $2 WHERE name = $3 AND holder = $4 \
                         AND expires_at = $5",
                    )
                    .bind(holder)
                    .bind(now_ms + ttl_ms)
                    .bind(name)
                    .bind(&h)
                    .bind(expires)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                        == 1
            }
        };
        tx.commit().await?;
        Ok(mine)
    }
}

/// One place's per-minute failure rates over a span: how many minutes, their sum and the sum
/// of their squares (the moments a threshold is derived from).
#[derive(Debug, Clone, PartialEq)]
pub struct RateMoments {
    pub isp: String,
    pub region: String,
    pub minutes: i64,
    pub sum: f64,
    pub sum_sq: f64,
}

impl Store {
    /// The moments of each place's per-minute failure rate (`(errors + fallbacks) / requests`,
    /// at most 1) over minutes from `from` with at least `min_requests` requests (weighted) resting
    /// on at least `min_reports` reports (raw), devices held back by the policy (`cohort = 'off'`)
    /// excluded. One row per place, computed in the database: days of minutes never cross the
    /// wire.
    pub async fn policy_history(
        &self,
        from: i64,
        min_requests: f64,
        min_reports: f64,
    ) -> Result<Vec<RateMoments>, StoreError> {
        let rows = sqlx::query(
            "SELECT isp, region, COUNT(*), SUM(r), SUM(r * r) FROM (\
             SELECT isp, region, minute, CASE WHEN SUM(errors + fallbacks) >= SUM(requests) THEN 1.0 \
             ELSE SUM(errors + fallbacks) / SUM(requests) END AS r FROM policy_minutes \
             WHERE minute >= $1 AND cohort <> 'off' GROUP BY isp, region, minute \
             HAVING SUM(requests) >= $2 AND SUM(COALESCE(reports, requests)) >= $3) AS m \
             GROUP BY isp, region",
        )
        .bind(from)
        .bind(min_requests)
        .bind(min_reports)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push(RateMoments {
                isp: r.try_get(0)?,
                region: r.try_get(1)?,
                minutes: r.try_get(2)?,
                sum: r.try_get(3)?,
                sum_sq: r.try_get(4)?,
            });
        }
        Ok(out)
    }
}
