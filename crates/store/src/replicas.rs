//! The replicas that announce public entry points for Alibaba's `/ss`.
//!
//! Like the live tables, these rows change every few seconds and take no store revision.

use sqlx::Row;

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

impl Store {
    /// Writes this replica's row: its addresses, seen now (by its own clock, which readers
    /// only compare with the value they read before, never with theirs).
    pub async fn replica_heartbeat(&self, id: &str, addrs: &[String]) -> Result<(), StoreError> {
        let addrs = serde_json::to_string(addrs).expect("strings serialise");
        sqlx::query(
            "INSERT INTO replicas (id, addrs, seen_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET addrs = excluded.addrs, seen_at = excluded.seen_at",
        )
        .bind(id)
        .bind(&addrs)
        .bind(httpdns_core::clock::unix_ms() as i64)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Deletes a gone replica's row, if it still holds `seen_at` (a replica that came back
    /// meanwhile keeps its fresh row).
    pub async fn forget_replica(&self, id: &str, seen_at: i64) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM replicas WHERE id = $1 AND seen_at = $2")
            .bind(id)
            .bind(seen_at)
            .execute(&self.pool)
            .await?;
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
