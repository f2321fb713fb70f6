use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

use crate::StoreError;

/// Declares the stored kinds from one list: the enum, [`Kind::ALL`] (in the list's order) and
/// each kind's stored name ([`Kind::as_str`]).
macro_rules! stored_kinds {
    ($(#[$meta:meta])* pub enum Kind { $($(#[$doc:meta])* $kind:ident => $stored:literal),+ $(,)? }) => {
        $(#[$meta])*
        pub enum Kind {
            $($(#[$doc])* $kind),+
        }

        impl Kind {
            pub const ALL: [Kind; [$($stored),+].len()] = [$(Kind::$kind),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$kind => $stored),+
                }
            }
        }
    };
}

stored_kinds! {
    /// The kinds of stored resources. Adding a kind needs no migration, but it does need an
    /// entry in `httpdns_catalog::kinds` (where every kind is declared); the enum is exhaustive
    /// so that each `match` over it fails to compile until the new kind is handled.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Kind {
        Network => "network",
        Node => "node",
        Pool => "pool",
        Domain => "domain",
        MirrorRule => "mirror_rule",
        Account => "account",
        /// Image styles of the mirror (`x-oss-process=style/<name>`).
        ImageStyle => "image_style",
    }
}

impl FromStr for Kind {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s).ok_or(())
    }
}

/// A stored resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub kind: Kind,
    pub name: String,
    /// The JSON body as written by the admin API (already validated).
    pub body: String,
    pub revision: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_at: i64,
}

/// One change after a revision: a resource written, or deleted (`body` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: Kind,
    pub name: String,
    pub body: Option<String>,
    pub revision: i64,
}

/// The outcome of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub revision: i64,
    /// True when the resource did not exist before.
    pub created: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// A handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    url: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: never print it.
        f.debug_struct("Store").field("backend", &self.backend).finish_non_exhaustive()
    }
}

/// One set for both backends: the schema uses only SQL that SQLite and PostgreSQL share.
static MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// What a conditional write expects of the stored resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Write whatever is stored.
    None,
    /// The resource must not exist (`If-None-Match: *`).
    Absent,
    /// The resource must exist at this revision (`If-Match: "N"`).
    Revision(i64),
}

