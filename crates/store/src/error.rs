/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("unsupported database URL {0:?}: use sqlite://PATH or postgres://...")]
    UnsupportedUrl(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored {kind} {name:?} is corrupt: {message}")]
    Corrupt { kind: &'static str, name: String, message: String },
    #[error("backup: {0}")]
    Backup(String),
    #[error("the database is not empty (rows in {}): restoring would replace its content; force it to", .0.join(", "))]
    NotEmpty(Vec<String>),
    #[error("the resource is not as expected (current revision {current:?})")]
    Precondition { current: Option<i64> },
    #[error("cannot create the database directory {path}: {source}")]
    Io { path: String, source: std::io::Error },
}
