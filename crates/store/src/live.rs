//! Node agents' reports and app feedback aggregates.
//!
//! These tables change often (every report, every flush), so writes here do not take a store
//! revision or `NOTIFY`: replicas read them on their live-input refresh instead.

use sqlx::Row;

use crate::{Store, StoreError};

/// The latest report of a node's agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeReport {
    pub load_pct: Option<f64>,
    pub bandwidth_mbps: Option<f64>,
    pub latency_ms: Option<f64>,
    /// Milliseconds since the Unix epoch.
    pub reported_at: i64,
}

/// A saved feedback aggregate.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackRow {
    pub node: String,
    pub isp: String,
    pub region: String,
    pub latency_ms: f64,
    pub success_rate: f64,
    pub clients: i64,
}

impl Store {
    /// Stores reports (node id, report), each replacing the node's previous one, in one
    /// transaction.
    pub async fn put_reports(&self, reports: &[(String, NodeReport)]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for (node, r) in reports {
            sqlx::query(
                "INSERT INTO node_reports (node, load_pct, bandwidth_mbps, latency_ms, reported_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (node) DO UPDATE SET load_pct = excluded.load_pct, \
                 bandwidth_mbps = excluded.bandwidth_mbps, latency_ms = excluded.latency_ms, \
                 reported_at = excluded.reported_at",
            )
            .bind(node)
            .bind(r.load_pct)
            .bind(r.bandwidth_mbps)
            .bind(r.latency_ms)
            .bind(r.reported_at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Reports newer than `since` (ms since the epoch).
    pub async fn reports_since(&self, since: i64) -> Result<Vec<(String, NodeReport)>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, load_pct, bandwidth_mbps, latency_ms, reported_at FROM node_reports WHERE reported_at > $1",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0)?,
                    NodeReport {
                        load_pct: r.try_get(1)?,
                        bandwidth_mbps: r.try_get(2)?,
                        latency_ms: r.try_get(3)?,
                        reported_at: r.try_get(4)?,
                    },
                ))
            })
            .collect()
    }

    /// Saves feedback aggregates, replacing earlier values of the same keys.
    pub async fn save_feedback(&self, rows: &[FeedbackRow]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let now = httpdns_core::clock::unix_ms() as i64;
        for f in rows {
            sqlx::query(
                "INSERT INTO feedback_aggregates (node, isp, region, latency_ms, success_rate, clients, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (node, isp, region) DO UPDATE SET \
                 latency_ms = excluded.latency_ms, success_rate = excluded.success_rate, \
                 clients = excluded.clients, updated_at = excluded.updated_at",
            )
            .bind(&f.node)
            .bind(&f.isp)
            .bind(&f.region)
            .bind(f.latency_ms)
            .bind(f.success_rate)
            .bind(f.clients)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Feedback aggregates saved after `since` (ms since the epoch).
    pub async fn load_feedback(&self, since: i64) -> Result<Vec<FeedbackRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, isp, region, latency_ms, success_rate, clients FROM feedback_aggregates \
             WHERE updated_at > $1",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(FeedbackRow {
                    node: r.try_get(0)?,
                    isp: r.try_get(1)?,
                    region: r.try_get(2)?,
                    latency_ms: r.try_get(3)?,
                    success_rate: r.try_get(4)?,
                    clients: r.try_get(5)?,
                })
            })
            .collect()
    }
}