impl Store {
    /// Connects to `url` (`sqlite://PATH` or `postgres://...`) and applies the migrations.
    /// A SQLite file and its directory are created when missing.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let store = Self::open(url).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Connects to `url` without migrating: a backup reads the database as it is.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_owned()));
        };
        let url = match backend {
            Backend::Sqlite => prepare_sqlite_url(url)?,
            Backend::Postgres => url.to_owned(),
        };
        let options = AnyPoolOptions::new()
            .max_connections(match backend {
                // SQLite has one writer; a few readers are plenty for the admin API and sync.
                Backend::Sqlite => 4,
                Backend::Postgres => 8,
            })
            .acquire_timeout(Duration::from_secs(5));
        let options = match backend {
            Backend::Sqlite => options.after_connect(|conn, _meta| {
                Box::pin(async move {
                    // WAL lets the sync loop read while the admin API writes; the busy
                    // timeout makes concurrent writers queue instead of failing.
                    sqlx::query("PRAGMA journal_mode = WAL").execute(&mut *conn).await?;
                    sqlx::query("PRAGMA busy_timeout = 5000").execute(&mut *conn).await?;
                    sqlx::query("PRAGMA synchronous = FULL").execute(&mut *conn).await?;
                    Ok(())
                })
            }),
            Backend::Postgres => options,
        };
        let pool = options.connect(&url).await?;
        Ok(Self { pool, backend, url })
    }

    /// Applies pending migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATIONS.run(&self.pool).await?;
        Ok(())
    }

    /// "sqlite" or "postgres", for logs and `/readyz`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// The underlying pool, for the stores of other features that share this database.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The PostgreSQL URL, for a `LISTEN` connection; `None` on SQLite, where every writer is
    /// this process.
    pub fn postgres_url(&self) -> Option<&str> {
        (self.backend == Backend::Postgres).then_some(self.url.as_str())
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The latest revision.
    pub async fn revision(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT revision FROM store_meta WHERE id = 1").fetch_one(&self.pool).await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    /// Creates or replaces a resource, atomically with its revision.
    pub async fn put(&self, kind: Kind, name: &str, body: &str) -> Result<Written, StoreError> {
        self.put_if(kind, name, body, Precondition::None).await
    }

    /// [`Store::put`] if `pre` holds for the stored resource, checked in the write's own
    /// transaction (so two editors cannot both win); else [`StoreError::Precondition`] with
    /// the current revision, and nothing is written.
    pub async fn put_if(
        &self,
        kind: Kind,
        name: &str,
        body: &str,
        pre: Precondition,
    ) -> Result<Written, StoreError> {
        let mut tx = self.pool.begin().await?;
        let revision = next_revision(&mut tx).await?;
        let existing = sqlx::query("SELECT body, revision FROM resources WHERE kind = $1 AND name = $2")
            .bind(kind.as_str())
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let current = match existing {
            None => None,
            Some(row) => {
                row.try_get::<Option<String>, _>(0)?.map(|_| row.try_get::<i64, _>(1)).transpose()?
            }
        };
        let created = current.is_none();
        let holds = match pre {
            Precondition::None => true,
            Precondition::Absent => current.is_none(),
            Precondition::Revision(r) => current == Some(r),
        };
        if !holds {
            return Err(StoreError::Precondition { current });
        }
        sqlx::query(
            "INSERT INTO resources (kind, name, body, revision, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (kind, name) DO UPDATE SET body = excluded.body, revision = excluded.revision, \
             updated_at = excluded.updated_at",
        )
        .bind(kind.as_str())
        .bind(name)
        .bind(body)
        .bind(revision)
        .bind(httpdns_core::clock::unix_ms() as i64)
        .execute(&mut *tx)
        .await?;
        notify(self, &mut tx).await?;
        tx.commit().await?;
        Ok(Written { revision, created })
    }

    /// Deletes a resource. Returns the new revision, or `None` when it did not exist (and
    /// nothing was written).
    pub async fn delete(&self, kind: Kind, name: &str) -> Result<Option<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let revision = next_revision(&mut tx).await?;
        let done = sqlx::query(
            "UPDATE resources SET body = NULL, revision = $1, updated_at = $2 \
             WHERE kind = $3 AND name = $4 AND body IS NOT NULL",
        )
        .bind(revision)
        .bind(httpdns_core::clock::unix_ms() as i64)
        .bind(kind.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        notify(self, &mut tx).await?;
        tx.commit().await?;
        Ok(Some(revision))
    }

    /// Reads one resource.
    pub async fn get(&self, kind: Kind, name: &str) -> Result<Option<Resource>, StoreError> {
        let row = sqlx::query(
            "SELECT name, body, revision, updated_at FROM resources \
             WHERE kind = $1 AND name = $2 AND body IS NOT NULL",
        )
        .bind(kind.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| resource(kind, &r)).transpose()
    }

    /// Lists the resources of a kind by name, at most `limit` of them after `after` (keyset
    /// paging, so pages stay stable while others write).
    pub async fn list(
        &self,
        kind: Kind,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Resource>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, body, revision, updated_at FROM resources \
             WHERE kind = $1 AND body IS NOT NULL AND name > $2 ORDER BY name LIMIT $3",
        )
        .bind(kind.as_str())
        .bind(after.unwrap_or(""))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| resource(kind, r)).collect()
    }

    /// [`Store::list`] of the resources whose name or stored body contains `text` (a plain
    /// substring: `%` and `_` match themselves). For the console's filter over large lists.
    pub async fn list_matching(
        &self,
        kind: Kind,
        after: Option<&str>,
        limit: i64,
        text: &str,
    ) -> Result<Vec<Resource>, StoreError> {
        // `!` as the escape character: a backslash literal reads differently on PostgreSQL
        // without standard_conforming_strings.
        let escaped = text.replace('!', "!!").replace('%', "!%").replace('_', "!_");
        let rows = sqlx::query(
            "SELECT name, body, revision, updated_at FROM resources \
             WHERE kind = $1 AND body IS NOT NULL AND name > $2 \
             AND (name LIKE $4 ESCAPE '!' OR body LIKE $4 ESCAPE '!') ORDER BY name LIMIT $3",
        )
        .bind(kind.as_str())
        .bind(after.unwrap_or(""))
        .bind(limit)
        .bind(format!("%{escaped}%"))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| resource(kind, r)).collect()
    }

    /// Every change after `revision`, in revision order, and the store revision they lead to.
    /// Kinds this build does not know (written by a newer replica) are skipped.
    pub async fn changes_since(&self, revision: i64) -> Result<(i64, Vec<Change>), StoreError> {
        // One transaction, so the revision and the rows are the same point in time. On
        // PostgreSQL a READ COMMITTED statement could otherwise see a commit the other did not.
        let mut tx = self.pool.begin().await?;
        if self.backend == Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .execute(&mut *tx)
                .await?;
        }
        let current: i64 = sqlx::query("SELECT revision FROM store_meta WHERE id = 1")
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        let rows = sqlx::query(
            "SELECT kind, name, body, revision FROM resources WHERE revision > $1 ORDER BY revision",
        )
        .bind(revision)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut changes = Vec::with_capacity(rows.len());
        for row in rows {
            let kind: String = row.try_get(0)?;
            let Ok(kind) = kind.parse::<Kind>() else {
                continue;
            };
            changes.push(Change {
                kind,
                name: row.try_get(1)?,
                body: row.try_get(2)?,
                revision: row.try_get(3)?,
            });
        }
        Ok((current, changes))
    }
}

