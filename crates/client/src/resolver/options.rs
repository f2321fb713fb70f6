//! What a [`Resolver`](super::Resolver) is built from.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::localdns::LocalDns;
use crate::service::ServiceOptions;
use crate::stack::{IpStackDetector, RouteProbe};

#[derive(Debug, Clone)]
pub struct ResolverOptions {
    pub service: ServiceOptions,
    pub local_dns: LocalDns,
    /// Reuse expired answers while refreshing them ("optimistic DNS"; Alibaba's default).
    pub reuse_expired: bool,
    /// How long past its TTL an answer may be reused, and kept in the cache file.
    pub max_stale: Duration,
    /// Admit loopback and private addresses (intranets, tests). Off for a phone.
    pub allow_private: bool,
    /// The client's carrier, when the app knows it (from the SIM). Else the service's view of
    /// the client is used. Nodes labelled with another carrier are dropped.
    pub isp: Option<String>,
    /// Drop nodes whose carrier label differs from the client's.
    pub isp_filter: bool,
    /// Bounds on the TTL of service answers.
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    /// TTL given to LocalDNS answers: short, so the service is asked again soon.
    pub local_ttl: Duration,
    pub local_timeout: Duration,
    /// Persistent cache file, loaded at start and written after each service answer.
    pub cache_file: Option<PathBuf>,
    /// Names resolved by [`Resolver::start`](super::Resolver::start) and after a network change, [`MAX_BATCH`](crate::service::MAX_BATCH) per
    /// request.
    pub pre_resolve: Vec<String>,
    /// Names that never use HTTPDNS (exact, or `*.suffix` for the names under it): LocalDNS
    /// answers them.
    pub deny_hosts: Vec<String>,
    /// When not empty, only these names (same patterns) use HTTPDNS.
    pub allow_hosts: Vec<String>,
    /// Finds the families the device can reach (default: [`RouteProbe`], which sends nothing).
    pub ip_stack: Arc<dyn IpStackDetector>,
    /// Refresh the service addresses from `/ss` at start, on a network change, when every
    /// address failed, and every `service_ip_interval`. Off by default (the Android SDK's is
    /// on): `/ss` lists the replicas' announced addresses, or, when none is announced, the
    /// address a request reached, which behind a balancer is an inside one; turn it on where
    /// the replicas announce their public addresses (`HTTPDNS_PUBLIC_ADDRS`).
    pub refresh_service_ips: bool,
    pub service_ip_interval: Duration,
}

impl Default for ResolverOptions {
    fn default() -> Self {
        Self {
            service: ServiceOptions::default(),
            local_dns: LocalDns::System,
            reuse_expired: true,
            max_stale: Duration::from_secs(24 * 3600),
            allow_private: false,
            isp: None,
            isp_filter: true,
            min_ttl: Duration::from_secs(10),
            max_ttl: Duration::from_secs(3600),
            local_ttl: Duration::from_secs(30),
            local_timeout: Duration::from_secs(2),
            cache_file: None,
            pre_resolve: Vec::new(),
            deny_hosts: Vec::new(),
            allow_hosts: Vec::new(),
            ip_stack: Arc::new(RouteProbe::default()),
            refresh_service_ips: false,
            service_ip_interval: Duration::from_secs(8 * 3600),
        }
    }
}
