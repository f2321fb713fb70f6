//! The operations product: `/healthz`, `/readyz`, `/metrics` and `/openapi.json`, and the JSON
//! `404` of a path no product routes. [`router`] is handed [`OpsState`], what these handlers
//! read and nothing else.

use std::ops::Deref;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use httpdns_catalog::Catalog;
use httpdns_geo::Geo;

use crate::error::ApiError;
use crate::health;
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
    pub upstream: Arc<httpdns_dns::upstream::Upstream>,
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

/// The ops routes, tracked, with the listener's fallback (`404`, JSON); `/metrics` only when
/// `public_metrics` (a metrics listener of its own keeps rule names and counters off the public
/// listener).
pub fn router(state: OpsState, public_metrics: bool) -> Router {
    let mut router =
        Router::new().route("/healthz", get(health::healthz)).route("/readyz", get(health::readyz));
    if public_metrics {
        router = router.route("/metrics", get(health::metrics));
    }
    let router = router.route("/openapi.json", get(crate::openapi::handle)).fallback(not_found);
    crate::track::layer(router, state.metrics.clone()).with_state(state)
}

/// A router of `/metrics` alone, for a metrics listener of its own.
pub fn metrics_router(state: OpsState) -> Router {
    let router = Router::new().route("/metrics", get(health::metrics)).fallback(not_found);
    crate::track::layer(router, state.metrics.clone()).with_state(state)
}

async fn not_found() -> Response {
    ApiError::not_found("no such endpoint").into_response()
}
