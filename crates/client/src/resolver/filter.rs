//! Which addresses an answer may hand the app.

use std::collections::HashMap;
use std::net::IpAddr;

/// Splits `ips` into the usable and the dropped (with the reason). `client_isp` set: nodes
/// labelled with another carrier are dropped.
pub fn filter(
    ips: &[IpAddr],
    allow_private: bool,
    client_isp: Option<&str>,
    labels: &HashMap<IpAddr, String>,
) -> (Vec<IpAddr>, Vec<(IpAddr, &'static str)>) {
    use httpdns_core::ip::{classify, IpClass};
    let mut kept = Vec::with_capacity(ips.len());
    let mut dropped = Vec::new();
    for &ip in ips {
        let ip = ip.to_canonical();
        let reason = match classify(ip) {
            IpClass::Invalid => Some("unroutable address"),
            IpClass::Private if !allow_private => Some("private or loopback address for a public name"),
            _ => match (client_isp, labels.get(&ip)) {
                (Some(mine), Some(theirs)) if !theirs.eq_ignore_ascii_case(mine) => {
                    Some("node of another carrier")
                }
                _ => None,
            },
        };
        match reason {
            Some(r) => dropped.push((ip, r)),
            None if !kept.contains(&ip) => kept.push(ip),
            None => {}
        }
    }
    (kept, dropped)
}