pub(crate) async fn next_revision(tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<i64, StoreError> {
    let row = sqlx::query("UPDATE store_meta SET revision = revision + 1 WHERE id = 1 RETURNING revision")
        .fetch_one(&mut **tx)
        .await?;
    Ok(row.try_get::<i64, _>(0)?)
}

/// The PostgreSQL channel on which every committed write is announced, so replicas sync at
/// once instead of at their next poll.
pub const NOTIFY_CHANNEL: &str = "httpdns_changes";

/// Announces the transaction's write on commit (PostgreSQL delivers `NOTIFY` only if, and
/// when, the transaction commits). A no-op on SQLite.
pub(crate) async fn notify(
    store: &Store,
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
) -> Result<(), StoreError> {
    if store.backend == Backend::Postgres {
        sqlx::query("SELECT pg_notify($1, '')").bind(NOTIFY_CHANNEL).execute(&mut **tx).await?;
    }
    Ok(())
}

fn resource(kind: Kind, row: &AnyRow) -> Result<Resource, StoreError> {
    Ok(Resource {
        kind,
        name: row.try_get(0)?,
        body: row.try_get(1)?,
        revision: row.try_get(2)?,
        updated_at: row.try_get(3)?,
    })
}

/// Makes sure the directory of a SQLite file exists and asks SQLite to create the file.
fn prepare_sqlite_url(url: &str) -> Result<String, StoreError> {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" {
        return Ok(url.to_owned());
    }
    if let Some(dir) = Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|source| StoreError::Io { path: dir.display().to_string(), source })?;
    }
    let query = if query.is_empty() {
        "mode=rwc".to_owned()
    } else if query.contains("mode=") {
        query.to_owned()
    } else {
        format!("{query}&mode=rwc")
    };
    Ok(format!("sqlite://{path}?{query}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_get_create_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/db.sqlite");
        let url = prepare_sqlite_url(&format!("sqlite://{}", path.display())).unwrap();
        assert!(url.ends_with("?mode=rwc"), "{url}");
        assert!(path.parent().unwrap().is_dir());
        assert_eq!(prepare_sqlite_url("sqlite::memory:").unwrap(), "sqlite::memory:");
    }
}
