//! The HTTP edge: every route of the API listener, one router per product, each handed only
//! its slice of state by `server`.
//!
//! # Layout
//!
//! * [`httpdns`]: the httpdns product's router over its slice ([`httpdns::HttpdnsState`]):
//!   [`dnspod`] `/d`, the DNSPod text format; [`resolve`] `/resolve`, Alibaba JSON; [`v2`]
//!   `/v2/d`; [`doh`] `/dns-query`; `/ss`, `/{account}/ss` and `/conf` ([`httpdns`]'s
//!   `bootstrap`, over [`service_ips`], the replica list). They parse, guard
//!   (`httpdns_guard`), ask the engine (`httpdns_answer`) and format.
//! * [`apps`]: the app-facing product over `apps::state::AppsState`: the config center
//!   (`/app/config-center/...`, over `httpdns-center`), client events (`POST /app/events`, over
//!   `httpdns-events`) and `POST /feedback`.
//! * [`admin`]: `/admin/v1/...` over `admin::state::AdminState`, behind its one guard.
//! * [`console`]: `/console` over `console::ConsoleState`.
//! * [`ops`]: `/healthz`, `/readyz`, `/metrics`, `/openapi.json` and the `404` fallback over
//!   `ops::state::OpsState`.
//! * [`Products`] holds the slices; [`router_with`] merges the routers; [`app`] adds the
//!   [`shortcut`] that answers `GET /d` and the config GET before them.
//! * [`error`]: [`ApiError`], the JSON error of this layer.
//!
//! # Invariant
//!
//! Answer handlers read only the current snapshot (an `ArcSwap` load) and the GeoIP readers;
//! they never await the database.

pub mod admin;
pub mod apps;
pub mod config_center;
pub mod console;
pub mod dnspod;
pub mod doh;
pub mod error;
pub mod events;
mod form;
mod health;
pub mod httpdns;
pub mod live;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod peer;
mod query;
pub mod request_id;
pub mod resolve;
pub mod service_ips;
pub mod shortcut;
mod track;
pub mod v2;
pub mod vendor_switches;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

pub use error::ApiError;

/// Every product's slice of state, as `server` builds them.
#[derive(Debug, Clone)]
pub struct Products {
    /// The httpdns product's (`/d`, `/resolve`, `/v2/d`, `/ss`, `/conf`, the account routes,
    /// `/dns-query`).
    pub answers: httpdns::HttpdnsState,
    pub apps: apps::state::AppsState,
    pub admin: admin::state::AdminState,
    pub console: console::ConsoleState,
    pub ops: ops::state::OpsState,
}

/// The API router with every route and layer, `/metrics` included.
pub fn router(products: &Products) -> Router {
    router_with(products, true)
}

/// What the API listeners serve: [`router_with`] behind the [`shortcut`] for the hot GETs.
pub fn app(products: &Products, public_metrics: bool) -> httpdns_net::http::App {
    httpdns_net::http::App {
        router: router_with(products, public_metrics),
        shortcut: Some(std::sync::Arc::new(shortcut::HotRoutes {
            answers: products.answers.clone(),
            apps: products.apps.clone(),
        })),
    }
}

/// A router of `/metrics` alone, for a metrics listener of its own.
pub fn metrics_router(state: ops::state::OpsState) -> Router {
    ops::metrics_router(state)
}

/// The API router: every product's router merged; `/metrics` only when `public_metrics` (a
/// metrics listener of its own keeps rule names and counters off the public listener).
pub fn router_with(products: &Products, public_metrics: bool) -> Router {
    httpdns::router(products.answers.clone())
        .merge(apps::router(products.apps.clone()))
        .merge(admin::router(products.admin.clone()))
        .merge(console::router(products.console.clone()))
        .merge(ops::router(products.ops.clone(), public_metrics))
        .method_not_allowed_fallback(method_not_allowed)
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
