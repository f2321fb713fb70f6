//! The state of the httpdns product's handlers (`/d`, `/resolve`, `/v2/d`, `/ss`, `/conf`, the
//! account routes, `/dns-query`): a cheap clone of `Arc`s. The other products have slices of
//! their own (`apps::state::AppsState`, `admin::state::AdminState`,
//! `console::ConsoleState`, `ops::state::OpsState`); [`PeerAddr`] works with any state that names its trusted proxies.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use httpdns_geo::Geo;

use httpdns_core::cidr::CidrTable;

use crate::dnspod::format::FormatOptions;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;
use httpdns_catalog::Catalog;

/// Settings of the API listener that handlers read.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    pub dnspod: FormatOptions,
    /// Only authenticated requests are answered: `/d` needs `id=` (DES/AES), and Alibaba's
    /// account API only its signed endpoints.
    pub auth_required: bool,
    /// Proxies whose `X-Forwarded-For` / `X-Real-IP` are believed. Empty: none.
    pub trusted_proxies: CidrTable<()>,
    /// Requests per second and burst allowed to one client address on the unauthenticated
    /// endpoints (`/d`, `/resolve`, `/dns-query`). `None`: no per-address limit, the default,
    /// because carrier-grade NAT puts many users behind one address; accounts have their own.
    pub client_rate_limit: Option<(f64, f64)>,
}

/// Shared state of the API router: one `Arc`, since axum clones the state for every request.
#[derive(Clone, Debug)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] points at.
#[derive(Debug)]
pub struct Shared {
    pub catalog: Arc<Catalog>,
    pub geo: Arc<Geo>,
    /// Resolution of names that are not managed here.
    pub upstream: Arc<httpdns_dns::upstream::Upstream>,
    pub metrics: Arc<Metrics>,
    pub settings: ApiSettings,
    /// The replicas' public entry points (`/ss`, `/conf`).
    pub service_ips: Arc<crate::service_ips::ServiceIps>,
    /// Per-account request limits (`rate_limit_qps`), shared with the signed app endpoints.
    pub account_limits: Arc<RateLimiter<u32>>,
    /// Per-address limits of unauthenticated calls ([`ApiSettings::client_rate_limit`]).
    pub client_limits: RateLimiter<IpAddr>,
    /// Per-address budget of wrong `token=` tries ([`TOKEN_MISSES_PER_MINUTE`]): a numeric
    /// Tencent token has few digits, so guessing must stay slow.
    pub token_misses: RateLimiter<IpAddr>,
}

/// Wrong `token=` tries an address may make per minute (and at once); past them, its token
/// requests are refused unread until the budget refills.
pub const TOKEN_MISSES_PER_MINUTE: f64 = 10.0;

impl Shared {
    /// The token-miss limiter at [`TOKEN_MISSES_PER_MINUTE`].
    pub fn token_miss_limiter() -> RateLimiter<IpAddr> {
        RateLimiter::new(TOKEN_MISSES_PER_MINUTE / 60.0, TOKEN_MISSES_PER_MINUTE)
    }
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

/// A state whose handlers take [`PeerAddr`]: it names the proxies whose forwarded addresses
/// are believed.
pub trait TrustedProxies {
    fn trusted_proxies(&self) -> &CidrTable<()>;
}

impl TrustedProxies for AppState {
    fn trusted_proxies(&self) -> &CidrTable<()> {
        &self.settings.trusted_proxies
    }
}

impl<S: TrustedProxies + Send + Sync> FromRequestParts<S> for PeerAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip().to_canonical());
        Ok(PeerAddr(client_address(peer, &parts.headers, state.trusted_proxies())))
    }
}

/// The client behind trusted proxies: walking `X-Forwarded-For` from the right (the entries
/// the nearest proxies appended), the first address that is not itself a trusted proxy; else
/// `X-Real-IP`. Headers from an untrusted peer are ignored: anyone can send them.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &CidrTable<()>) -> IpAddr {
    if trusted.is_empty() || trusted.lookup(peer).is_none() {
        return peer;
    }
    let forwarded: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
        .map(|a| a.to_canonical())
        .collect();
    if let Some(client) = forwarded.iter().rev().find(|a| trusted.lookup(**a).is_none()) {
        return *client;
    }
    headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<IpAddr>().ok())
        .map_or(peer, |a| a.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn forwarded_addresses_only_from_trusted_proxies() {
        let trusted =
            CidrTable::new([("10.0.0.0/8".parse().unwrap(), ()), ("192.168.1.1/32".parse().unwrap(), ())]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let xff = headers(&[("x-forwarded-for", "1.2.3.4, 5.6.7.8, 192.168.1.1")]);
        assert_eq!(client_address(ip("10.1.1.1"), &xff, &trusted), ip("5.6.7.8"), "rightmost untrusted");
        assert_eq!(client_address(ip("8.8.8.8"), &xff, &trusted), ip("8.8.8.8"), "untrusted peer");
        let real = headers(&[("x-real-ip", "9.9.9.9")]);
        assert_eq!(client_address(ip("10.1.1.1"), &real, &trusted), ip("9.9.9.9"));
        let garbage = headers(&[("x-forwarded-for", "nonsense")]);
        assert_eq!(client_address(ip("10.1.1.1"), &garbage, &trusted), ip("10.1.1.1"));
        assert_eq!(
            client_address(ip("10.1.1.1"), &xff, &CidrTable::default()),
            ip("10.1.1.1"),
            "none trusted"
        );
    }
}
