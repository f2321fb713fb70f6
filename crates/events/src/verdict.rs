//! The LocalDNS map's judgement of one `localdns_compare` report: what the system resolver
//! answered, set against what this service knows about the name. Pure.
//!
//! * A managed name is judged against its pool: an address that is no node of the pool is
//!   **hijacked** (this service is the authority, so nothing else is right); a node that is
//!   disabled is **stale** (an old answer still cached somewhere); a node labelled with another
//!   carrier than the client's, while the pool has nodes of the client's carrier, is
//!   **cross-carrier**.
//! * Any other name is judged against what HTTPDNS answered the device and what the upstreams
//!   answered this replica for the device's subnet (the cache, never a new query): an address
//!   outside both is **cross-carrier** when the classifier puts it in another carrier's network,
//!   else **hijacked**. With neither to compare against the report is **unverified**.
//! * Before all of that, an empty answer or an address no client could use (private, loopback,
//!   unspecified, documentation, multicast) is **invalid**.
//!
//! A report takes the worst verdict of its addresses, in the order invalid, hijacked, stale,
//! cross-carrier, consistent.

use std::net::IpAddr;

use httpdns_core::snapshot::Snapshot;
use httpdns_core::{DomainName, Token};

/// What a LocalDNS answer was, for the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    Consistent,
    CrossCarrier,
    Stale,
    Hijacked,
    Invalid,
    Unverified,
}

impl Verdict {
    pub const ALL: [Verdict; 6] = [
        Verdict::Consistent,
        Verdict::CrossCarrier,
        Verdict::Stale,
        Verdict::Hijacked,
        Verdict::Invalid,
        Verdict::Unverified,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Consistent => "consistent",
            Verdict::CrossCarrier => "cross_carrier",
            Verdict::Stale => "stale",
            Verdict::Hijacked => "hijacked",
            Verdict::Invalid => "invalid",
            Verdict::Unverified => "unverified",
        }
    }

    /// Severity for "worst of the addresses" (unverified never mixes with the others).
    fn rank(self) -> u8 {
        match self {
            Verdict::Consistent | Verdict::Unverified => 0,
            Verdict::CrossCarrier => 1,
            Verdict::Stale => 2,
            Verdict::Hijacked => 3,
            Verdict::Invalid => 4,
        }
    }
}

/// What is known about the reporting client and the name, besides the snapshot.
#[derive(Debug)]
pub struct Context<'a> {
    pub client_isp: Option<&'a Token>,
    /// What HTTPDNS answered the device (from the report).
    pub httpdns: &'a [IpAddr],
    /// What the upstreams answered this replica for the device's subnet (cached).
    pub upstream: &'a [IpAddr],
    /// Private and loopback addresses count as usable (intranet deployments, tests), as
    /// `HTTPDNS_ALLOW_PRIVATE_NODE_IPS` does for nodes.
    pub allow_private: bool,
}

