//! Binds every configured listener and serves it: the API and the mirror (plain and TLS), the
//! metrics port, plain DNS (UDP and TCP) and DNS over TLS.

use std::net::SocketAddr;

use anyhow::Context;
use httpdns_api::Products;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::services::Services;
use crate::{dns, listeners, Config, Listen};

/// The bound addresses, each `None` when its listener is off.
pub(crate) struct Bound {
    pub(crate) api: Option<SocketAddr>,
    pub(crate) api_tls: Option<SocketAddr>,
    pub(crate) mirror: Option<SocketAddr>,
    pub(crate) mirror_tls: Option<SocketAddr>,
    pub(crate) metrics: Option<SocketAddr>,
    pub(crate) dns: Option<SocketAddr>,
    pub(crate) dot: Option<SocketAddr>,
}

/// Binds the listeners through the edge `net` and spawns their servers (and the mirror's
/// origin probes) into `tasks`.
pub(crate) fn bind(
    config: &Config,
    net: &listeners::Edge,
    services: &Services,
    products: &Products,
    tasks: &mut JoinSet<()>,
    shutdown: &CancellationToken,
) -> anyhow::Result<Bound> {
    let api_app = httpdns_api::app(products, config.metrics_addr == Listen::Off);
    let api_addr = net.http(tasks, "api", config.api_addr, api_app.clone(), false, shutdown)?;
    let api_tls_addr = net.http(tasks, "api_tls", config.api_tls_addr, api_app, true, shutdown)?;
    let mirror_app = httpdns_mirror::app(services.mirror.clone());
    let mirror_addr = net.http(tasks, "mirror", config.mirror_addr, mirror_app.clone(), false, shutdown)?;
    let mirror_tls_addr =
        net.http(tasks, "mirror_tls", config.mirror_tls_addr, mirror_app, true, shutdown)?;
    let metrics_addr = net.http(
        tasks,
        "metrics",
        config.metrics_addr,
        httpdns_api::metrics_router(products.ops.clone()),
        false,
        shutdown,
    )?;
    tasks.spawn(services.mirror.clone().run_probes(shutdown.clone()));
    let (dns_addr, dot_addr) = dns_listeners(config, net, services, products, tasks, shutdown)?;
    Ok(Bound {
        api: api_addr,
        api_tls: api_tls_addr,
        mirror: mirror_addr,
        mirror_tls: mirror_tls_addr,
        metrics: metrics_addr,
        dns: dns_addr,
        dot: dot_addr,
    })
}

/// Plain DNS (UDP sockets and a TCP listener on one port) and DNS over TLS, answered by the
/// httpdns product's engine.
fn dns_listeners(
    config: &Config,
    net: &listeners::Edge,
    services: &Services,
    products: &Products,
    tasks: &mut JoinSet<()>,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Option<SocketAddr>, Option<SocketAddr>)> {
    let (upstream, dns_metrics) = (&services.upstream, &services.dns_metrics);
    let handler = dns::handler(services.catalog.clone(), products.answers.engine.clone());
    let dns_addr = match config.dns_addr {
        Listen::Off => None,
        Listen::At(addr) => {
            let (udp, tcp) = dns::bind(addr)?;
            let bound = udp[0].local_addr()?;
            tracing::info!(role = "dns", addr = %bound, udp_sockets = udp.len(), "Listening.");
            for socket in udp {
                tasks.spawn(httpdns_dns::listen::serve_udp(
                    socket,
                    handler.clone(),
                    upstream.clone(),
                    dns_metrics.clone(),
                    shutdown.clone(),
                ));
            }
            tasks.spawn(httpdns_dns::listen::serve_tcp(
                tcp,
                handler.clone(),
                upstream.clone(),
                net.dns_tcp("dns_tcp", None)?,
                shutdown.clone(),
            ));
            Some(bound)
        }
    };
    let dot_addr = match config.dot_addr {
        Listen::Off => None,
        Listen::At(addr) => {
            let listener = httpdns_net::bind_tcp(addr)
                .with_context(|| format!("binding the DNS over TLS listener on {addr}"))?;
            let bound = listener.local_addr()?;
            tracing::info!(role = "dot", addr = %bound, "Listening.");
            let tls = httpdns_net::tls::TlsServer::new(net.certs()?, httpdns_net::tls::ALPN_DOT)?;
            tasks.spawn(httpdns_dns::listen::serve_tcp(
                listener,
                handler,
                upstream.clone(),
                net.dns_tcp("dot", Some(tls))?,
                shutdown.clone(),
            ));
            Some(bound)
        }
    };
    Ok((dns_addr, dot_addr))
}
