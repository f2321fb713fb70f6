//! Guarded rollouts' rows and the per-version event counts they judge by.
//!
//! A rollout row changes through [`Store::rollout_put`] (an operator's PUT) or
//! [`Store::rollout_update`], which applies only if the row is still at the `updated_at` the
//! caller read: replicas tick together and exactly one of them moves a rollout on. Both take a
//! store revision and announce it, so every replica's config cache follows at once.

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::resources::{next_revision, notify};
use crate::{Store, StoreError};

/// One module's rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutRow {
    pub module: String,
    /// The version the devices outside the share keep.
    pub previous: i64,
    /// The version rolled out, recorded with each decision about it.
    pub version: Option<i64>,
    /// The spec as given (JSON).
    pub spec: String,
    /// `running`, `paused`, `rolled_back` or `done`.
    pub state: String,
    pub step: i64,
    /// The share of devices on the newest version now.
    pub share: f64,
    /// Milliseconds since the Unix epoch.
    pub step_started: i64,
    pub reason: String,
    pub updated_at: i64,
}

/// Counts of the events of devices on one config version, in one minute and place.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionMinute {
    pub minute: i64,
    pub version: i64,
    pub isp: String,
    pub region: String,
    pub requests: f64,
    pub errors: f64,
    pub fallbacks: f64,
}

macro_rules! rollout_columns {
    () => {
        "module, previous, spec, state, step, share, step_started, reason, updated_at, version"
    };
}

fn rollout_row(r: &AnyRow) -> Result<RolloutRow, StoreError> {
    Ok(RolloutRow {
        module: r.try_get(0)?,
        previous: r.try_get(1)?,
        spec: r.try_get(2)?,
        state: r.try_get(3)?,
        step: r.try_get(4)?,
        share: r.try_get(5)?,
        step_started: r.try_get(6)?,
        reason: r.try_get(7)?,
        updated_at: r.try_get(8)?,
        version: r.try_get(9)?,
    })
}

impl Store {
    /// Creates or replaces a module's rollout (`updated_at` is set here; returned).
    pub async fn rollout_put(&self, row: &RolloutRow) -> Result<i64, StoreError> {
        let mut tx = self.pool.begin().await?;
        next_revision(&mut tx).await?;
        let now = httpdns_core::clock::unix_ms() as i64;
        sqlx::query(concat!(
            "INSERT INTO config_rollouts (",
            rollout_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (module) DO UPDATE SET \
             previous = excluded.previous, version = excluded.version, spec = excluded.spec, state = excluded.state, step = excluded.step, \
             share = excluded.share, step_started = excluded.step_started, reason = excluded.reason, \
             updated_at = excluded.updated_at"
        ))
        .bind(&row.module)
        .bind(row.previous)
        .bind(&row.spec)
        .bind(&row.state)
        .bind(row.step)
        .bind(row.share)
        .bind(row.step_started)
        .bind(&row.reason)
        .bind(now)
        .bind(row.version)
        .execute(&mut *tx)
        .await?;
        notify(self, &mut tx).await?;
        tx.commit().await?;
        Ok(now)
    }

    /// Writes `row` if the stored row is still at `row.updated_at`; false when another writer
    /// got there first (nothing written).
    pub async fn rollout_update(&self, row: &RolloutRow) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        next_revision(&mut tx).await?;
        // Strictly later than what was read, even within one millisecond.
        let now = (httpdns_core::clock::unix_ms() as i64).max(row.updated_at + 1);
        let done = sqlx::query(
            "UPDATE config_rollouts SET state = $1, step = $2, share = $3, step_started = $4, reason = $5, \
             updated_at = $6, version = $9 WHERE module = $7 AND updated_at = $8",
        )
        .bind(&row.state)
        .bind(row.step)
        .bind(row.share)
        .bind(row.step_started)
        .bind(&row.reason)
        .bind(now)
        .bind(&row.module)
        .bind(row.updated_at)
        .bind(row.version)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        notify(self, &mut tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    pub async fn rollout_get(&self, module: &str) -> Result<Option<RolloutRow>, StoreError> {
        let row =
            sqlx::query(concat!("SELECT ", rollout_columns!(), " FROM config_rollouts WHERE module = $1"))
                .bind(module)
                .fetch_optional(&self.pool)
                .await?;
        row.as_ref().map(rollout_row).transpose()
    }

    /// The rollouts still deciding (`running` or `paused`).
    pub async fn rollouts_active(&self) -> Result<Vec<RolloutRow>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            rollout_columns!(),
            " FROM config_rollouts WHERE state IN ('running', 'paused') ORDER BY module"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rollout_row).collect()
    }

    /// Writes `replica`'s per-version minutes, each replacing its earlier value.
    pub async fn save_version_minutes(
        &self,
        replica: &str,
        rows: &[VersionMinute],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for r in rows {
            sqlx::query(
                "INSERT INTO config_version_minutes (minute, replica, version, isp, region, requests, errors, \
                 fallbacks) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (minute, replica, version, isp, region) DO UPDATE SET requests = excluded.requests, \
                 errors = excluded.errors, fallbacks = excluded.fallbacks",
            )
            .bind(r.minute)
            .bind(replica)
            .bind(r.version)
            .bind(&r.isp)
            .bind(&r.region)
            .bind(r.requests)
            .bind(r.errors)
            .bind(r.fallbacks)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every replica's counts of versions `a` and `b` from minute `from` on, summed per
    /// version and place (`minute` is 0 in the result).
    pub async fn version_minutes(&self, a: i64, b: i64, from: i64) -> Result<Vec<VersionMinute>, StoreError> {
        let rows = sqlx::query(
            "SELECT version, isp, region, SUM(requests), SUM(errors), SUM(fallbacks) FROM config_version_minutes \
             WHERE minute >= $1 AND version IN ($2, $3) GROUP BY version, isp, region ORDER BY version, isp, region",
        )
        .bind(from)
        .bind(a)
        .bind(b)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(VersionMinute {
                    minute: 0,
                    version: r.try_get(0)?,
                    isp: r.try_get(1)?,
                    region: r.try_get(2)?,
                    requests: r.try_get(3)?,
                    errors: r.try_get(4)?,
                    fallbacks: r.try_get(5)?,
                })
            })
            .collect()
    }

    /// Deletes per-version minutes before `minute`.
    pub async fn prune_version_minutes(&self, minute: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM config_version_minutes WHERE minute < $1")
            .bind(minute)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
