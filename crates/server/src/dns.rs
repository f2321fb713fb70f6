//! Wiring of the plain DNS listener: binding UDP and TCP on one port, and the handler that
//! answers from the current snapshot.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use httpdns_catalog::Catalog;
use httpdns_dns::listen::Handler;
use httpdns_dns::Context;
use tokio::net::{TcpListener, UdpSocket};

/// Binds UDP (one socket or a reuse-port group, [`httpdns_dns::listen::bind_udp`]) and TCP on
/// the same address. With port 0, UDP picks the port and TCP takes the same one (retrying with
/// a new port if TCP's is taken).
pub(crate) fn bind(addr: SocketAddr) -> anyhow::Result<(Vec<UdpSocket>, TcpListener)> {
    for _ in 0..10 {
        let udp =
            httpdns_dns::listen::bind_udp(addr).with_context(|| format!("binding DNS over UDP on {addr}"))?;
        let port = udp[0].local_addr()?.port();
        match httpdns_net::bind_tcp(SocketAddr::new(addr.ip(), port)) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(_) if addr.port() == 0 => continue,
            Err(e) => return Err(e).with_context(|| format!("binding DNS over TCP on {addr}")),
        }
    }
    anyhow::bail!("no port free for DNS over both UDP and TCP on {}", addr.ip())
}

/// The upstream servers: the configured ones, else the system's resolvers
/// (`nameserver` lines of `/etc/resolv.conf`).
pub(crate) fn upstream_servers(configured: &crate::config::Upstreams) -> Vec<SocketAddr> {
    match configured {
        crate::config::Upstreams::Off => return Vec::new(),
        crate::config::Upstreams::Servers(list) => return list.clone(),
        crate::config::Upstreams::System => {}
    }
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().split('%').next()?.parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// Answers from the snapshot current when the message arrives, classifying with the answer
/// engine's GeoIP readers and counting managed names' address questions in its per-domain
/// tally by transport: `udp`, `tcp`, `dot`.
pub(crate) fn handler(catalog: Arc<Catalog>, engine: Arc<httpdns_answer::Engine>) -> Handler {
    Arc::new(move |bytes, peer, transport| {
        let published = catalog.snapshot();
        let frontend = match transport {
            httpdns_dns::Transport::Udp => "udp",
            httpdns_dns::Transport::Stream => "tcp",
            httpdns_dns::Transport::Encrypted => "dot",
        };
        let ctx = Context {
            snapshot: &published.snapshot,
            health: &published.health,
            classify: |ip| httpdns_geo::classify_scoped(&published.snapshot, engine.geo(), ip),
            tally: Some((engine.tally(), frontend)),
        };
        httpdns_dns::answer(bytes, peer, transport, &ctx)
    })
}