/// Judges the system resolver's answer `localdns` for `name`. `isp_of` classifies an address
/// (operator networks, then GeoIP).
pub fn judge(
    snapshot: &Snapshot,
    name: &DomainName,
    localdns: &[IpAddr],
    cx: &Context<'_>,
    isp_of: impl Fn(IpAddr) -> Option<Token>,
) -> Verdict {
    if localdns.is_empty() || localdns.iter().any(|ip| !httpdns_core::ip::servable(*ip, cx.allow_private)) {
        return Verdict::Invalid;
    }
    let one = |ip: IpAddr| -> Verdict {
        // An alias (`cname`) is answered by another name's servers: judged as unmanaged names are.
        if let Some(domain) = snapshot.domain(name).filter(|d| d.cname.is_none()) {
            let mut nodes = snapshot.nodes().iter().filter(|n| domain.pools().any(|p| *p == n.spec.pool));
            let Some(node) = nodes.clone().find(|n| n.spec.ip == ip) else { return Verdict::Hijacked };
            if !node.spec.enabled {
                return Verdict::Stale;
            }
            match cx.client_isp {
                Some(isp) if node.spec.isp != *isp && nodes.any(|n| n.usable && n.spec.isp == *isp) => {
                    Verdict::CrossCarrier
                }
                _ => Verdict::Consistent,
            }
        } else if cx.httpdns.is_empty() && cx.upstream.is_empty() {
            Verdict::Unverified
        } else if cx.httpdns.contains(&ip) || cx.upstream.contains(&ip) {
            Verdict::Consistent
        } else {
            match (cx.client_isp, isp_of(ip)) {
                (Some(mine), Some(theirs)) if *mine != theirs => Verdict::CrossCarrier,
                _ => Verdict::Hijacked,
            }
        }
    };
    localdns.iter().map(|ip| one(*ip)).max_by_key(|v| v.rank()).unwrap_or(Verdict::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use httpdns_core::model::{DomainSpec, NodeSpec};
    use httpdns_core::snapshot::{Model, Policy};

    fn t(s: &str) -> Token {
        Token::parse(s).unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn snapshot() -> Snapshot {
        let node = |id: &str, addr: &str, isp: &str, enabled: bool| {
            (
                id.to_owned(),
                NodeSpec {
                    ip: ip(addr),
                    pool: t("edge"),
                    isp: t(isp),
                    region: t("shanghai"),
                    bandwidth_mbps: 1000.0,
                    load_pct: 10.0,
                    latency_ms: 10.0,
                    enabled,
                },
            )
        };
        let model = Model {
            nodes: vec![
                node("u1", "1.1.1.1", "unicom", true),
                node("t1", "2.2.2.2", "telecom", true),
                node("old", "3.3.3.3", "unicom", false),
            ],
            domains: vec![(
                DomainName::parse("www.example.com").unwrap(),
                DomainSpec::pooled(t("edge"), 60, 4),
            )],
            ..Model::default()
        };
        Snapshot::build(model, Policy::default(), 1)
    }

    #[test]
    fn managed_names_against_their_pool() {
        let s = snapshot();
        let www = DomainName::parse("www.example.com").unwrap();
        let unicom = t("unicom");
        let cx = Context { client_isp: Some(&unicom), httpdns: &[], upstream: &[], allow_private: false };
        let judge = |ips: &[&str]| {
            let ips: Vec<IpAddr> = ips.iter().map(|s| ip(s)).collect();
            judge(&s, &www, &ips, &cx, |_| None)
        };
        assert_eq!(judge(&["1.1.1.1"]), Verdict::Consistent);
        assert_eq!(judge(&["2.2.2.2"]), Verdict::CrossCarrier);
        assert_eq!(judge(&["3.3.3.3"]), Verdict::Stale);
        assert_eq!(judge(&["1.1.1.1", "9.9.9.9"]), Verdict::Hijacked, "worst address wins");
        assert_eq!(judge(&["10.0.0.1"]), Verdict::Invalid);
        assert_eq!(judge(&["127.0.0.1", "9.9.9.9"]), Verdict::Invalid);
        assert_eq!(judge(&[]), Verdict::Invalid);
    }

    #[test]
    fn other_names_against_httpdns_and_the_upstreams() {
        let s = snapshot();
        let other = DomainName::parse("img.other.net").unwrap();
        let unicom = t("unicom");
        let httpdns = [ip("5.5.5.5")];
        let upstream = [ip("6.6.6.6")];
        let cx = Context {
            client_isp: Some(&unicom),
            httpdns: &httpdns,
            upstream: &upstream,
            allow_private: false,
        };
        let isp_of = |a: IpAddr| (a == ip("7.7.7.7")).then(|| t("telecom"));
        assert_eq!(judge(&s, &other, &[ip("5.5.5.5")], &cx, isp_of), Verdict::Consistent);
        assert_eq!(judge(&s, &other, &[ip("6.6.6.6")], &cx, isp_of), Verdict::Consistent);
        assert_eq!(judge(&s, &other, &[ip("7.7.7.7")], &cx, isp_of), Verdict::CrossCarrier);
        assert_eq!(judge(&s, &other, &[ip("8.8.4.4")], &cx, isp_of), Verdict::Hijacked);
        let nothing =
            Context { client_isp: Some(&unicom), httpdns: &[], upstream: &[], allow_private: false };
        assert_eq!(judge(&s, &other, &[ip("8.8.4.4")], &nothing, isp_of), Verdict::Unverified);
    }
}
