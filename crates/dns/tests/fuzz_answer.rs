//! A proptest fuzz harness for the DNS decoder behind plain DNS and DoH: any bytes in, no
//! panic out, and a reply to anything that carries a message id. Run long with
//! `PROPTEST_CASES=2000000 cargo test --release -p httpdns-dns --test fuzz_answer`.

use std::net::IpAddr;

use hickory_proto::rr::RecordType;
use httpdns_core::model::{DomainSpec, NodeSpec};
use httpdns_core::snapshot::{AllUp, Model, Policy};
use httpdns_core::{ClientView, DomainName, Snapshot, Token};
use httpdns_dns::{answer, build_query, Answer, Context, Transport};
use proptest::prelude::*;

fn snapshot() -> Snapshot {
    let tok = |s: &str| Token::parse(s).unwrap();
    let node = |ip: &str| NodeSpec {
        ip: ip.parse().unwrap(),
        pool: tok("edge"),
        isp: tok("telecom"),
        region: tok("beijing"),
        bandwidth_mbps: 1000.0,
        load_pct: 10.0,
        latency_ms: 5.0,
        enabled: true,
    };
    let model = Model {
        nodes: vec![("a".into(), node("1.1.1.1")), ("b".into(), node("2402:4e00::1"))],
        domains: vec![(
            DomainName::parse("www.example.com").unwrap(),
            DomainSpec::pooled(tok("edge"), 60, 4),
        )],
        ..Model::default()
    };
    Snapshot::build(model, Policy::default(), 1)
}

fn run(bytes: &[u8], transport: Transport) -> Option<Answer> {
    let snap = snapshot();
    let ctx = Context {
        snapshot: &snap,
        health: &AllUp,
        classify: |_: IpAddr| (ClientView::default(), 0),
        tally: None,
    };
    answer(bytes, "203.0.113.1".parse().unwrap(), transport, &ctx)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let r = run(&bytes, Transport::Udp);
        if bytes.len() < 12 {
            prop_assert!(r.is_none());
        }
    }

    #[test]
    fn mutated_queries(flips in proptest::collection::vec((0usize..64, any::<u8>()), 0..8), qtype in 0u16..300, ecs in any::<bool>()) {
        let subnet = ecs.then(|| ("1.2.3.0".parse::<IpAddr>().unwrap(), 24));
        let mut q = build_query(1, "www.example.com.", RecordType::from(qtype), subnet).unwrap();
        for (pos, byte) in flips {
            if !q.is_empty() {
                let i = pos % q.len();
                q[i] = byte;
            }
        }
        let _ = run(&q, Transport::Udp);
        let _ = run(&q, Transport::Stream);
    }
}
