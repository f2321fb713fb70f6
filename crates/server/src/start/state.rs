//! The API's shared state, from the services and the settings of the configuration.

use std::sync::Arc;

use httpdns_api::state::Shared;
use httpdns_api::{ApiSettings, AppState};

use super::services::Services;
use crate::Config;

pub(crate) fn app_state(config: &Config, services: &Services, admin_token: &str) -> AppState {
    AppState::new(Shared {
        catalog: services.catalog.clone(),
        config: services.config_cache.clone(),
        geo: services.geo.clone(),
        live: services.live.clone(),
        events: services.events.clone(),
        console: Arc::new(httpdns_api::console::Console::new(admin_token)),
        upstream: services.upstream.clone(),
        mirror: services.mirror.clone(),
        metrics: services.metrics.clone(),
        service_ips: services.service_ips.clone(),
        settings: ApiSettings {
            admin_token: admin_token.to_owned(),
            validation: httpdns_catalog::Validation {
                allow_private_node_ips: config.allow_private_node_ips,
                allow_local_origins: config.allow_local_origins,
            },
            dnspod: config.dnspod,
            auth_required: config.auth_required,
            trusted_proxies: httpdns_core::cidr::CidrTable::new(
                config.trusted_proxies.iter().map(|n| (*n, ())),
            ),
            client_rate_limit: config.client_rate_limit,
        },
        account_limits: httpdns_api::ratelimit::RateLimiter::new(1.0, 1.0),
        client_limits: httpdns_api::ratelimit::RateLimiter::new(
            config.client_rate_limit.map_or(1.0, |(q, _)| q),
            config.client_rate_limit.map_or(1.0, |(_, b)| b),
        ),
        feedback_limits: httpdns_api::ratelimit::RateLimiter::new(
            config.live.feedback_rate,
            config.live.feedback_burst,
        ),
        token_misses: Shared::token_miss_limiter(),
    })
}
