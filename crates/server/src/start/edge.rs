//! The TCP edge: one registry of connections for every listener, so the caps protect the
//! process's descriptors whichever listener is flooded; the TLS certificates, when configured.

use std::sync::Arc;

use anyhow::Context;

use crate::{listeners, Config};

/// The edge every listener accepts through, its caps derived from the descriptor limit
/// `nofile` unless configured.
pub(crate) fn build(
    config: &Config,
    nofile: u64,
    prometheus: &prometheus::Registry,
    dns_metrics: Arc<httpdns_dns::DnsMetrics>,
) -> anyhow::Result<listeners::Edge> {
    let trusted_proxies =
        Arc::new(httpdns_core::cidr::CidrTable::new(config.trusted_proxies.iter().map(|n| (*n, ()))));
    let derived = httpdns_net::ConnLimits::for_descriptors(nofile);
    let limits = httpdns_net::ConnLimits {
        max_connections: config.max_connections.unwrap_or(derived.max_connections),
        max_per_address: config.max_connections_per_addr.unwrap_or(derived.max_per_address),
    };
    tracing::info!(
        descriptors = nofile,
        max_connections = limits.max_connections,
        max_per_address = limits.max_per_address,
        "Connection limits."
    );
    Ok(listeners::Edge {
        registry: httpdns_net::ConnRegistry::new(limits, trusted_proxies.clone()),
        metrics: httpdns_net::NetMetrics::new(prometheus),
        trusted_proxies,
        http_timeouts: config.http_timeouts,
        dns_timeouts: config.dns_timeouts,
        dns_metrics,
        certs: match &config.tls {
            None => None,
            Some(files) => Some(
                httpdns_net::tls::TlsCerts::load(&files.cert, &files.key, prometheus)
                    .context("loading the TLS certificates")?,
            ),
        },
    })
}
