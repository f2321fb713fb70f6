//! The state every handler shares: a cheap clone of `Arc`s.

use std::net::IpAddr;
use std::sync::Arc;

use httpdns_geo::Geo;

use httpdns_core::cidr::CidrTable;

use crate::config_center::cache::ConfigCache;
use crate::metrics::Metrics;
use httpdns_catalog::Catalog;
use httpdns_catalog::LiveHub;
use httpdns_guard::{Guard, RateLimiter};

use crate::peer::TrustsProxies;
// Where the other products' handlers import the extractor from (`crate::peer` defines it).
pub use crate::peer::PeerAddr;

/// Settings of the API listener that handlers read.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Bearer token of the admin API.
    pub admin_token: String,
    /// What resource validation allows: private and loopback node addresses (intranet
    /// deployments, tests), mirror origins on this host or its link.
    pub validation: httpdns_catalog::Validation,
    /// Only authenticated requests are answered: `/d` needs `id=` (DES/AES), and Alibaba's
    /// account API only its signed endpoints.
    pub auth_required: bool,
    /// Proxies whose `X-Forwarded-For` / `X-Real-IP` are believed. Empty: none.
    pub trusted_proxies: CidrTable<()>,
}

/// Shared state of the API router: one `Arc`, since axum clones the state for every request.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] points at.
#[derive(Debug)]
pub struct Shared {
    pub catalog: Arc<Catalog>,
    pub config: Arc<ConfigCache>,
    pub geo: Arc<Geo>,
    pub live: Arc<LiveHub>,
    /// Client events and the LocalDNS map.
    pub events: Arc<crate::events::EventHub>,
    /// The admin console's sessions.
    pub console: Arc<crate::console::Console>,
    /// Resolution of names that are not managed here.
    pub upstream: Arc<httpdns_upstream::Upstream>,
    pub metrics: Arc<Metrics>,
    pub settings: ApiSettings,
    /// The mirroring gateway (its admin endpoints live here).
    pub mirror: Arc<httpdns_mirror::Mirror>,
    /// The replicas' public entry points (`/ss`, `/conf`).
    pub service_ips: Arc<crate::service_ips::ServiceIps>,
    /// Per-address limits of `POST /feedback` (`LiveSettings::feedback_rate`).
    pub feedback_limits: RateLimiter<IpAddr>,
    /// The guards of the answer routes, shared with `POST /feedback` (account limits and
    /// signatures).
    pub guard: Arc<Guard>,
    /// The httpdns product's slice ([`crate::httpdns`]), for its router and the shortcut.
    pub httpdns: crate::httpdns::HttpdnsState,
}

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl TrustsProxies for AppState {
    fn trusted_proxies(&self) -> &CidrTable<()> {
        &self.settings.trusted_proxies
    }
}
