//! The state every handler shares: a cheap clone of `Arc`s.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use httpdns_geo::Geo;

use crate::catalog::Catalog;
use crate::config_center::cache::ConfigCache;
use crate::dnspod::format::FormatOptions;
use crate::live::LiveHub;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;

/// Settings of the API listener that handlers read.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Bearer token of the admin API.
    pub admin_token: String,
    /// Accept private and loopback node addresses (intranet deployments, tests).
    pub allow_private_node_ips: bool,
    pub dnspod: FormatOptions,
    /// Only authenticated requests are answered: `/d` needs `id=` (DES/AES), and Alibaba's
    /// account API only its signed endpoints.
    pub auth_required: bool,
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
    pub metrics: Arc<Metrics>,
    pub settings: ApiSettings,
    /// Per-account request limits (`rate_limit_qps`).
    pub account_limits: RateLimiter<u32>,
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

/// The TCP peer's address. Without connection info (a router driven directly in a unit
/// test) it is `0.0.0.0`, which classifies as unknown.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for PeerAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let ip = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip().to_canonical());
        Ok(PeerAddr(ip))
    }
}
