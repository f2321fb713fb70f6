//! The process's TCP edge, shared by every front-end.
//!
//! * [`registry`]: every open connection, admitted against a global and a per-address cap
//!   (sparing the connection that can best be spared), and reaped at its phase's timeout.
//! * [`http`]: an axum `Router` (and an optional [`http::Shortcut`] tried before it) served
//!   with those rules, PROXY headers and optional TLS.
//! * [`tls`]: certificates by SNI from PEM files, reloaded in place, expiry exported.
//! * [`proxied`]: the PROXY protocol (v1 and v2) from trusted proxies.
//! * [`sendfile`]: bodies in memory that plain connections send from their file.
//! * [`tracked`]: the stream wrapper that lets the reaper see bytes move.
//! * [`metrics`]: connections open, refused and closed, TLS failures.

pub mod http;
pub mod metrics;
pub mod proxied;
pub mod registry;
pub mod sendfile;
pub mod tls;
pub mod tracked;

pub use metrics::{CloseReason, ListenerMetrics, NetMetrics};
pub use registry::{
    Admitted, ConnHandle, ConnLimits, ConnRegistry, ConnState, Held, Refused, Signal, Timeouts,
};

/// Raises the soft limit of open descriptors to the hard one (as nginx's
/// `worker_rlimit_nofile` would) and returns the limit in force.
pub fn raise_descriptor_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let (Some(cur), max) = (limit.current, limit.maximum) else { return u64::MAX };
    let target = max.unwrap_or(cur.max(1 << 20));
    if target > cur && setrlimit(Resource::Nofile, Rlimit { current: Some(target), maximum: max }).is_ok() {
        return target;
    }
    cur
}

/// Pending connections the kernel may queue for a listener: the default of tokio's `bind`
/// (1,024) overflows under a connection flood, and a dropped SYN costs a real client a
/// second's retransmission. The kernel caps it at `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds a TCP listener with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, so a restart rebinds at
/// once).
pub fn bind_tcp(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket =
        if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}
