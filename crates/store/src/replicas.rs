//! The replicas that announce public entry points for Alibaba's `/ss`.
//!
//! Like the live tables, these rows change every few seconds and take no store revision.

use sqlx::Row;

use crate::resources::now_ms;
use crate::{Store, StoreError};

/// One replica's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRow {
    pub id: String,
    /// The announced addresses, as configured (`ip` or `ip:port`).
    pub addrs: Vec<String>,
    /// Milliseconds since the Unix epoch, by the writer's clock.
    pub seen_at: i64,
}

/// Rows unchanged for this long belong to replicas that are gone: deleted.
const FORGET_AFTER_MS: i64 = 24 * 3600 * 1000;

impl Store {
    /// Writes this replica's row (its addresses, seen now) and deletes rows of replicas gone
    /// for a day, in one transaction.
    pub async fn replica_heartbeat(&self, id: &str, addrs: &[String]) -> Result<(), StoreError> {
        let now = now_ms();
        let addrs = serde_json::to_string(addrs).expect("strings serialise");
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO replicas (id, addrs, seen_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET addrs = excluded.addrs, seen_at = excluded.seen_at",
        )
        .bind(id)
        .bind(&addrs)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM replicas WHERE seen_at < $1")
            .bind(now - FORGET_AFTER_MS)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every replica's row. A row whose addresses do not parse is skipped.
    pub async fn replicas(&self) -> Result<Vec<ReplicaRow>, StoreError> {
        let rows = sqlx::query("SELECT id, addrs, seen_at FROM replicas").fetch_all(&self.pool).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let addrs: String = r.try_get(1)?;
            let Ok(addrs) = serde_json::from_str::<Vec<String>>(&addrs) else { continue };
            out.push(ReplicaRow { id: r.try_get(0)?, addrs, seen_at: r.try_get(2)? });
        }
        Ok(out)
    }

    /// Removes this replica's row (a clean shutdown leaves `/ss` at once).
    pub async fn remove_replica(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM replicas WHERE id = $1").bind(id).execute(&self.pool).await?;
        Ok(())
    }
}
