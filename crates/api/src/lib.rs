//! The HTTP API listener: HTTPDNS (`/d`, `/resolve`), the admin API, metrics and health.
//!
//! # Layout
//!
//! * [`router`]: builds the axum `Router` from an [`AppState`].
//! * [`catalog`]: follows the store and publishes answering snapshots; the only bridge
//!   between the database and the answer path.
//! * [`dnspod`]: `/d`, the DNSPod text format; [`resolve`]: `/resolve`, Alibaba JSON.
//! * [`admin`]: `/admin/v1/...` resources over one generic set of handlers.
//! * [`metrics`], [`health`]: Prometheus metrics, `/healthz`, `/readyz`.
//! * [`error`]: [`ApiError`], the JSON error of this layer.
//!
//! # Invariant
//!
//! Answer handlers read only the current snapshot (an `ArcSwap` load) and the GeoIP readers;
//! they never await the database.

pub mod admin;
pub mod catalog;
pub mod dnspod;
pub mod error;
mod health;
pub mod metrics;
pub mod resolve;
pub mod state;

use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

pub use error::ApiError;
pub use state::{ApiSettings, AppState};

/// The API router with every route and layer.
pub fn router(state: AppState) -> Router {
    let admin = admin::routes().route_layer(middleware::from_fn_with_state(state.clone(), admin::require_token));
    Router::new()
        .route("/d", any(dnspod::handle))
        .route("/resolve", any(resolve::handle))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .merge(admin)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

async fn not_found() -> Response {
    ApiError::not_found("no such endpoint").into_response()
}

/// Counts every request by route template (bounded) and status class.
async fn track(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    // This layer runs before routing, so the route label comes from a fixed mapping of the
    // path, never the raw path itself.
    let route: &'static str = match req.uri().path() {
        "/d" => "/d",
        "/resolve" => "/resolve",
        "/healthz" => "/healthz",
        "/readyz" => "/readyz",
        "/metrics" => "/metrics",
        p if p.starts_with("/admin/") => "/admin",
        _ => "other",
    };
    let resp = next.run(req).await;
    let class = match resp.status().as_u16() {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    app.metrics.http_requests.with_label_values(&[route, class]).inc();
    app.metrics.http_duration.with_label_values(&[route]).observe(started.elapsed().as_secs_f64());
    resp
}
