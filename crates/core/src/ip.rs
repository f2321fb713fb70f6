//! Which addresses may ever be handed to a client as an edge node.
//!
//! An answer that sends an app to `0.0.0.0`, `127.0.0.1` or `10.0.0.1` breaks it (seed `004`,
//! "invalid IPs in an answer"). The admin API refuses such node addresses, and the answer path
//! filters them again, so a bad row that reached the database by another way is still never
//! served.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// How an address is classified for serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpClass {
    /// Routable on the public internet.
    Public,
    /// Private (RFC 1918, RFC 6598 shared, ULA), loopback or link-local: valid inside an
    /// intranet deployment or a test, never on the internet.
    Private,
    /// Never a valid answer anywhere: unspecified, multicast, broadcast, documentation,
    /// benchmarking and reserved ranges.
    Invalid,
}

/// Classifies `ip` for use as an answer.
pub fn classify(ip: IpAddr) -> IpClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> IpClass {
    let [a, b, c, _] = ip.octets();
    if ip.is_unspecified()
        || a == 0 // "this network", 0.0.0.0/8
        || ip.is_multicast()
        || ip.is_broadcast()
        || a >= 240 // reserved 240.0.0.0/4
        || ip.is_documentation()
        || (a == 198 && (b & 0xfe) == 18) // benchmarking 198.18.0.0/15
        || (a == 192 && b == 0 && c == 0)
    // IETF protocol assignments 192.0.0.0/24
    {
        return IpClass::Invalid;
    }
    if ip.is_private() || ip.is_loopback() || ip.is_link_local() || (a == 100 && (b & 0xc0) == 64)
    // shared address space 100.64.0.0/10 (carrier-grade NAT)
    {
        return IpClass::Private;
    }
    IpClass::Public
}

fn classify_v6(ip: Ipv6Addr) -> IpClass {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    let seg = ip.segments();
    if ip.is_unspecified()
        || ip.is_multicast()
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation 2001:db8::/32
        || (seg[0] == 0x3fff && seg[1] < 0x1000) // documentation 3fff::/20
        || (seg[0] == 0x0100 && seg[1] == 0 && seg[2] == 0 && seg[3] == 0) // discard 100::/64
        || (seg[0] == 0x0064 && seg[1] == 0xff9b && seg[2] == 1) // local NAT64 64:ff9b:1::/48
        || (seg[0] & 0xe000) != 0x2000 && !is_private_v6(ip) && !ip.is_loopback()
    // only 2000::/3 is allocated global unicast
    {
        return IpClass::Invalid;
    }
    if ip.is_loopback() || is_private_v6(ip) {
        return IpClass::Private;
    }
    IpClass::Public
}

fn is_private_v6(ip: Ipv6Addr) -> bool {
    let s0 = ip.segments()[0];
    (s0 & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s0 & 0xffc0) == 0xfe80 // link-local fe80::/10
}

/// Whether `ip` may be served, given whether private addresses are allowed (intranet and test
/// deployments).
pub fn servable(ip: IpAddr, allow_private: bool) -> bool {
    match classify(ip) {
        IpClass::Public => true,
        IpClass::Private => allow_private,
        IpClass::Invalid => false,
    }
}

/// Where an origin address is, for the mirror's outbound connections (SSRF defence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginClass {
    /// Public or private (intranet origins are the normal case).
    Allowed,
    /// This host or its link: loopback, link-local (the cloud metadata service at
    /// 169.254.169.254 included), unspecified and "this network" (`0.0.0.0/8`, `::`), in
    /// every IPv6 spelling of them (v4-mapped, v4-compatible).
    Local,
    /// Nothing can be fetched there: multicast, broadcast, reserved.
    Unreachable,
}

/// Classifies an address an origin connection would go to.
pub fn origin_class(ip: IpAddr) -> OriginClass {
    let ip = match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped().or_else(|| v4_compatible(v6)) {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 @ IpAddr::V4(_) => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            let a = v4.octets()[0];
            if a == 0 || v4.is_loopback() || v4.is_link_local() {
                OriginClass::Local
            } else if v4.is_multicast() || v4.is_broadcast() || a >= 240 {
                OriginClass::Unreachable
            } else {
                OriginClass::Allowed
            }
        }
        IpAddr::V6(v6) => {
            if v6.is_unspecified() || v6.is_loopback() || (v6.segments()[0] & 0xffc0) == 0xfe80 {
                OriginClass::Local
            } else if v6.is_multicast() {
                OriginClass::Unreachable
            } else {
                OriginClass::Allowed
            }
        }
    }
}

/// `::a.b.c.d` (deprecated IPv4-compatible), which some stacks still route as IPv4.
fn v4_compatible(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    (s[..6].iter().all(|x| *x == 0) && (s[6] != 0 || s[7] > 1)).then(|| {
        let [.., a, b, c, d] = ip.octets();
        Ipv4Addr::new(a, b, c, d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_classes_in_every_spelling() {
        let class = |s: &str| origin_class(s.parse().unwrap());
        for local in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "0.1.2.3",
            "169.254.169.254",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "fe80::1",
            "febf::1",
        ] {
            assert_eq!(class(local), OriginClass::Local, "{local}");
        }
        for ok in
            ["10.0.0.1", "192.168.1.1", "172.16.0.1", "100.64.0.1", "8.8.8.8", "fd00::1", "2400:cb00::1"]
        {
            assert_eq!(class(ok), OriginClass::Allowed, "{ok}");
        }
        for bad in ["224.0.0.1", "255.255.255.255", "240.0.0.1", "ff02::1"] {
            assert_eq!(class(bad), OriginClass::Unreachable, "{bad}");
        }
    }

    fn class(s: &str) -> IpClass {
        classify(s.parse().unwrap())
    }

    #[test]
    fn public_addresses() {
        for ip in ["1.2.3.4", "119.29.29.98", "223.5.5.5", "2402:4e00:123:4567::2345", "2400:3200::1"] {
            assert_eq!(class(ip), IpClass::Public, "{ip}");
        }
    }

    #[test]
    fn private_addresses() {
        for ip in [
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "127.0.0.1",
            "127.9.9.9",
            "169.254.1.1",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert_eq!(class(ip), IpClass::Private, "{ip}");
        }
    }

    #[test]
    fn invalid_addresses() {
        for ip in [
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "239.1.1.1",
            "240.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "192.0.0.8",
            "::",
            "ff02::1",
            "2001:db8::1",
            "::ffff:0.0.0.0",
            "100::1",
            "3fff::1",
            "::2",
        ] {
            assert_eq!(class(ip), IpClass::Invalid, "{ip}");
        }
    }

    #[test]
    fn servable_respects_the_private_switch() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(!servable(lo, false));
        assert!(servable(lo, true));
        let zero: IpAddr = "0.0.0.0".parse().unwrap();
        assert!(!servable(zero, true));
    }
}
