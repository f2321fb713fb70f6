//! Who may change what, and what was changed: named admin tokens and the audit log.
//!
//! Tokens are stored by the SHA-256 of their secret; the guard looks a presented bearer token
//! up by that hash on every admin request, so a revoked token stops working on every replica
//! at once. The audit log is append-only and numbered by its own counter row (`audit_meta`),
//! so entries page by `seq` in the order they were written; any part of the server (the admin
//! guard, the policy controller, rollouts) appends through [`Store::audit_append`].

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::{Store, StoreError};

/// A named token as stored (its secret is not: only its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub name: String,
    /// `viewer`, `operator` or `admin`.
    pub role: String,
    /// Hex SHA-256 of the secret.
    pub token_sha256: String,
    pub created_by: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// One change to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// A token's name, `admin` (the bootstrap token), `controller` or `rollout`.
    pub actor: String,
    pub method: String,
    pub path: String,
    /// The store revision, or for a config module its version, before and after the change.
    pub revision_before: Option<i64>,
    pub revision_after: Option<i64>,
    /// The HTTP status the change was answered with (automatic changes record 200).
    pub status: u16,
    /// Why, or through what (`console`, a user agent, a rollout's reason).
    pub detail: String,
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub seq: i64,
    /// Milliseconds since the Unix epoch.
    pub at: i64,
    pub entry: AuditEntry,
}

fn token_row(r: &AnyRow) -> Result<TokenRow, StoreError> {
    Ok(TokenRow {
        name: r.try_get(0)?,
        role: r.try_get(1)?,
        token_sha256: r.try_get(2)?,
        created_by: r.try_get(3)?,
        created_at: r.try_get(4)?,
    })
}

fn audit_row(r: &AnyRow) -> Result<AuditRecord, StoreError> {
    let status: i64 = r.try_get(7)?;
    Ok(AuditRecord {
        seq: r.try_get(0)?,
        at: r.try_get(1)?,
        entry: AuditEntry {
            actor: r.try_get(2)?,
            method: r.try_get(3)?,
            path: r.try_get(4)?,
            revision_before: r.try_get(5)?,
            revision_after: r.try_get(6)?,
            status: u16::try_from(status).unwrap_or(0),
            detail: r.try_get(8)?,
        },
    })
}

// Macros, not consts: sqlx takes only static query text, which `concat!` keeps.
macro_rules! token_columns {
    () => {
        "name, role, token_sha256, created_by, created_at"
    };
}
macro_rules! audit_columns {
    () => {
        "seq, at, actor, method, path, revision_before, revision_after, status, detail"
    };
}

impl Store {
    /// Creates or replaces the token `name` (a replaced token's old secret stops working).
    /// Returns whether it existed before.
    pub async fn token_put(
        &self,
        name: &str,
        role: &str,
        token_sha256: &str,
        created_by: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let existed = sqlx::query("DELETE FROM admin_tokens WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            > 0;
        sqlx::query(
            "INSERT INTO admin_tokens (name, role, token_sha256, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(name)
        .bind(role)
        .bind(token_sha256)
        .bind(created_by)
        .bind(httpdns_core::clock::unix_ms() as i64)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(existed)
    }

    /// Revokes the token `name`; false when there was none.
    pub async fn token_delete(&self, name: &str) -> Result<bool, StoreError> {
        let done =
            sqlx::query("DELETE FROM admin_tokens WHERE name = $1").bind(name).execute(&self.pool).await?;
        Ok(done.rows_affected() > 0)
    }

    /// Every token, by name.
    pub async fn token_list(&self) -> Result<Vec<TokenRow>, StoreError> {
        let rows = sqlx::query(concat!("SELECT ", token_columns!(), " FROM admin_tokens ORDER BY name"))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(token_row).collect()
    }

    /// The token whose secret hashes to `token_sha256`.
    pub async fn token_by_hash(&self, token_sha256: &str) -> Result<Option<TokenRow>, StoreError> {
        let row =
            sqlx::query(concat!("SELECT ", token_columns!(), " FROM admin_tokens WHERE token_sha256 = $1"))
                .bind(token_sha256)
                .fetch_optional(&self.pool)
                .await?;
        row.as_ref().map(token_row).transpose()
    }

    /// The token named `name`.
    pub async fn token_by_name(&self, name: &str) -> Result<Option<TokenRow>, StoreError> {
        let row = sqlx::query(concat!("SELECT ", token_columns!(), " FROM admin_tokens WHERE name = $1"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(token_row).transpose()
    }

    /// Appends an entry; returns its `seq`. One transaction: the counter and the row together.
    pub async fn audit_append(&self, e: &AuditEntry) -> Result<i64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let seq: i64 = sqlx::query("UPDATE audit_meta SET seq = seq + 1 WHERE id = 1 RETURNING seq")
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        sqlx::query(concat!(
            "INSERT INTO audit_log (",
            audit_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(seq)
        .bind(httpdns_core::clock::unix_ms() as i64)
        .bind(&e.actor)
        .bind(&e.method)
        .bind(&e.path)
        .bind(e.revision_before)
        .bind(e.revision_after)
        .bind(i64::from(e.status))
        .bind(&e.detail)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(seq)
    }

    /// At most `limit` entries after `after`, oldest first.
    pub async fn audit_after(&self, after: i64, limit: i64) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            audit_columns!(),
            " FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT $2"
        ))
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(audit_row).collect()
    }

    /// At most `limit` entries before `before`, newest first.
    pub async fn audit_before(&self, before: i64, limit: i64) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            audit_columns!(),
            " FROM audit_log WHERE seq < $1 ORDER BY seq DESC LIMIT $2"
        ))
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(audit_row).collect()
    }
}
