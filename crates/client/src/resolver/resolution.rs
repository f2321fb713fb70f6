//! What a lookup answers: the addresses and the path that produced them.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// Which path produced an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The memory cache, within the TTL.
    Cache,
    /// The HTTPDNS service, just now.
    HttpDns,
    /// An expired cached answer, reused while it is refreshed (or while nothing else answers).
    Stale,
    /// The system's resolver (or the configured LocalDNS servers).
    LocalDns,
    /// The name was an IP address.
    Literal,
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Path::Cache => "cache",
            Path::HttpDns => "httpdns",
            Path::Stale => "stale",
            Path::LocalDns => "localdns",
            Path::Literal => "literal",
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub name: String,
    /// IPv4 first, then IPv6 (IPv6 first on an IPv6-only network), each in the service's order
    /// of preference.
    pub ips: Vec<IpAddr>,
    /// How long the answer may still be used.
    pub ttl: Duration,
    pub path: Path,
    /// Addresses thrown away, and why.
    pub dropped: Vec<(IpAddr, &'static str)>,
    /// Why the service did not answer, when another path did.
    pub service_error: Option<String>,
}
