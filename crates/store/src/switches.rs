//! The vendors' server-side switches operators set (`/admin/v1/vendor-switches`): one row per
//! scope, `global` or an account id, its body the JSON the admin API validated.
//!
//! Like the live tables, these take no store revision: every replica reads the whole (small)
//! table every few seconds, alongside the replicas' heartbeat.

use sqlx::Row;

use crate::{Store, StoreError};

impl Store {
    /// Every scope's body, by scope.
    pub async fn vendor_switches(&self) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query("SELECT scope, body FROM vendor_switches ORDER BY scope")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
    }

    /// Replaces every scope's row with `scopes`, in one transaction: a reader sees the whole
    /// previous setting or the whole new one.
    pub async fn put_vendor_switches(&self, scopes: &[(String, String)]) -> Result<(), StoreError> {
        let now = httpdns_core::clock::unix_ms() as i64;
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM vendor_switches").execute(&mut *tx).await?;
        for (scope, body) in scopes {
            sqlx::query("INSERT INTO vendor_switches (scope, body, updated_at) VALUES ($1, $2, $3)")
                .bind(scope)
                .bind(body)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
