//! The API listener's products, each handed only its slice of the services: the httpdns
//! routes (with the answer engine and the guard), app config and events, admin, console and
//! ops.

use std::sync::Arc;

use httpdns_api::Products;
use httpdns_geo::Geo;

use super::services::Services;
use crate::Config;

/// The products of the API listener, built from the loaded services; the answer engine's and
/// the guards' series go into `prometheus`.
pub(crate) fn build(
    config: &Config,
    services: &Services,
    prometheus: &prometheus::Registry,
    admin_token: &str,
) -> Products {
    let (guard, engine) =
        answer_services(config, prometheus, &services.geo, &services.upstream, &services.dns_metrics);
    let httpdns = httpdns_api::httpdns::HttpdnsState::new(httpdns_api::httpdns::HttpdnsParts {
        catalog: services.catalog.clone(),
        engine,
        guard: guard.clone(),
        service_ips: services.service_ips.clone(),
        metrics: services.metrics.clone(),
        dnspod: config.dnspod,
    });
    products(config, services, httpdns, guard, admin_token)
}

/// The services behind the httpdns product's routes (`httpdns_api::httpdns`): the guards of
/// its routes and the answer engine, their series in `prometheus`; the engine counts managed
/// names in the DNS front-ends' tally.
fn answer_services(
    config: &Config,
    prometheus: &prometheus::Registry,
    geo: &Arc<Geo>,
    upstream: &Arc<httpdns_upstream::Upstream>,
    dns_metrics: &httpdns_dns::DnsMetrics,
) -> (Arc<httpdns_guard::Guard>, Arc<httpdns_answer::Engine>) {
    let guard = httpdns_guard::Guard::new(
        httpdns_guard::GuardSettings {
            trusted_proxies: httpdns_core::cidr::CidrTable::new(
                config.trusted_proxies.iter().map(|n| (*n, ())),
            ),
            client_rate_limit: config.client_rate_limit,
            auth_required: config.auth_required,
        },
        prometheus,
    );
    let engine =
        httpdns_answer::Engine::new(geo.clone(), upstream.clone(), dns_metrics.domains.clone(), prometheus);
    (Arc::new(guard), Arc::new(engine))
}

/// Each product of the API listener with only its slice of state: `answers` is the httpdns
/// product's, built beside the others; `guard` (account limits and signatures) is shared by
/// the answer routes and the signed app endpoints.
fn products(
    config: &Config,
    s: &Services,
    answers: httpdns_api::httpdns::HttpdnsState,
    guard: Arc<httpdns_guard::Guard>,
    admin_token: &str,
) -> Products {
    let trusted = || httpdns_core::cidr::CidrTable::new(config.trusted_proxies.iter().map(|n| (*n, ())));
    let console = Arc::new(httpdns_api::console::Console::new(admin_token));
    Products {
        apps: httpdns_api::apps::state::AppsState::new(httpdns_api::apps::state::Apps {
            catalog: s.catalog.clone(),
            config: s.config_cache.clone(),
            geo: s.geo.clone(),
            live: s.live.clone(),
            events: s.events.clone(),
            upstream: s.upstream.clone(),
            metrics: s.metrics.clone(),
            guard,
            event_limits: httpdns_guard::RateLimiter::new(config.events.rate_per_client, config.events.burst),
            feedback_limits: httpdns_guard::RateLimiter::new(
                config.live.feedback_rate,
                config.live.feedback_burst,
            ),
            trusted_proxies: trusted(),
            auth_required: config.auth_required,
            allow_private_node_ips: config.allow_private_node_ips,
        }),
        admin: httpdns_api::admin::state::AdminState::new(httpdns_api::admin::state::Admin {
            catalog: s.catalog.clone(),
            config: s.config_cache.clone(),
            events: s.events.clone(),
            geo: s.geo.clone(),
            mirror: s.mirror.clone(),
            upstream: s.upstream.clone(),
            metrics: s.metrics.clone(),
            service_ips: s.service_ips.clone(),
            console: console.clone(),
            trusted_proxies: trusted(),
            admin_token: admin_token.to_owned(),
            validation: httpdns_catalog::Validation {
                allow_private_node_ips: config.allow_private_node_ips,
                allow_local_origins: config.allow_local_origins,
            },
        }),
        console: httpdns_api::console::ConsoleState::new(httpdns_api::console::ConsoleParts {
            console,
            store: s.catalog.store().clone(),
            admin_token: admin_token.to_owned(),
            trusted_proxies: trusted(),
            metrics: s.metrics.clone(),
        }),
        ops: httpdns_api::ops::state::OpsState::new(httpdns_api::ops::state::Ops {
            catalog: s.catalog.clone(),
            geo: s.geo.clone(),
            upstream: s.upstream.clone(),
            metrics: s.metrics.clone(),
        }),
        answers,
    }
}
