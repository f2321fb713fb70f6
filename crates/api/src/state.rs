//! The state every handler shares: a cheap clone of `Arc`s.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use httpdns_geo::Geo;

use httpdns_core::cidr::CidrTable;

use crate::config_center::cache::ConfigCache;
use crate::metrics::Metrics;
use httpdns_catalog::Catalog;
use httpdns_catalog::LiveHub;
use httpdns_guard::{Guard, RateLimiter};

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

/// The client's address: the TCP peer's, or, when the peer is a trusted proxy, the one it
/// forwarded. Without connection info (a router driven directly in a unit test) it is
/// `0.0.0.0`, which classifies as unknown.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub IpAddr);

/// Whether `request` reached us over TLS: on a TLS listener, or from a trusted proxy of
/// `state` that says it terminated TLS (`X-Forwarded-Proto: https`).
pub fn is_secure<S: TrustsProxies>(state: &S, request: &axum::extract::Request) -> bool {
    let tls = request.extensions().get::<httpdns_net::http::Secure>().is_some();
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    httpdns_guard::is_secure(tls, peer, request.headers(), state.trusted_proxies())
}

/// A router state that knows which proxies to believe about the client's address.
pub trait TrustsProxies {
    fn trusted_proxies(&self) -> &CidrTable<()>;
}

impl TrustsProxies for AppState {
    fn trusted_proxies(&self) -> &CidrTable<()> {
        &self.settings.trusted_proxies
    }
}

impl<S: TrustsProxies + Send + Sync> FromRequestParts<S> for PeerAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip().to_canonical());
        Ok(PeerAddr(httpdns_guard::client_address(peer, &parts.headers, state.trusted_proxies())))
    }
}
