//! Adoption sketches: which devices run which config version, as HyperLogLog registers per
//! 5-minute bucket, module, version and replica (`httpdns_config::sketch` makes and reads them;
//! this crate only keeps the text). Like the event minutes, these rows take no store revision
//! and a replica rewrites only its own.

use sqlx::Row;

use crate::{Store, StoreError};

/// One sketch of one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SketchRow {
    /// Unix seconds / 300.
    pub bucket: i64,
    pub module: String,
    pub version: i64,
    /// The sketch's registers, encoded by its owner.
    pub registers: String,
}

impl Store {
    /// Writes `replica`'s sketches, each replacing the replica's earlier one of its key, in one
    /// transaction.
    pub async fn save_adoption(&self, replica: &str, rows: &[SketchRow]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for r in rows {
            sqlx::query(
                "INSERT INTO adoption_sketches (bucket, replica, module, version, registers) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (bucket, replica, module, version) \
                 DO UPDATE SET registers = excluded.registers",
            )
            .bind(r.bucket)
            .bind(replica)
            .bind(&r.module)
            .bind(r.version)
            .bind(&r.registers)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every replica's sketches of `module` from bucket `from` on, as (version, registers).
    pub async fn adoption_since(&self, module: &str, from: i64) -> Result<Vec<(i64, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT version, registers FROM adoption_sketches WHERE module = $1 AND bucket >= $2 \
             ORDER BY version",
        )
        .bind(module)
        .bind(from)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
    }

    /// Deletes the sketches of buckets before `bucket`; returns how many went.
    pub async fn prune_adoption(&self, bucket: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM adoption_sketches WHERE bucket < $1")
            .bind(bucket)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
