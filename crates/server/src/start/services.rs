//! The model and the services the listeners share: the catalog followed from the store, the
//! config center's cache, the upstream resolver, live scores, client events, the mirror and the
//! announced service addresses, loaded before anything is served.

use std::sync::Arc;

use anyhow::Context;
use httpdns_api::metrics::Metrics;
use httpdns_catalog::{Catalog, CatalogMetrics, LiveHub};
use httpdns_center::ConfigCache;
use httpdns_geo::Geo;
use httpdns_live::health::HealthRegistry;
use httpdns_store::Store;

use crate::{dns, Config};

/// Every service of the process, loaded; the API's products get slices of them.
pub(crate) struct Services {
    pub(crate) store: Store,
    pub(crate) dns_metrics: Arc<httpdns_dns::DnsMetrics>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) geo: Arc<Geo>,
    pub(crate) registry: Arc<HealthRegistry>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) policy_view: Arc<httpdns_policy::PolicyView>,
    pub(crate) config_cache: Arc<ConfigCache>,
    pub(crate) upstream: Arc<httpdns_upstream::Upstream>,
    pub(crate) live: Arc<LiveHub>,
    pub(crate) events: Arc<httpdns_events::EventHub>,
    /// The process's descriptor limit, raised as far as allowed.
    pub(crate) nofile: u64,
    pub(crate) mirror: Arc<httpdns_mirror::Mirror>,
    pub(crate) service_ips: Arc<httpdns_api::service_ips::ServiceIps>,
}

impl Services {
    /// Builds and loads every service, in dependency order; each registers its series into
    /// `prometheus`.
    pub(crate) async fn load(
        config: &Config,
        store: Store,
        signer: httpdns_config::Signer,
        prometheus: &prometheus::Registry,
    ) -> anyhow::Result<Self> {
        let dns_metrics = Arc::new(httpdns_dns::DnsMetrics::new(prometheus));
        let metrics = Arc::new(Metrics::new(prometheus, dns_metrics.clone()));
        let geo = Arc::new(Geo::open(config.geo.clone()).context("loading the GeoIP databases")?);
        let registry = Arc::new(HealthRegistry::default());
        let catalog = Arc::new(Catalog::new(
            store.clone(),
            config.policy.clone(),
            CatalogMetrics::new(prometheus),
            registry.clone(),
        ));
        catalog.sync().await.context("loading data from the database")?;
        let policy_view = Arc::new(httpdns_policy::PolicyView::new(config.policy_controller.clone()));
        let config_cache = Arc::new(ConfigCache::new(
            store.clone(),
            signer,
            httpdns_center::CenterMetrics::new(prometheus),
            catalog.metrics().store_corrupt_rows.clone(),
            policy_view.clone(),
        ));
        config_cache.refresh().await.context("loading config documents")?;
        let servers = dns::upstream_servers(&config.upstreams);
        tracing::info!(servers = ?servers, "Upstream DNS servers for names not managed here.");
        let upstream = Arc::new(httpdns_upstream::Upstream::new(httpdns_upstream::UpstreamConfig {
            allow_private: config.allow_private_node_ips,
            timeout: config.upstream_timeout,
            min_ttl: config.upstream_min_ttl,
            max_ttl: config.upstream_max_ttl,
            negative_ttl: config.upstream_negative_ttl,
            stale_for: config.upstream_stale,
            ..httpdns_upstream::UpstreamConfig::new(servers)
        }));
        let live = Arc::new(LiveHub::new(config.live.clone()));
        let restored = live.load(&store).await.context("loading feedback aggregates")?;
        if restored > 0 {
            tracing::info!(aggregates = restored, "Restored app feedback aggregates.");
        }
        live.refresh(&catalog).await.context("applying live inputs")?;
        let events = Arc::new(httpdns_events::EventHub::new(config.events.clone(), prometheus));
        // Descriptors are shared by connections (the TCP edge) and by the files the mirror's
        // large bodies in memory keep open.
        let nofile = httpdns_net::raise_descriptor_limit();
        let mirror = super::mirror::start(config, nofile, prometheus, &catalog)?;

        if !config.public_addrs.is_empty() {
            tracing::info!(addrs = ?config.public_addrs.iter().map(ToString::to_string).collect::<Vec<_>>(), "Announcing public entry points in /ss.");
        }
        let service_ips = Arc::new(httpdns_api::service_ips::ServiceIps::new(config.public_addrs.clone()));
        // Before the first answer: a restarted replica must not forget a kill switch for a beat.
        service_ips.switches().load(&store).await.context("reading the vendor switches")?;
        Ok(Self {
            store,
            dns_metrics,
            metrics,
            geo,
            registry,
            catalog,
            policy_view,
            config_cache,
            upstream,
            live,
            events,
            nofile,
            mirror,
            service_ips,
        })
    }
}
