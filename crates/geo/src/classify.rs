use std::net::IpAddr;

use httpdns_core::{ClientView, Snapshot};

use crate::Geo;

/// The client view of `ip`: operator networks first, field by field, then the databases.
pub fn classify(snapshot: &Snapshot, geo: &Geo, ip: IpAddr) -> ClientView {
    classify_scoped(snapshot, geo, ip).0
}

/// [`classify`], and how many leading bits of `ip` decided the view: every address sharing
/// them gets the same view. DNS answers this as the EDNS Client Subnet scope (RFC 7871
/// §7.2.1), so resolvers cache an answer for exactly the network it was chosen for.
pub fn classify_scoped(snapshot: &Snapshot, geo: &Geo, ip: IpAddr) -> (ClientView, u8) {
    let ip = ip.to_canonical();
    let mut view = ClientView::default();
    // The operator network (or none), decided by this many bits (nested networks included).
    let mut bits = snapshot.networks_decided_prefix(ip);
    if let Some(net) = snapshot.network(ip) {
        view.isp = net.isp.clone();
        view.region = net.region.clone();
    }
    if view.isp.is_none() || view.region.is_none() {
        let info = geo.lookup(ip);
        bits = bits.max(info.prefix);
        if view.isp.is_none() {
            view.isp = info.isp;
        }
        if view.region.is_none() {
            view.region = info.region;
        }
    }
    (view, bits)
}
