//! The app-facing product: the config center (`/app/config-center/...`), client events
//! (`POST /app/events`) and app feedback (`POST /feedback`, app-side telemetry like the events).
//! [`router`] is handed [`AppsState`], what these handlers read and nothing else.

use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use httpdns_catalog::{Catalog, LiveHub};
use httpdns_center::ConfigCache;
use httpdns_core::cidr::CidrTable;
use httpdns_events::EventHub;
use httpdns_geo::Geo;

use crate::config_center::{app, push, MODULE_CONFIG_PATH};
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;
use crate::state::TrustedProxies;

/// The app routes' slice of state: one `Arc`, since axum clones the state for every request.
#[derive(Debug, Clone)]
pub struct AppsState(Arc<Apps>);

/// What [`AppsState`] points at.
#[derive(Debug)]
pub struct Apps {
    /// The snapshot: accounts of signed batches, the client's place.
    pub catalog: Arc<Catalog>,
    /// The config documents served.
    pub config: Arc<ConfigCache>,
    pub geo: Arc<Geo>,
    /// App feedback aggregates.
    pub live: Arc<LiveHub>,
    /// Client events and the LocalDNS map.
    pub events: Arc<EventHub>,
    /// The upstream cache a `localdns_compare` is judged against.
    pub upstream: Arc<httpdns_dns::upstream::Upstream>,
    pub metrics: Arc<Metrics>,
    /// Per-account limits of signed batches: the same limiter as the answer routes'.
    pub account_limits: Arc<RateLimiter<u32>>,
    /// Per-address limits of unsigned event batches (`EventSettings::rate_per_client`).
    pub event_limits: RateLimiter<IpAddr>,
    /// Per-address limits of `POST /feedback` (`LiveSettings::feedback_rate`).
    pub feedback_limits: RateLimiter<IpAddr>,
    /// Proxies whose forwarded addresses are believed.
    pub trusted_proxies: CidrTable<()>,
    /// Only signed batches are taken.
    pub auth_required: bool,
    /// Private and loopback addresses count as servable in a LocalDNS verdict.
    pub allow_private_node_ips: bool,
}

impl AppsState {
    pub fn new(apps: Apps) -> Self {
        Self(Arc::new(apps))
    }
}

impl Deref for AppsState {
    type Target = Apps;
    fn deref(&self) -> &Apps {
        &self.0
    }
}

impl TrustedProxies for AppsState {
    fn trusted_proxies(&self) -> &CidrTable<()> {
        &self.trusted_proxies
    }
}

/// The app routes. The config center's count their own requests (the config GET is a hot
/// path); events and feedback are counted, and given a request id, by the `track` layer.
pub fn router(state: AppsState) -> Router {
    let tracked = Router::new()
        .route("/feedback", post(crate::live::feedback::handle))
        .route("/app/events", post(crate::events::intake::handle));
    Router::new()
        .route(MODULE_CONFIG_PATH, post(app::post).get(push::get))
        .route("/app/config-center/public-key", get(app::public_key))
        .merge(crate::track::layer(tracked, state.metrics.clone()))
        .with_state(state)
}
