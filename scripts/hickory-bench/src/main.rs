//! hickory-server 0.26 answering `www.example.com A` with the two records of
//! scripts/bench-dns.sh's zone, over UDP on 127.0.0.1:PORT: the peer behind the "hickory-proto
//! only" entry of docs/decisions.md. Run pinned to one core like the other servers.

use std::sync::Arc;

use hickory_proto::rr::rdata::{A, NS, SOA};
use hickory_proto::rr::{LowerName, Name, RData, Record};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use hickory_server::Server;

#[tokio::main]
async fn main() {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).expect("usage: hickory-bench PORT");
    let name = |s: &str| Name::from_ascii(s).expect("valid name");
    let origin = name("www.example.com.");
    let mut zone: InMemoryZoneHandler =
        InMemoryZoneHandler::empty(origin.clone(), ZoneType::Primary, AxfrPolicy::Deny);
    let soa =
        SOA::new(name("ns.www.example.com."), name("hostmaster.www.example.com."), 1, 3600, 600, 86400, 60);
    let records = [
        RData::SOA(soa),
        RData::NS(NS(name("ns.www.example.com."))),
        RData::A(A::new(1, 1, 1, 1)),
        RData::A(A::new(1, 1, 1, 2)),
    ];
    for data in records {
        assert!(zone.upsert_mut(Record::from_rdata(origin.clone(), 60, data), 1), "record added");
    }
    let mut catalog = Catalog::new();
    catalog.upsert(LowerName::new(&origin), vec![Arc::new(zone)]);
    let mut server = Server::new(catalog);
    server.register_socket(tokio::net::UdpSocket::bind(("127.0.0.1", port)).await.expect("bind"));
    server.block_until_done().await.expect("server runs");
}
