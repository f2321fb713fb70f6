//! Who is asking: the client's address behind trusted proxies, and whether the request
//! reached us over TLS.

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;
use httpdns_core::cidr::CidrTable;

/// The client behind trusted proxies: walking `X-Forwarded-For` from the right (the entries
/// the nearest proxies appended), the first address that is not itself a trusted proxy; else
/// `X-Real-IP`. Headers from an untrusted peer are ignored: anyone can send them.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &CidrTable<()>) -> IpAddr {
    if trusted.is_empty() || trusted.lookup(peer).is_none() {
        return peer;
    }
    let forwarded: Vec<IpAddr> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
        .map(|a| a.to_canonical())
        .collect();
    if let Some(client) = forwarded.iter().rev().find(|a| trusted.lookup(**a).is_none()) {
        return *client;
    }
    headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<IpAddr>().ok())
        .map_or(peer, |a| a.to_canonical())
}

/// Whether a request reached us over TLS: on a TLS listener (`tls`), or from a trusted proxy
/// (`peer`) that says it terminated TLS (`X-Forwarded-Proto: https`).
pub fn is_secure(tls: bool, peer: Option<SocketAddr>, headers: &HeaderMap, trusted: &CidrTable<()>) -> bool {
    if tls {
        return true;
    }
    let peer = peer.map(|c| c.ip().to_canonical());
    let trusted = peer.is_some_and(|p| !trusted.is_empty() && trusted.lookup(p).is_some());
    trusted
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn forwarded_addresses_only_from_trusted_proxies() {
        let trusted =
            CidrTable::new([("10.0.0.0/8".parse().unwrap(), ()), ("192.168.1.1/32".parse().unwrap(), ())]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let xff = headers(&[("x-forwarded-for", "1.2.3.4, 5.6.7.8, 192.168.1.1")]);
        assert_eq!(client_address(ip("10.1.1.1"), &xff, &trusted), ip("5.6.7.8"), "rightmost untrusted");
        assert_eq!(client_address(ip("8.8.8.8"), &xff, &trusted), ip("8.8.8.8"), "untrusted peer");
        let real = headers(&[("x-real-ip", "9.9.9.9")]);
        assert_eq!(client_address(ip("10.1.1.1"), &real, &trusted), ip("9.9.9.9"));
        let garbage = headers(&[("x-forwarded-for", "nonsense")]);
        assert_eq!(client_address(ip("10.1.1.1"), &garbage, &trusted), ip("10.1.1.1"));
        assert_eq!(
            client_address(ip("10.1.1.1"), &xff, &CidrTable::default()),
            ip("10.1.1.1"),
            "none trusted"
        );
    }
}
