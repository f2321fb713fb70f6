//! [`HttpdnsState`]: what the httpdns routes use, and nothing else.

use std::sync::Arc;

use httpdns_answer::Engine;
use httpdns_catalog::Catalog;
use httpdns_core::cidr::CidrTable;
use httpdns_guard::Guard;

use crate::dnspod::format::FormatOptions;
use crate::metrics::Metrics;
use crate::peer::TrustsProxies;
use crate::service_ips::ServiceIps;

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
