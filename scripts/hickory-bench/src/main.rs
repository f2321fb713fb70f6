//! hickory-server 0.26 answering scripts/bench-dns.sh's zones over UDP on 127.0.0.1:PORT:
//! `www.example.com` and `n1..nNAMES.bench.example`, two A records each. The peer behind the
//! "hickory-proto only" entry of docs/decisions.md. Run pinned to one core like the other
//! servers: `hickory-bench PORT [NAMES]`.

use std::sync::Arc;

use hickory_proto::rr::rdata::{A, NS, SOA};
use hickory_proto::rr::{LowerName, Name, RData, Record};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use hickory_server::Server;

#[tokio::main]
async fn main() {
    let usage = "usage: hickory-bench PORT [NAMES]";
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).expect(usage);
    let names: u32 = std::env::args().nth(2).map_or(0, |n| n.parse().expect(usage));
    let name = |s: &str| Name::from_ascii(s).expect("valid name");
    let mut catalog = Catalog::new();
    for (apex, owners) in [
        ("www.example.com.", vec!["www.example.com.".to_string()]),
        ("bench.example.", (1..=names).map(|i| format!("n{i}.bench.example.")).collect()),
    ] {
        let origin = name(apex);
        let mut zone: InMemoryZoneHandler =
            InMemoryZoneHandler::empty(origin.clone(), ZoneType::Primary, AxfrPolicy::Deny);
        let soa = SOA::new(name(&format!("ns.{apex}")), name(&format!("hostmaster.{apex}")), 1, 3600, 600, 86400, 60);
        for data in [RData::SOA(soa), RData::NS(NS(name(&format!("ns.{apex}"))))] {
            assert!(zone.upsert_mut(Record::from_rdata(origin.clone(), 60, data), 1), "record added");
        }
        for owner in owners {
            for data in [RData::A(A::new(1, 1, 1, 1)), RData::A(A::new(1, 1, 1, 2))] {
                assert!(zone.upsert_mut(Record::from_rdata(name(&owner), 60, data), 1), "record added");
            }
        }
        catalog.upsert(LowerName::new(&origin), vec![Arc::new(zone)]);
    }
    let mut server = Server::new(catalog);
    server.register_socket(tokio::net::UdpSocket::bind(("127.0.0.1", port)).await.expect("bind"));
    server.block_until_done().await.expect("server runs");
}
