//! The ops routes' slice of state.

use std::ops::Deref;
use std::sync::Arc;

use httpdns_catalog::Catalog;
use httpdns_geo::Geo;

use crate::metrics::Metrics;

/// The ops routes' slice of state.
#[derive(Debug, Clone)]
pub struct OpsState(Arc<Ops>);

/// What [`OpsState`] points at.
#[derive(Debug)]
pub struct Ops {
    /// Readiness (the snapshot and the store), the snapshot's age and health counts.
    pub catalog: Arc<Catalog>,
    /// Whether the GeoIP databases are loaded.
    pub geo: Arc<Geo>,
    /// The upstream cache's counters, copied at scrape time.
    pub upstream: Arc<httpdns_upstream::Upstream>,
    pub metrics: Arc<Metrics>,
}

impl OpsState {
    pub fn new(ops: Ops) -> Self {
        Self(Arc::new(ops))
    }
}

impl Deref for OpsState {
    type Target = Ops;
    fn deref(&self) -> &Ops {
        &self.0
    }
}
