//! Publishing a version: one store transaction (`Store::config_publish`), then this replica
//! serves it at once; the other replicas load it from the store (at a PostgreSQL `NOTIFY` or
//! their sync timer). A rollback is a publish of an older version's content as a new, higher
//! version: clients keep the larger `configVersion`, so going back must go up.

use httpdns_store::config::{ConfigVersion, Publish, PublishError};

use crate::cache::ConfigCache;

/// Publishes `p` (its change summary from the previous stored document, if any) and reloads
/// this replica's cache. A failed reload is logged: the refresh loop retries it.
pub async fn publish(
    cache: &ConfigCache,
    p: Publish<'_>,
    summary: impl FnOnce(Option<&str>) -> String,
) -> Result<ConfigVersion, PublishError> {
    let module = p.module.to_owned();
    let written = cache.store().config_publish(p, summary).await?;
    if let Err(e) = cache.refresh().await {
        tracing::warn!(error = %e, "Config published but the local refresh failed; the refresh loop will retry.");
    }
    tracing::info!(%module, version = written.version, "Config published.");
    Ok(written)
}
