//! Which IP families the device can reach now (issue 40; the SDKs' "IPv6 stack detection").
//!
//! AAAA answers are asked for only where the device has an IPv6 route (`query=4` on an
//! IPv4-only network, `6` on an IPv6-only one, `4,6` otherwise), and answers are ordered by the
//! stack: IPv6 first on an IPv6-only network, IPv4 first everywhere else.
//!
//! The default detector, [`RouteProbe`], does what Android's own resolver and the Kotlin SDK's
//! `IpStackDetector.ROUTES` do: it `connect`s a UDP socket to a global address of each family.
//! A UDP `connect` sends nothing; it only asks the kernel for a route and a source address, so no
//! packet leaves the device. An app that knows better (or a test) plugs in its own
//! [`IpStackDetector`], e.g. [`FixedStack`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// The families the device can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpStack {
    V4,
    V6,
    Dual,
    /// Neither route found (no network, or the probe is blocked): both families are asked for.
    None,
}

impl IpStack {
    pub fn of(v4: bool, v6: bool) -> Self {
        match (v4, v6) {
            (true, true) => IpStack::Dual,
            (false, true) => IpStack::V6,
            (true, false) => IpStack::V4,
            (false, false) => IpStack::None,
        }
    }

    /// The `query` parameter of `/resolve`: AAAA only where IPv6 is routable, A only where
    /// IPv4 is (both when nothing is known).
    pub fn query(self) -> &'static str {
        match self {
            IpStack::V4 => "4",
            IpStack::V6 => "6",
            IpStack::Dual | IpStack::None => "4,6",
        }
    }

    /// Orders `ips` for connecting: IPv6 first on an IPv6-only network, else IPv4 first (stable
    /// within each family, keeping the service's preference).
    pub fn order(self, ips: &mut [IpAddr]) {
        if self == IpStack::V6 {
            ips.sort_by_key(|ip| ip.is_ipv4());
        } else {
            ips.sort_by_key(|ip| ip.is_ipv6());
        }
    }
}

/// Tells the resolver which families the device can reach; asked at start, on every network
/// change, and on first use.
pub trait IpStackDetector: Send + Sync + fmt::Debug {
    fn stack(&self) -> IpStack;
}

/// The UDP-connect probe (no packet is sent). Targets are public DNS addresses by default.
#[derive(Debug, Clone, Copy)]
pub struct RouteProbe {
    pub v4: SocketAddr,
    pub v6: SocketAddr,
}

impl Default for RouteProbe {
    fn default() -> Self {
        Self {
            v4: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(8, 8, 8, 8)), 53),
            v6: SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0x2001, 0x4860, 0x4860, 0, 0, 0, 0, 0x8888)), 53),
        }
    }
}

impl IpStackDetector for RouteProbe {
    fn stack(&self) -> IpStack {
        IpStack::of(has_route(self.v4), has_route(self.v6))
    }
}

/// A stack the app already knows (or a test sets).
#[derive(Debug, Clone, Copy)]
pub struct FixedStack(pub IpStack);

impl IpStackDetector for FixedStack {
    fn stack(&self) -> IpStack {
        self.0
    }
}

/// Whether the kernel has a route to `target`: a UDP socket of its family is connected to it
/// (which sends nothing) and must get a source address of that family.
pub fn has_route(target: SocketAddr) -> bool {
    let bind: SocketAddr = match target {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let Ok(socket) = UdpSocket::bind(bind) else { return false };
    if socket.connect(target).is_err() {
        return false;
    }
    socket.local_addr().is_ok_and(|l| !l.ip().is_unspecified() && l.is_ipv6() == target.is_ipv6())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn query_and_order_follow_the_stack() {
        assert_eq!(IpStack::V4.query(), "4");
        assert_eq!(IpStack::V6.query(), "6");
        assert_eq!(IpStack::Dual.query(), "4,6");
        assert_eq!(IpStack::None.query(), "4,6");
        let mut a = ips(&["2402:4e00::1", "1.1.1.1", "2402:4e00::2", "2.2.2.2"]);
        IpStack::V6.order(&mut a);
        assert_eq!(a, ips(&["2402:4e00::1", "2402:4e00::2", "1.1.1.1", "2.2.2.2"]));
        IpStack::Dual.order(&mut a);
        assert_eq!(a, ips(&["1.1.1.1", "2.2.2.2", "2402:4e00::1", "2402:4e00::2"]));
        IpStack::V4.order(&mut a);
        assert_eq!(a, ips(&["1.1.1.1", "2.2.2.2", "2402:4e00::1", "2402:4e00::2"]));
    }

    /// Loopback targets only: the probe's logic without touching any other address (and a UDP
    /// `connect` sends nothing anyway).
    #[test]
    fn the_route_probe_on_loopback() {
        let v4: SocketAddr = "127.0.0.1:53".parse().unwrap();
        assert!(has_route(v4));
        let v6: SocketAddr = "[::1]:53".parse().unwrap();
        let v6_up = UdpSocket::bind("[::1]:0").is_ok();
        assert_eq!(has_route(v6), v6_up, "IPv6 loopback is routable exactly when it exists");
        let probe = RouteProbe { v4, v6 };
        assert_eq!(probe.stack(), IpStack::of(true, v6_up));
        assert_eq!(FixedStack(IpStack::V6).stack(), IpStack::V6);
        assert_eq!(IpStack::of(false, false), IpStack::None);
    }
}
