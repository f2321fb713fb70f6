//! Who is asking, for any router state that knows its trusted proxies: the [`PeerAddr`]
//! extractor and [`is_secure`], over `httpdns_guard`'s rules. A leaf: every product's state
//! implements [`TrustsProxies`], none is named here.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use httpdns_core::cidr::CidrTable;

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
