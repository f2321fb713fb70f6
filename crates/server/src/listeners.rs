//! Binding and serving the TCP listeners with the process's connection rules
//! (`httpdns_net`): admission, timeouts, PROXY headers, TLS.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use httpdns_core::cidr::CidrTable;
use httpdns_net::tls::{TlsCerts, TlsServer, ALPN_HTTP};
use httpdns_net::{ConnRegistry, NetMetrics, Timeouts};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Listen;

/// What every TCP listener of the process shares.
pub(crate) struct Edge {
    pub(crate) registry: Arc<ConnRegistry>,
    pub(crate) metrics: NetMetrics,
    pub(crate) trusted_proxies: Arc<CidrTable<()>>,
    pub(crate) http_timeouts: Timeouts,
    pub(crate) dns_timeouts: Timeouts,
    /// Loaded when any TLS listener is on.
    pub(crate) certs: Option<Arc<TlsCerts>>,
    pub(crate) dns_metrics: Arc<httpdns_dns::DnsMetrics>,
}

impl Edge {
    pub(crate) fn certs(&self) -> anyhow::Result<Arc<TlsCerts>> {
        self.certs.clone().context("a TLS listener needs HTTPDNS_TLS_CERT and HTTPDNS_TLS_KEY")
    }

    /// Binds `at` and serves `app` there (over TLS when `tls`), logging the bound address
    /// under `role` (tests read it). `None` when the listener is off.
    pub(crate) fn http(
        &self,
        tasks: &mut JoinSet<()>,
        role: &'static str,
        at: Listen,
        app: impl Into<httpdns_net::http::App>,
        tls: bool,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<SocketAddr>> {
        let Listen::At(addr) = at else { return Ok(None) };
        let listener =
            httpdns_net::bind_tcp(addr).with_context(|| format!("binding the {role} listener on {addr}"))?;
        let bound = listener.local_addr()?;
        tracing::info!(role, addr = %bound, "Listening.");
        let settings = httpdns_net::http::HttpListener {
            registry: self.registry.clone(),
            metrics: self.metrics.listener(role),
            timeouts: self.http_timeouts,
            trusted_proxies: self.trusted_proxies.clone(),
            tls: if tls { Some(TlsServer::new(self.certs()?, ALPN_HTTP)?) } else { None },
        };
        let app: httpdns_net::http::App = app.into();
        tasks.spawn(httpdns_net::http::serve(listener, settings, app, shutdown.clone()));
        Ok(Some(bound))
    }

    /// The connection settings of a DNS over TCP (or, with `tls`, over TLS) listener.
    pub(crate) fn dns_tcp(
        &self,
        role: &'static str,
        tls: Option<Arc<TlsServer>>,
    ) -> anyhow::Result<httpdns_dns::listen::TcpSettings> {
        Ok(httpdns_dns::listen::TcpSettings {
            registry: self.registry.clone(),
            metrics: self.metrics.listener(role),
            timeouts: self.dns_timeouts,
            trusted_proxies: self.trusted_proxies.clone(),
            tls,
            dns_metrics: self.dns_metrics.clone(),
        })
    }
}

/// Reloads the certificates when their files change, and at once on SIGHUP.
pub(crate) async fn follow_certificates(certs: Arc<TlsCerts>, every: Duration, shutdown: CancellationToken) {
    let mut trigger = crate::reload::ReloadTrigger::new(every);
    while let Some(force) = trigger.next(&shutdown).await {
        let c = certs.clone();
        // Reading and parsing PEM files is blocking work; errors are logged and counted there.
        let _ = tokio::task::spawn_blocking(move || c.reload(force)).await;
    }
}
