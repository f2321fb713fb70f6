//! The app routes' slice of state: what the config center's app side, the event intake and
//! app feedback read.

use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;

use httpdns_catalog::{Catalog, LiveHub};
use httpdns_center::ConfigCache;
use httpdns_core::cidr::CidrTable;
use httpdns_events::EventHub;
use httpdns_geo::Geo;

use crate::metrics::Metrics;
use crate::peer::TrustsProxies;
use httpdns_guard::RateLimiter;

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
    pub upstream: Arc<httpdns_upstream::Upstream>,
    pub metrics: Arc<Metrics>,
    /// Per-account limits and signatures of signed batches and feedback: the answer routes'
    /// guard.
    pub guard: Arc<httpdns_guard::Guard>,
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

impl TrustsProxies for AppsState {
    fn trusted_proxies(&self) -> &CidrTable<()> {
        &self.trusted_proxies
    }
}
