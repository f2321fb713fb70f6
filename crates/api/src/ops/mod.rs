//! The operations product: `/healthz`, `/readyz`, `/metrics` and `/openapi.json`, and the JSON
//! `404` of a path no product routes. [`router`] is handed [`OpsState`], what these handlers
//! read and nothing else.

pub mod state;

use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::error::ApiError;
use crate::health;
use state::OpsState;

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
