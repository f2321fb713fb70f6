//! The httpdns product on the API listener: `/d`, `/resolve`, `/v2/d`, the Alibaba account
//! routes (`/{account}/{api}`), `/ss`, `/conf` and `/dns-query`, with [`HttpdnsState`], the
//! slice of state they use and nothing else.
//!
//! Every answer route reads downhill: parameters ([`crate::dnspod::params`], [`crate::resolve`],
//! [`crate::v2`]) → guards (`httpdns_guard`: client address, authentication, limits) →
//! the engine (`httpdns_answer::Engine`) → the route's formatter. A formatter never calls
//! back into another route's module; what they share (the `X-Httpdns-Status` header) is here.

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use axum::routing::any;
use axum::Router;
use httpdns_answer::{Engine, Outcome};
use httpdns_catalog::Catalog;
use httpdns_core::cidr::CidrTable;
use httpdns_guard::Guard;

use crate::dnspod::format::FormatOptions;
use crate::metrics::Metrics;
use crate::service_ips::ServiceIps;
use crate::state::TrustsProxies;

/// The state of the httpdns routes: a cheap clone of one `Arc`.
#[derive(Clone, Debug)]
pub struct HttpdnsState(Arc<HttpdnsParts>);

/// What [`HttpdnsState`] points at.
#[derive(Debug)]
pub struct HttpdnsParts {
    /// The snapshots answered from (one load per request).
    pub catalog: Arc<Catalog>,
    pub engine: Arc<Engine>,
    pub guard: Arc<Guard>,
    /// The replicas' public entry points (`/ss`, `/conf`) and the vendor switches.
    pub service_ips: Arc<ServiceIps>,
    /// Request counts by route, and the DNS front-ends' series (DoH).
    pub metrics: Arc<Metrics>,
    /// The form of `/d`'s text answers.
    pub dnspod: FormatOptions,
}

impl HttpdnsState {
    pub fn new(parts: HttpdnsParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl std::ops::Deref for HttpdnsState {
    type Target = HttpdnsParts;
    fn deref(&self) -> &HttpdnsParts {
        &self.0
    }
}

impl TrustsProxies for HttpdnsState {
    fn trusted_proxies(&self) -> &CidrTable<()> {
        &self.guard.settings().trusted_proxies
    }
}

/// The httpdns routes. They record their own request metrics: a generic middleware boxes and
/// clones the inner service per request, a cost the answer path does not pay.
pub fn router(state: HttpdnsState) -> Router {
    Router::new()
        .route("/d", any(crate::dnspod::handle))
        .route("/resolve", any(crate::resolve::handle))
        .route("/dns-query", any(crate::doh::handle))
        .route("/v2/d", any(crate::v2::handle))
        .route("/ss", any(crate::service_ips::plain))
        .route("/conf", any(crate::service_ips::conf))
        .route("/{account}/{api}", any(crate::resolve::account))
        .with_state(state)
}

/// Header naming the outcome of each name (a constant: a name given as text is parsed and
/// looked up in the standard-header table on every insert).
pub const STATUS_HEADER: HeaderName = HeaderName::from_static("x-httpdns-status");

/// The `X-Httpdns-Status` value: one outcome per name, comma-separated.
pub fn status_header(outcomes: &[Outcome]) -> HeaderValue {
    match outcomes {
        [one] => HeaderValue::from_static(one.as_str()),
        many => {
            let joined = many.iter().map(|o| o.as_str()).collect::<Vec<_>>().join(",");
            HeaderValue::from_str(&joined).expect("outcome words are valid header text")
        }
    }
}
