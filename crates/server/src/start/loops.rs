//! The background loops: the edge's reaper and certificate reloads, the config center's
//! long polls, adoption and rollouts (spawned before the listeners), then following the store,
//! health checks, live scores, client events, the policy controller, the service addresses and
//! the GeoIP databases.

use std::sync::Arc;

use httpdns_api::metrics::Metrics;
use httpdns_geo::Geo;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::services::Services;
use crate::{follow, listeners, reload, Config};

/// What runs beside the listeners from the start.
pub(crate) fn spawn_edge(
    config: &Config,
    net: &listeners::Edge,
    services: &Services,
    tasks: &mut JoinSet<()>,
    shutdown: &CancellationToken,
) {
    let config_cache = &services.config_cache;
    tasks.spawn(net.registry.clone().run_reaper(std::time::Duration::from_millis(250), shutdown.clone()));
    // Held long polls are answered at once on shutdown, so the drain does not wait out their
    // deadlines (up to a minute).
    let (closing, stop) = (config_cache.clone(), shutdown.clone());
    tasks.spawn(async move {
        stop.cancelled().await;
        closing.close();
    });
    tasks.spawn(config_cache.adoption().clone().run(services.store.clone(), shutdown.clone()));
    tasks.spawn(httpdns_center::rollout::run(
        config_cache.clone(),
        services.metrics.audit_write_errors.clone(),
        config.control_tick,
        shutdown.clone(),
    ));
    if let (Some(certs), Some(files)) = (&net.certs, &config.tls) {
        tasks.spawn(listeners::follow_certificates(certs.clone(), files.reload_interval, shutdown.clone()));
    }
}

/// The loops that follow the outside world, once the listeners are up.
pub(crate) fn spawn_background(
    config: &Config,
    services: Services,
    prometheus: &prometheus::Registry,
    tasks: &mut JoinSet<()>,
    shutdown: &CancellationToken,
) {
    let Services {
        store,
        metrics,
        geo,
        registry,
        catalog,
        policy_view,
        config_cache,
        live,
        events,
        service_ips,
        ..
    } = services;
    let changed = Arc::new(Notify::new());
    if let Some(url) = store.postgres_url() {
        tasks.spawn(follow::listen(url.to_owned(), changed.clone(), shutdown.clone()));
    }
    tasks.spawn(follow::follow_store(
        catalog.clone(),
        config_cache,
        changed,
        config.sync_interval,
        shutdown.clone(),
    ));
    tasks.spawn(follow::run_checker(
        registry,
        catalog.targets(),
        Arc::new(follow::ProbeMetrics(metrics.clone())),
        config.live.probe_workers,
        shutdown.clone(),
    ));
    tasks.spawn(follow::follow_live(live, catalog.clone(), shutdown.clone()));
    tasks.spawn(events.run(store.clone(), shutdown.clone()));
    let checks_catalog = catalog.clone();
    // The controller recovers a place only when the server's own checks agree: some node of
    // the place's own (its carrier and region) is up, or it has none.
    let checks: httpdns_policy::run::Checks = Arc::new(move |isp: &str, region: &str| {
        let p = checks_catalog.snapshot();
        let mut own = p
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, n)| n.usable && n.spec.isp.as_str() == isp && n.spec.region.as_str() == region)
            .peekable();
        own.peek().is_none() || own.any(|(i, _)| p.health.get(i).is_none_or(|s| s.is_up()))
    });
    let controller = Arc::new(httpdns_policy::run::Controller::new(
        config.policy_controller.clone(),
        store.clone(),
        policy_view,
        httpdns_policy::PolicyMetrics::new(prometheus),
        checks,
    ));
    tasks.spawn(controller.run(shutdown.clone()));
    tasks.spawn(service_ips.run(store.clone(), shutdown.clone()));
    tasks.spawn(follow_geo(geo, metrics, config.geo.reload_interval, shutdown.clone()));
}

/// Reloads the GeoIP databases when their files change.
async fn follow_geo(
    geo: Arc<Geo>,
    metrics: Arc<Metrics>,
    every: std::time::Duration,
    shutdown: CancellationToken,
) {
    let configured = geo.config().city_db.is_some() || geo.config().asn_db.is_some();
    let mut trigger = reload::ReloadTrigger::new(every);
    while let Some(force) = trigger.next(&shutdown).await {
        if !configured {
            if force {
                tracing::info!("SIGHUP: no GeoIP database is configured; nothing to reload.");
            }
            continue;
        }
        if force {
            tracing::info!("SIGHUP: reloading the GeoIP databases.");
        }
        let g = geo.clone();
        match tokio::task::spawn_blocking(move || g.reload(force)).await {
            Ok(Ok(true)) => tracing::info!("GeoIP databases reloaded."),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                metrics.geoip_reload_errors.inc();
                tracing::error!(error = %e, "GeoIP reload failed; the previous databases stay in service.");
            }
            Err(e) => tracing::error!(error = %e, "GeoIP reload task failed."),
        }
    }
}
