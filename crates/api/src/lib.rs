//! The HTTP API listener: HTTPDNS (`/d`, `/resolve`), the admin API, metrics and health.
//!
//! # Layout
//!
//! * [`router`]: builds the axum `Router` from an [`AppState`]; [`app`] adds the
//!   [`shortcut`] that answers `GET /d` and the config GET before it.
//! * The model it answers from is `httpdns_catalog`'s: this crate is the HTTP edge over it.
//! * [`dnspod`]: `/d`, the DNSPod text format; [`resolve`]: `/resolve`, Alibaba JSON;
//!   `v2`: `/v2/d`, Alibaba's v2 API; [`service_ips`]: `/ss`, `/{account}/ss` and `/conf`,
//!   the service-IP lists clients bootstrap from.
//! * [`admin`]: `/admin/v1/...` resources over one generic set of handlers.
//! * [`metrics`], [`health`]: Prometheus metrics, `/healthz`, `/readyz`.
//! * [`error`]: [`ApiError`], the JSON error of this layer.
//!
//! # Invariant
//!
//! Answer handlers read only the current snapshot (an `ArcSwap` load) and the GeoIP readers;
//! they never await the database.

pub mod admin;
mod answer;
pub mod config_center;
pub mod console;
pub mod dnspod;
mod doh;
pub mod error;
pub mod events;
mod form;
mod health;
pub mod live;
pub mod metrics;
pub mod openapi;
mod query;
pub mod ratelimit;
pub mod request_id;
pub mod resolve;
pub mod service_ips;
pub mod shortcut;
pub mod state;
mod v2;
pub mod vendor_switches;

use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

pub use error::ApiError;
pub use state::{ApiSettings, AppState};

/// The API router with every route and layer, `/metrics` included.
pub fn router(state: AppState) -> Router {
    router_with(state, true)
}

/// What the API listeners serve: [`router_with`] behind the [`shortcut`] for the hot GETs.
pub fn app(state: AppState, public_metrics: bool) -> httpdns_net::http::App {
    httpdns_net::http::App {
        router: router_with(state.clone(), public_metrics),
        shortcut: Some(std::sync::Arc::new(shortcut::HotRoutes(state))),
    }
}

/// A router of `/metrics` alone, for a metrics listener of its own.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(health::metrics))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// The API router; `/metrics` only when `public_metrics` (a metrics listener of its own
/// keeps rule names and counters off the public listener).
pub fn router_with(state: AppState, public_metrics: bool) -> Router {
    let admin =
        admin::routes().route_layer(middleware::from_fn_with_state(state.clone(), admin::require_token));
    // `/d`, `/resolve` and the app config routes record their own request metrics: a generic middleware boxes and
    // clones the inner service per request, a cost the answer path does not pay.
    let mut tracked =
        Router::new().route("/healthz", get(health::healthz)).route("/readyz", get(health::readyz));
    if public_metrics {
        tracked = tracked.route("/metrics", get(health::metrics));
    }
    let tracked = tracked
        .route("/openapi.json", get(openapi::handle))
        .route("/feedback", axum::routing::post(live::feedback::handle))
        .route("/app/events", axum::routing::post(events::intake::handle))
        .merge(admin)
        .merge(console::routes())
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), track));
    Router::new()
        .route("/d", any(dnspod::handle))
        .route("/resolve", any(resolve::handle))
        .route("/dns-query", any(doh::handle))
        .route("/v2/d", any(v2::handle))
        .route("/ss", any(service_ips::plain))
        .route("/conf", any(service_ips::conf))
        .route("/{account}/{api}", any(resolve::account))
        .merge(config_center::app_routes())
        .merge(tracked)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found() -> Response {
    ApiError::not_found("no such endpoint").into_response()
}

/// The JSON error of a path that exists with other methods (axum adds `Allow`).
async fn method_not_allowed(method: Method) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("{method} is not allowed here; the Allow header lists what is"),
    )
    .into_response()
}

/// Counts a request by route (a fixed set, never the raw path) and status class.
async fn track(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = metrics::Route::of_path(req.uri().path());
    let resp = request_id::run(req, next).await;
    app.metrics.http_request(route, resp.status(), started.elapsed());
    resp
}
