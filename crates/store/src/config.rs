//! The config center's tables: modules and their append-only versions.
//!
//! A publish is one transaction that first takes the store revision (serialising writers on
//! both backends, see the crate docs), then checks the caller's precondition against the
//! module's current version and appends the next version. Concurrent publishers with the same
//! precondition therefore get exactly one success; the others see the new version and fail the
//! precondition. The primary key `(module, version)` makes two documents with one version
//! impossible even if that logic were wrong.

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::resources::{next_revision, notify};
use crate::{Store, StoreError};

/// What the publisher expects the current version to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// No precondition given: allowed only to create a module that does not exist.
    Nothing,
    /// `If-Match: *`: publish whatever the current version is.
    Any,
    /// `If-Match: "N"`: the current version must be `N` (`0`: the module must not exist).
    Version(i64),
    /// `If-Match: "N", "M", ...` (RFC 9110 §13.1.1: a list matches when one of its entity
    /// tags does): the current version must be one of these. Empty: nothing matches (a
    /// header with no strong tag of a version).
    OneOf(Vec<i64>),
}

impl Expect {
    /// Whether a publish may go ahead when the module's current version is `current`
    /// (`None`: the module does not exist).
    pub fn check(&self, current: Option<i64>) -> Result<(), PublishError> {
        let names = |v: i64| match self {
            Expect::Version(n) => *n == v,
            Expect::OneOf(list) => list.contains(&v),
            Expect::Nothing | Expect::Any => true,
        };
        match (current, self) {
            (None, Expect::Nothing | Expect::Any) => Ok(()),
            (None, _) if names(0) => Ok(()),
            (None, _) => Err(PublishError::Precondition { current: None }),
            (Some(c), Expect::Nothing) => Err(PublishError::PreconditionRequired { current: c }),
            (Some(c), _) if !names(c) => Err(PublishError::Precondition { current: Some(c) }),
            (Some(_), _) => Ok(()),
        }
    }
}

/// Why a publish was refused.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("the module's current version is {current:?}, not the expected one")]
    Precondition { current: Option<i64> },
    #[error("the module exists: replacing it requires If-Match with its current version")]
    PreconditionRequired { current: i64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for PublishError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(StoreError::Database(e))
    }
}

/// One stored version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigVersion {
    pub module: String,
    pub version: i64,
    /// The document content as JSON (without its version).
    pub document: String,
    pub author: String,
    pub summary: String,
    /// The version whose content this one republished, for rollbacks.
    pub rollback_of: Option<i64>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// A version's metadata, for history pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInfo {
    pub version: i64,
    pub author: String,
    pub summary: String,
    pub rollback_of: Option<i64>,
    pub created_at: i64,
}

/// What to publish.
#[derive(Debug)]
pub struct Publish<'a> {
    pub module: &'a str,
    pub document: &'a str,
    pub expect: Expect,
    pub author: &'a str,
    pub rollback_of: Option<i64>,
}

fn version_row(module: &str, r: &AnyRow) -> Result<ConfigVersion, StoreError> {
    Ok(ConfigVersion {
        module: module.to_owned(),
        version: r.try_get(0)?,
        document: r.try_get(1)?,
        author: r.try_get(2)?,
        summary: r.try_get(3)?,
        rollback_of: r.try_get(4)?,
        created_at: r.try_get(5)?,
    })
}

impl Store {
    /// Publishes a new version. `summary` gets the current document (none for a new module)
    /// and returns the change summary to store.
    pub async fn config_publish(
        &self,
        p: Publish<'_>,
        summary: impl FnOnce(Option<&str>) -> String,
    ) -> Result<ConfigVersion, PublishError> {
        let mut tx = self.pool.begin().await?;
        next_revision(&mut tx).await?;
        let current: Option<i64> =
            sqlx::query("SELECT current_version FROM config_modules WHERE module = $1")
                .bind(p.module)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| r.try_get(0))
                .transpose()?;
        p.expect.check(current)?;
        let previous: Option<String> = match current {
            Some(c) => Some(
                sqlx::query("SELECT document FROM config_versions WHERE module = $1 AND version = $2")
                    .bind(p.module)
                    .bind(c)
                    .fetch_one(&mut *tx)
                    .await?
                    .try_get(0)?,
            ),
            None => None,
        };
        let summary = summary(previous.as_deref());
        let now = httpdns_core::clock::unix_ms() as i64;
        let version = match current {
            None => {
                sqlx::query(
                    "INSERT INTO config_modules (module, current_version, updated_at) VALUES ($1, 1, $2)",
                )
                .bind(p.module)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                1
            }
            Some(c) => {
                let done = sqlx::query(
                    "UPDATE config_modules SET current_version = $1, updated_at = $2 \
                     WHERE module = $3 AND current_version = $4",
                )
                .bind(c + 1)
                .bind(now)
                .bind(p.module)
                .bind(c)
                .execute(&mut *tx)
                .await?;
                if done.rows_affected() != 1 {
                    return Err(PublishError::Precondition { current: Some(c) });
                }
                c + 1
            }
        };
        sqlx::query(
            "INSERT INTO config_versions (module, version, document, author, summary, rollback_of, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(p.module)
        .bind(version)
        .bind(p.document)
        .bind(p.author)
        .bind(&summary)
        .bind(p.rollback_of)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        notify(self, &mut tx).await?;
        tx.commit().await?;
        Ok(ConfigVersion {
            module: p.module.to_owned(),
            version,
            document: p.document.to_owned(),
            author: p.author.to_owned(),
            summary,
            rollback_of: p.rollback_of,
            created_at: now,
        })
    }

    /// The current version of a module.
    pub async fn config_current(&self, module: &str) -> Result<Option<ConfigVersion>, StoreError> {
        let row = sqlx::query(
            "SELECT v.version, v.document, v.author, v.summary, v.rollback_of, v.created_at \
             FROM config_modules m JOIN config_versions v ON v.module = m.module AND v.version = m.current_version \
             WHERE m.module = $1",
        )
        .bind(module)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| version_row(module, &r)).transpose()
    }

    /// One version of a module.
    pub async fn config_version(
        &self,
        module: &str,
        version: i64,
    ) -> Result<Option<ConfigVersion>, StoreError> {
        let row = sqlx::query(
            "SELECT version, document, author, summary, rollback_of, created_at \
             FROM config_versions WHERE module = $1 AND version = $2",
        )
        .bind(module)
        .bind(version)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| version_row(module, &r)).transpose()
    }

    /// Versions of a module, newest first, at most `limit` of them below `before`.
    pub async fn config_history(
        &self,
        module: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<VersionInfo>, StoreError> {
        let rows = sqlx::query(
            "SELECT version, author, summary, rollback_of, created_at FROM config_versions \
             WHERE module = $1 AND version < $2 ORDER BY version DESC LIMIT $3",
        )
        .bind(module)
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(VersionInfo {
                    version: r.try_get(0)?,
                    author: r.try_get(1)?,
                    summary: r.try_get(2)?,
                    rollback_of: r.try_get(3)?,
                    created_at: r.try_get(4)?,
                })
            })
            .collect()
    }

    /// Every module with its current version and last update time.
    pub async fn config_modules(&self) -> Result<Vec<(String, i64, i64)>, StoreError> {
        let rows =
            sqlx::query("SELECT module, current_version, updated_at FROM config_modules ORDER BY module")
                .fetch_all(&self.pool)
                .await?;
        rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))).collect()
    }
}
