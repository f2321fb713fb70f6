use std::net::IpAddr;

use httpdns_core::{ClientView, Snapshot};

use crate::Geo;

/// The client view of `ip`: operator networks first, field by field, then the databases.
pub fn classify(snapshot: &Snapshot, geo: &Geo, ip: IpAddr) -> ClientView {
    let ip = ip.to_canonical();
    let mut view = ClientView::default();
    if let Some(net) = snapshot.network(ip) {
        view.isp = net.isp.clone();
        view.region = net.region.clone();
    }
    if view.isp.is_none() || view.region.is_none() {
        let info = geo.lookup(ip);
        if view.isp.is_none() {
            view.isp = info.isp;
        }
        if view.region.is_none() {
            view.region = info.region;
        }
    }
    view
}
