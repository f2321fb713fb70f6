//! The admin API's slice of state: what its handlers and its guard read.

use std::ops::Deref;
use std::sync::Arc;

use httpdns_catalog::Catalog;
use httpdns_center::ConfigCache;
use httpdns_core::cidr::CidrTable;
use httpdns_events::EventHub;
use httpdns_geo::Geo;

use crate::metrics::Metrics;
use crate::peer::TrustsProxies;

/// The admin routes' slice of state: one `Arc`, since axum clones the state for every request.
#[derive(Debug, Clone)]
pub struct AdminState(Arc<Admin>);

/// What [`AdminState`] points at.
#[derive(Debug)]
pub struct Admin {
    /// The model: resources written through the store, read from the snapshot.
    pub catalog: Arc<Catalog>,
    /// The config center: publish, history, rollouts, adoption, the policy's places.
    pub config: Arc<ConfigCache>,
    /// Client events: summaries, series, the LocalDNS map.
    pub events: Arc<EventHub>,
    /// The explanation's classification of a client.
    pub geo: Arc<Geo>,
    /// The mirroring gateway's admin side: purge, objects, prefetch, report.
    pub mirror: Arc<httpdns_mirror::Mirror>,
    /// The overview's upstream cache counters.
    pub upstream: Arc<httpdns_upstream::Upstream>,
    pub metrics: Arc<Metrics>,
    /// The vendor switches `/ss` and `/conf` carry.
    pub service_ips: Arc<crate::service_ips::ServiceIps>,
    /// The console's sessions: the guard's second way in.
    pub console: Arc<crate::console::Console>,
    /// Proxies whose forwarded addresses are believed (the explanation's default client).
    pub trusted_proxies: CidrTable<()>,
    /// Bearer token of the admin API.
    pub admin_token: String,
    /// What resource validation allows: private and loopback node addresses (intranet
    /// deployments, tests), mirror origins on this host or its link.
    pub validation: httpdns_catalog::Validation,
}

impl AdminState {
    pub fn new(admin: Admin) -> Self {
        Self(Arc::new(admin))
    }
}

impl TrustsProxies for AdminState {
    fn trusted_proxies(&self) -> &CidrTable<()> {
        &self.trusted_proxies
    }
}

impl Deref for AdminState {
    type Target = Admin;
    fn deref(&self) -> &Admin {
        &self.0
    }
}
