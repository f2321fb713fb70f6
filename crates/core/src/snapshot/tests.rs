use std::net::IpAddr;

use proptest::prelude::*;

use super::*;
use crate::model::{DomainSpec, NodeSpec};
use crate::score::score;

fn tok(s: &str) -> Token {
    Token::parse(s).unwrap()
}

fn name(s: &str) -> DomainName {
    DomainName::parse(s).unwrap()
}

fn node(ip: &str, pool: &str, isp: &str, region: &str, latency: f64) -> NodeSpec {
    NodeSpec {
        ip: ip.parse().unwrap(),
        pool: tok(pool),
        isp: tok(isp),
        region: tok(region),
        bandwidth_mbps: 1000.0,
        load_pct: 20.0,
        latency_ms: latency,
        enabled: true,
    }
}

fn view(isp: Option<&str>, region: Option<&str>) -> ClientView {
    ClientView { isp: isp.map(tok), region: region.map(tok) }
}

fn no_band() -> Policy {
    Policy { band: 0.0, ..Policy::default() }
}

fn model() -> Model {
    Model {
        nodes: vec![
            ("t-bj".into(), node("1.1.1.1", "edge", "telecom", "beijing", 10.0)),
            ("t-sh".into(), node("1.1.1.2", "edge", "telecom", "shanghai", 5.0)),
            ("u-bj".into(), node("2.2.2.1", "edge", "unicom", "beijing", 1.0)),
            ("u-sh".into(), node("2.2.2.2", "edge", "unicom", "shanghai", 30.0)),
            ("t-bj6".into(), node("2402:4e00::1", "edge", "telecom", "beijing", 10.0)),
            ("other".into(), node("3.3.3.3", "other", "telecom", "beijing", 0.0)),
        ],
        domains: vec![
            (name("www.example.com"), DomainSpec::pooled(tok("edge"), 60, 4)),
            (name("one.example.com"), DomainSpec::pooled(tok("edge"), 30, 1)),
            (name("empty.example.com"), DomainSpec::pooled(tok("nobody"), 30, 2)),
        ],
        ..Model::default()
    }
}

fn ips(s: &Snapshot, n: &str, fam: Family, v: &ClientView) -> (Vec<String>, AnswerStatus) {
    match s.resolve(&name(n), fam, v, 0, &AllUp) {
        Resolution::Managed(a) => (a.ips.iter().map(|i| i.to_string()).collect(), a.status),
        Resolution::NotManaged => panic!("{n} not managed"),
    }
}

#[test]
fn telecom_client_gets_only_telecom_nodes_ranked_by_score() {
    let s = Snapshot::build(model(), no_band(), 1);
    // Beijing telecom client: t-bj scores 0.4/1.1+0.3+0.16+0.1 = 0.923636..,
    // t-sh 0.4/1.05+0.3+0.16+0.05 = 0.890952.. -> t-bj first despite higher latency.
    let (got, status) = ips(&s, "www.example.com", Family::V4, &view(Some("telecom"), Some("beijing")));
    assert_eq!(got, ["1.1.1.1", "1.1.1.2"]);
    assert_eq!(status, AnswerStatus::Ok);
    // Shanghai telecom client: t-sh 0.4/1.05+0.56 = 0.940952.., t-bj 0.4/1.1+0.51 = 0.873636.
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("telecom"), Some("shanghai")));
    assert_eq!(got, ["1.1.1.2", "1.1.1.1"]);
}

#[test]
fn names_of_one_pool_share_one_copy_of_its_name() {
    // `model()` parses each domain's pool separately, as the store's rows are read.
    let s = Snapshot::build(model(), no_band(), 1);
    let pool_text = |n: &str| s.domain(&name(n)).unwrap().pool.as_ref().unwrap().as_str().as_ptr();
    assert_eq!(pool_text("www.example.com"), pool_text("one.example.com"));
    assert_ne!(pool_text("www.example.com"), pool_text("empty.example.com"));
    let (got, _) = ips(&s, "one.example.com", Family::V4, &view(Some("unicom"), Some("beijing")));
    assert_eq!(got, ["2.2.2.1"]);
}

#[test]
fn unknown_isp_falls_back_to_all_nodes() {
    let s = Snapshot::build(model(), no_band(), 1);
    // Scores with the client in no known region (geo 0.05 for all):
    // u-bj 0.4/1.01+0.51=0.906040, t-sh 0.890952, t-bj 0.873636, u-sh 0.4/1.3+0.51=0.817692.
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("mobile"), None));
    assert_eq!(got, ["2.2.2.1", "1.1.1.2", "1.1.1.1", "2.2.2.2"]);
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(None, None));
    assert_eq!(got, ["2.2.2.1", "1.1.1.2", "1.1.1.1", "2.2.2.2"]);
}

#[test]
fn max_answers_and_families() {
    let s = Snapshot::build(model(), no_band(), 1);
    let (got, _) = ips(&s, "one.example.com", Family::V4, &view(Some("unicom"), Some("shanghai")));
    // u-bj: 0.4/1.01+0.51 = 0.906; u-sh: 0.4/1.3+0.56 = 0.8677.
    assert_eq!(got, ["2.2.2.1"]);
    let (got, status) = ips(&s, "www.example.com", Family::V6, &view(Some("unicom"), None));
    assert_eq!((got, status), (vec!["2402:4e00::1".to_string()], AnswerStatus::Ok));
}

#[test]
fn empty_pool_and_unmanaged_names() {
    let s = Snapshot::build(model(), no_band(), 1);
    let (got, status) = ips(&s, "empty.example.com", Family::V4, &ClientView::default());
    assert!(got.is_empty());
    assert_eq!(status, AnswerStatus::NoHealthyNode);
    assert_eq!(
        s.resolve(&name("nope.example.com"), Family::V4, &ClientView::default(), 0, &AllUp),
        Resolution::NotManaged
    );
}

#[test]
fn disabled_and_unservable_nodes_never_appear() {
    let mut m = model();
    m.nodes[0].1.enabled = false; // t-bj
    m.nodes.push(("lo".into(), node("127.0.0.1", "edge", "telecom", "beijing", 0.0)));
    m.nodes.push(("zero".into(), node("0.0.0.0", "edge", "telecom", "beijing", 0.0)));
    let s = Snapshot::build(m.clone(), no_band(), 1);
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("telecom"), Some("beijing")));
    assert_eq!(got, ["1.1.1.2"]);
    assert_eq!(s.stats().unservable_nodes, 2);

    // Private addresses are served only when the policy allows them; 0.0.0.0 never.
    let s = Snapshot::build(m, Policy { allow_private: true, ..no_band() }, 1);
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("telecom"), Some("beijing")));
    assert_eq!(got, ["127.0.0.1", "1.1.1.2"]);
}

#[test]
fn disabled_family_is_no_record_not_no_node() {
    let mut m = model();
    m.nodes.retain(|(id, _)| id != "t-bj6");
    let s = Snapshot::build(m, no_band(), 1);
    let (_, status) = ips(&s, "www.example.com", Family::V6, &ClientView::default());
    assert_eq!(status, AnswerStatus::NoRecord);
}

struct Down(Vec<u32>);
impl NodeHealth for Down {
    fn is_up(&self, node: u32) -> bool {
        !self.0.contains(&node)
    }
}

#[test]
fn down_nodes_are_skipped_and_isp_falls_back_then_fails_open() {
    let s = Snapshot::build(model(), no_band(), 1);
    let v = view(Some("telecom"), Some("beijing"));
    let n = name("www.example.com");
    // Both telecom v4 nodes down: fall back to every up node (the unicom ones).
    let Resolution::Managed(a) = s.resolve(&n, Family::V4, &v, 0, &Down(vec![0, 1])) else { panic!() };
    assert_eq!(a.ips, ["2.2.2.1".parse::<IpAddr>().unwrap(), "2.2.2.2".parse().unwrap()]);
    assert_eq!(a.status, AnswerStatus::Ok);
    // Everything down: fail open with the telecom nodes.
    let Resolution::Managed(a) = s.resolve(&n, Family::V4, &v, 0, &Down(vec![0, 1, 2, 3])) else { panic!() };
    assert_eq!(a.status, AnswerStatus::FailOpen);
    assert_eq!(a.ips, ["1.1.1.1".parse::<IpAddr>().unwrap(), "1.1.1.2".parse().unwrap()]);
}

#[test]
fn band_rotates_near_equal_nodes_per_client() {
    let nodes: Vec<(String, NodeSpec)> = (0..4)
        .map(|i| (format!("n{i}"), node(&format!("5.5.5.{}", i + 1), "edge", "telecom", "beijing", 10.0)))
        .collect();
    let m = Model {
        nodes,
        domains: vec![(name("a.example.com"), DomainSpec::pooled(tok("edge"), 60, 2))],
        ..Model::default()
    };
    let s = Snapshot::build(m, Policy::default(), 1);
    let v = view(Some("telecom"), Some("beijing"));
    let mut firsts = std::collections::HashSet::new();
    for seed in 0..4u64 {
        let Resolution::Managed(a) = s.resolve(&name("a.example.com"), Family::V4, &v, seed, &AllUp) else {
            panic!()
        };
        assert_eq!(a.ips.len(), 2);
        firsts.insert(a.ips[0]);
        // Same seed, same answer.
        assert_eq!(s.resolve(&name("a.example.com"), Family::V4, &v, seed, &AllUp), Resolution::Managed(a));
    }
    assert_eq!(firsts.len(), 4, "every equal node leads for some client");
}

#[test]
fn client_seed_ignores_ipv6_interface_id() {
    let a: IpAddr = "2402:4e00:1:2::1".parse().unwrap();
    let b: IpAddr = "2402:4e00:1:2:ffff::9".parse().unwrap();
    assert_eq!(client_seed(a), client_seed(b));
    assert_ne!(client_seed("1.2.3.4".parse().unwrap()), client_seed("1.2.3.5".parse().unwrap()));
}

// ---- properties ---------------------------------------------------------------------------

const ISPS: [&str; 3] = ["telecom", "unicom", "mobile"];
const REGIONS: [&str; 3] = ["beijing", "shanghai", "guangdong"];
const POOLS: [&str; 2] = ["edge", "other"];

fn arb_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        // Mostly public addresses, with a good share of invalid and private ones.
        4 => (1u8..=223, any::<u8>(), any::<u8>(), 1u8..=254)
            .prop_map(|(a, b, c, d)| IpAddr::from([a, b, c, d])),
        1 => prop_oneof![
            Just("0.0.0.0".parse().unwrap()),
            Just("127.0.0.1".parse().unwrap()),
            Just("10.1.2.3".parse().unwrap()),
            Just("192.168.0.9".parse().unwrap()),
            Just("224.0.0.5".parse().unwrap()),
            Just("::1".parse().unwrap()),
            Just("fe80::1".parse().unwrap()),
        ],
        1 => any::<u128>().prop_map(|b| IpAddr::from(std::net::Ipv6Addr::from_bits((b & !(0xffffu128 << 112)) | (0x2402u128 << 112)))),
    ]
}

fn arb_node() -> impl Strategy<Value = NodeSpec> {
    (arb_ip(), 0..2usize, 0..3usize, 0..3usize, 0.0..500.0f64, 0.0..2000.0f64, 0.0..100.0f64, any::<bool>())
        .prop_map(|(ip, p, i, r, lat, bw, load, enabled)| NodeSpec {
            ip,
            pool: tok(POOLS[p]),
            isp: tok(ISPS[i]),
            region: tok(REGIONS[r]),
            bandwidth_mbps: bw,
            load_pct: load,
            latency_ms: lat,
            enabled,
        })
}

fn arb_view() -> impl Strategy<Value = ClientView> {
    (proptest::option::of(0..3usize), proptest::option::of(0..3usize))
        .prop_map(|(i, r)| ClientView { isp: i.map(|i| tok(ISPS[i])), region: r.map(|r| tok(REGIONS[r])) })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn answers_hold_only_usable_same_pool_nodes_and_prefer_the_isp(
        nodes in proptest::collection::vec(arb_node(), 0..40),
        client in arb_view(),
        seed in any::<u64>(),
        max in 1u32..8,
        band in 0.0..0.05f64,
        allow_private in any::<bool>(),
        down_mask in any::<u64>(),
    ) {
        let model = Model {
            nodes: nodes.iter().enumerate().map(|(i, n)| (format!("n{i}"), n.clone())).collect(),
            domains: vec![(name("d.example.com"), DomainSpec::pooled(tok("edge"), 60, max))],
            ..Model::default()
        };
        let s = Snapshot::build(model, Policy { band, allow_private, ..Policy::default() }, 1);
        let health = |i: u32| down_mask & (1 << (i % 64)) == 0;
        struct H<F>(F);
        impl<F: Fn(u32) -> bool> NodeHealth for H<F> { fn is_up(&self, n: u32) -> bool { (self.0)(n) } }

        for fam in [Family::V4, Family::V6] {
            let Resolution::Managed(a) = s.resolve(&name("d.example.com"), fam, &client, seed, &H(health)) else {
                panic!("managed");
            };
            prop_assert!(a.ips.len() <= max as usize);
            let mut seen = std::collections::HashSet::new();
            for ip in &a.ips {
                prop_assert!(seen.insert(*ip), "duplicate {ip}");
                prop_assert_eq!(Family::of(*ip), fam);
                prop_assert!(crate::ip::servable(*ip, allow_private), "unservable {ip}");
                // Some enabled node of pool "edge" has this address.
                prop_assert!(nodes.iter().any(|n| n.ip == *ip && n.enabled && n.pool.as_str() == "edge"));
            }
            let usable = |i: usize, n: &NodeSpec| {
                n.enabled && n.pool.as_str() == "edge" && Family::of(n.ip) == fam
                    && crate::ip::servable(n.ip, allow_private) && { let _ = i; true }
            };
            let any_usable = nodes.iter().enumerate().any(|(i, n)| usable(i, n));
            prop_assert_eq!(a.ips.is_empty(), !any_usable);
            // ISP preference: if an up node of the client's ISP exists, every answer is of it.
            if let Some(isp) = &client.isp {
                let same_up = nodes.iter().enumerate().any(|(i, n)| usable(i, n) && &n.isp == isp && health(i as u32));
                if same_up {
                    prop_assert_eq!(a.status, AnswerStatus::Ok);
                    for ip in &a.ips {
                        prop_assert!(nodes.iter().enumerate().any(|(i, n)| n.ip == *ip && &n.isp == isp && usable(i, n) && health(i as u32)));
                    }
                }
            }
            // Up nodes only, unless nothing is up (fail open).
            if a.status == AnswerStatus::Ok {
                for ip in &a.ips {
                    prop_assert!(nodes.iter().enumerate().any(|(i, n)| n.ip == *ip && usable(i, n) && health(i as u32)));
                }
            }
        }
    }

    #[test]
    fn answer_is_in_score_order_without_band(
        nodes in proptest::collection::vec(arb_node(), 1..30),
        client in arb_view(),
        seed in any::<u64>(),
    ) {
        let mut seen = std::collections::HashSet::new();
        let nodes: Vec<NodeSpec> = nodes.into_iter().filter(|n| seen.insert(n.ip)).collect();
        let model = Model {
            nodes: nodes.iter().enumerate().map(|(i, n)| (format!("n{i:02}"), n.clone())).collect(),
            domains: vec![(name("d.example.com"), DomainSpec::pooled(tok("edge"), 60, 32))],
            ..Model::default()
        };
        let s = Snapshot::build(model, no_band(), 1);
        if let Resolution::Managed(a) = s.resolve(&name("d.example.com"), Family::V4, &client, seed, &AllUp) {
            let w = Weights::default();
            let scores: Vec<f64> = a.ips.iter().map(|ip| {
                let n = nodes.iter().find(|n| n.ip == *ip && n.enabled && n.pool.as_str() == "edge").unwrap();
                score(&w, &ScoreInput { latency_ms: n.latency_ms, bandwidth_mbps: n.bandwidth_mbps,
                    load_pct: n.load_pct, same_region: client.region.as_ref() == Some(&n.region) })
            }).collect();
            for pair in scores.windows(2) {
                prop_assert!(pair[0] >= pair[1], "{scores:?}");
            }
        }
    }
}

// ---- live inputs and explanations -----------------------------------------------------------

#[test]
fn feedback_changes_the_ranking_for_its_clients_only() {
    let mut m = model();
    // u-sh (latency 30) loses to u-bj (latency 1) for Unicom Shanghai clients...
    let s = Snapshot::build(m.clone(), no_band(), 1);
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("unicom"), Some("shanghai")));
    assert_eq!(got, ["2.2.2.1", "2.2.2.2"]);
    // ...until Unicom Shanghai apps report 1 ms to it and 80 ms to u-bj.
    m.feedback = vec![
        Feedback { node: "u-sh".into(), isp: tok("unicom"), region: tok("shanghai"), latency_ms: 1.0 },
        Feedback { node: "u-bj".into(), isp: tok("unicom"), region: tok("shanghai"), latency_ms: 80.0 },
    ];
    let s = Snapshot::build(m, no_band(), 1);
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("unicom"), Some("shanghai")));
    assert_eq!(got, ["2.2.2.2", "2.2.2.1"]);
    // Unicom Beijing clients are not affected.
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("unicom"), Some("beijing")));
    assert_eq!(got, ["2.2.2.1", "2.2.2.2"]);
}

#[test]
fn feedback_for_a_region_without_nodes_still_applies() {
    let mut m = model();
    m.feedback =
        vec![Feedback { node: "u-sh".into(), isp: tok("unicom"), region: tok("guangdong"), latency_ms: 0.0 }];
    let s = Snapshot::build(m, no_band(), 1);
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("unicom"), Some("guangdong")));
    assert_eq!(got, ["2.2.2.2", "2.2.2.1"]);
}

#[test]
fn measured_values_override_the_operators() {
    let mut m = model();
    m.live.insert(
        "t-sh".into(),
        LiveNode { latency_ms: Some(500.0), load_pct: Some(95.0), bandwidth_mbps: None },
    );
    let s = Snapshot::build(m, no_band(), 1);
    let (got, _) = ips(&s, "www.example.com", Family::V4, &view(Some("telecom"), Some("shanghai")));
    assert_eq!(got, ["1.1.1.1", "1.1.1.2"], "the slow, loaded node drops behind");
    let e = s.nodes().iter().find(|n| &*n.id == "t-sh").unwrap();
    assert_eq!((e.latency_ms, e.latency_source, e.load_pct), (500.0, LatencySource::Measured, 95.0));
}

#[test]
fn explanation_gives_reasons() {
    let mut m = model();
    m.nodes[2].1.enabled = false; // u-bj
    m.nodes.push(("lo".into(), node("127.0.0.1", "edge", "telecom", "beijing", 0.0)));
    let s = Snapshot::build(m, no_band(), 1);
    let e = s
        .explain(
            &name("www.example.com"),
            Family::V4,
            &view(Some("telecom"), Some("beijing")),
            &crate::schedule::NO_ATTRS,
            0,
            &Down(vec![1]),
        )
        .unwrap();
    let reason = |id: &str| e.nodes.iter().find(|n| n.id == id).unwrap().reason;
    assert_eq!(e.answer, ["1.1.1.1".parse::<IpAddr>().unwrap()]);
    assert_eq!(e.candidates, "same_isp");
    assert_eq!(reason("t-bj"), "in answer");
    assert_eq!(reason("t-sh"), "down: failing health checks");
    assert_eq!(reason("u-bj"), "disabled");
    assert_eq!(reason("u-sh"), "other ISP: nodes of the client's ISP are up");
    assert!(reason("lo").starts_with("address not servable"));
    assert!(e.nodes.iter().all(|n| n.ip.is_ipv4()), "only the asked family");
    assert_eq!(e.nodes[0].id, "t-bj", "answered nodes first");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn explanation_agrees_with_resolve(
        nodes in proptest::collection::vec(arb_node(), 0..30),
        client in arb_view(),
        seed in any::<u64>(),
        down_mask in any::<u64>(),
    ) {
        let model = Model {
            nodes: nodes.iter().enumerate().map(|(i, n)| (format!("n{i}"), n.clone())).collect(),
            domains: vec![(name("d.example.com"), DomainSpec::pooled(tok("edge"), 60, 3))],
            ..Model::default()
        };
        let s = Snapshot::build(model, Policy::default(), 1);
        struct H(u64);
        impl NodeHealth for H { fn is_up(&self, n: u32) -> bool { self.0 & (1 << (n % 64)) == 0 } }
        for fam in [Family::V4, Family::V6] {
            let Resolution::Managed(a) = s.resolve(&name("d.example.com"), fam, &client, seed, &H(down_mask)) else { panic!() };
            let e = s.explain(&name("d.example.com"), fam, &client, &crate::schedule::NO_ATTRS, seed, &H(down_mask)).unwrap();
            prop_assert_eq!(&e.answer, &a.ips);
            let mut marked: Vec<IpAddr> = e.nodes.iter().filter(|n| n.in_answer).map(|n| n.ip).collect();
            marked.sort();
            marked.dedup();
            let mut answered = a.ips.clone();
            answered.sort();
            prop_assert_eq!(marked, answered);
        }
    }
}

/// A snapshot sharing the names of an earlier one answers as a fresh build of the whole model:
/// nodes added, moved between pools, disabled and removed; live figures and feedback changed;
/// a pool only a domain names.
#[test]
fn sharing_the_names_answers_as_a_fresh_build() {
    let before = Snapshot::build(model(), no_band(), 1);
    let mut changed = model();
    changed.nodes.retain(|(id, _)| id != "u-sh");
    changed.nodes.push(("n-new".into(), node("4.4.4.4", "edge", "mobile", "beijing", 2.0)));
    changed.nodes.push(("n-nobody".into(), node("5.5.5.5", "nobody", "telecom", "beijing", 3.0)));
    changed.nodes.iter_mut().find(|(id, _)| id == "other").unwrap().1.pool = tok("edge");
    changed.nodes.iter_mut().find(|(id, _)| id == "t-sh").unwrap().1.enabled = false;
    changed.live.insert("t-bj".into(), LiveNode { latency_ms: Some(50.0), ..LiveNode::default() });
    changed.feedback.push(Feedback {
        node: "u-bj".into(),
        isp: tok("telecom"),
        region: tok("beijing"),
        latency_ms: 90.0,
    });
    let fresh = Snapshot::build(changed.clone(), no_band(), 2);
    let shared = before.with_domains_of(Model { domains: Vec::new(), ..changed }, no_band(), 2);
    assert_eq!(shared.stats(), fresh.stats());
    assert_eq!(shared.revision(), 2);
    let views = [
        view(None, None),
        view(Some("telecom"), Some("beijing")),
        view(Some("unicom"), Some("shanghai")),
        view(Some("mobile"), None),
    ];
    for n in ["www.example.com", "one.example.com", "empty.example.com", "nope.example.com"] {
        for fam in [Family::V4, Family::V6] {
            for v in &views {
                for seed in [0, 1, 7] {
                    assert_eq!(
                        shared.resolve(&name(n), fam, v, seed, &AllUp),
                        fresh.resolve(&name(n), fam, v, seed, &AllUp),
                        "{n} {fam:?} {v:?} {seed}"
                    );
                }
            }
        }
    }
    // The node now in the pool only a domain named is answered.
    assert_eq!(ips(&shared, "empty.example.com", Family::V4, &views[0]).0, ["5.5.5.5"]);
}

/// Live figures, feedback or nothing for a node, as a model may hold them.
fn arb_inputs() -> impl Strategy<Value = (Option<LiveNode>, Vec<(usize, usize, f64)>)> {
    let live = proptest::option::of(
        (
            proptest::option::of(0.0..300.0f64),
            proptest::option::of(0.0..100.0f64),
            proptest::option::of(-1.0..5000.0f64),
        )
            .prop_map(|(latency_ms, load_pct, bandwidth_mbps)| LiveNode {
                latency_ms,
                load_pct,
                bandwidth_mbps,
            }),
    );
    let feedback = proptest::collection::vec((0..3usize, 0..3usize, -5.0..200.0f64), 0..3);
    (live, feedback)
}

/// The model with node `i`'s live figures and feedback set to `inputs`.
fn with_inputs(model: &mut Model, id: &str, (live, feedback): &(Option<LiveNode>, Vec<(usize, usize, f64)>)) {
    match live {
        Some(l) => drop(model.live.insert(id.to_string(), *l)),
        None => drop(model.live.remove(id)),
    }
    model.feedback.retain(|f| f.node != id);
    for &(i, r, latency_ms) in feedback {
        model.feedback.push(Feedback {
            node: id.to_string(),
            isp: tok(ISPS[i]),
            region: tok(REGIONS[r]),
            latency_ms,
        });
    }
}

/// Every answer, label and count of `a` and `b` agree.
fn assert_same_answers(a: &Snapshot, b: &Snapshot) {
    assert_eq!(a.stats(), b.stats());
    assert_eq!(a.nodes().len(), b.nodes().len());
    for (x, y) in a.nodes().iter().zip(b.nodes()) {
        assert_eq!(format!("{x:?}"), format!("{y:?}"));
        assert_eq!(a.node_by_ip(x.spec.ip).map(|n| &n.id), b.node_by_ip(x.spec.ip).map(|n| &n.id));
    }
    assert_eq!(a.pool_names().collect::<Vec<_>>(), b.pool_names().collect::<Vec<_>>());
    struct H(u64);
    impl NodeHealth for H {
        fn is_up(&self, n: u32) -> bool {
            self.0 & (1 << (n % 64)) == 0
        }
    }
    let views = [
        view(None, None),
        view(Some("telecom"), Some("beijing")),
        view(Some("unicom"), Some("shanghai")),
        view(Some("mobile"), Some("guangzhou")),
        view(Some("mobile"), None),
    ];
    for n in ["www.example.com", "o.example.com", "nope.example.com"] {
        for fam in [Family::V4, Family::V6] {
            for v in &views {
                for (seed, health) in [(0, 0), (1, 0b101), (7, u64::MAX), (3, 0b1100_0000)] {
                    let (n, h) = (name(n), H(health));
                    assert_eq!(
                        a.resolve(&n, fam, v, seed, &h),
                        b.resolve(&n, fam, v, seed, &h),
                        "{n} {fam:?} {v:?}"
                    );
                    assert_eq!(
                        format!("{:?}", a.explain(&n, fam, v, &crate::schedule::NO_ATTRS, seed, &h)),
                        format!("{:?}", b.explain(&n, fam, v, &crate::schedule::NO_ATTRS, seed, &h))
                    );
                }
            }
        }
    }
}

/// Asks every kind of client, so that each pool's rankings are computed and cached.
fn warm(s: &Snapshot) {
    for n in ["www.example.com", "o.example.com"] {
        for i in [None, Some("telecom"), Some("unicom"), Some("mobile")] {
            for r in [None, Some("beijing"), Some("shanghai"), Some("guangzhou")] {
                for fam in [Family::V4, Family::V6] {
                    s.resolve(&name(n), fam, &view(i, r), 0, &AllUp);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A snapshot derived by replacing some nodes' specs (same pool), live figures and
    /// feedback answers exactly as a fresh build of the changed model, whatever rankings the
    /// earlier one had cached.
    #[test]
    fn node_updates_answer_as_a_fresh_build(
        nodes in proptest::collection::vec((arb_node(), arb_inputs()), 1..30),
        updates in proptest::collection::vec((any::<proptest::sample::Index>(), arb_node(), arb_inputs()), 0..6),
        sorted in any::<bool>(),
    ) {
        let mut model = Model {
            domains: vec![
                (name("www.example.com"), DomainSpec::pooled(tok("edge"), 60, 3)),
                (name("o.example.com"), DomainSpec::pooled(tok("other"), 30, 2)),
            ],
            ..Model::default()
        };
        for (i, (spec, inputs)) in nodes.iter().enumerate() {
            // Ids in order, as the catalog builds, or not: the update must find them either way.
            let id = if sorted { format!("n{i:03}") } else { format!("n{:03}", (i * 7) % 31) };
            if model.nodes.iter().any(|(n, _)| *n == id) {
                continue;
            }
            model.nodes.push((id.clone(), spec.clone()));
            with_inputs(&mut model, &id, inputs);
        }
        let before = Snapshot::build(model.clone(), no_band(), 1);
        warm(&before);
        let mut node_updates = Vec::new();
        for (which, spec, inputs) in &updates {
            let (id, old) = model.nodes[which.index(model.nodes.len())].clone();
            let spec = NodeSpec { pool: old.pool.clone(), ..spec.clone() };
            model.nodes.iter_mut().find(|(n, _)| *n == id).unwrap().1 = spec.clone();
            with_inputs(&mut model, &id, inputs);
            node_updates.retain(|u: &NodeUpdate| u.id != id);
            node_updates.push(NodeUpdate {
                id: id.clone(),
                spec,
                live: model.live.get(&id).copied().unwrap_or_default(),
                feedback: model.feedback.iter().filter(|f| f.node == id).map(|f| (f.isp.clone(), f.region.clone(), f.latency_ms)).collect(),
            });
        }
        let derived = before.with_node_updates(node_updates, 2).expect("same ids and pools");
        prop_assert_eq!(derived.revision(), 2);
        assert_same_answers(&derived, &Snapshot::build(model, no_band(), 2));
    }
}

#[test]
fn node_updates_refuse_what_needs_a_fresh_build() {
    let s = Snapshot::build(model(), no_band(), 1);
    let update = |id: &str, spec: NodeSpec| NodeUpdate {
        id: id.into(),
        spec,
        live: LiveNode::default(),
        feedback: Vec::new(),
    };
    // Another pool: the pools' member lists change.
    assert!(s
        .with_node_updates(vec![update("t-bj", node("1.1.1.1", "other", "telecom", "beijing", 10.0))], 2)
        .is_none());
    // A node the snapshot does not have: an addition.
    assert!(s
        .with_node_updates(vec![update("new", node("9.9.9.9", "edge", "telecom", "beijing", 1.0))], 2)
        .is_none());
    // Disabling one is derived, and the pool answers without it at once.
    let mut off = node("1.1.1.1", "edge", "telecom", "beijing", 10.0);
    off.enabled = false;
    let d = s.with_node_updates(vec![update("t-bj", off)], 2).unwrap();
    let (got, _) = ips(&d, "www.example.com", Family::V4, &view(Some("telecom"), Some("beijing")));
    assert_eq!(got, ["1.1.1.2"]);
    assert!(d.node_by_ip("1.1.1.1".parse().unwrap()).is_none());
    assert_eq!(d.stats().usable_nodes, s.stats().usable_nodes - 1);
    // Two updates of one node: the second replaces the first, counted once.
    let mut off = node("1.1.1.1", "edge", "telecom", "beijing", 10.0);
    off.enabled = false;
    let twice = vec![update("t-bj", off.clone()), update("t-bj", off)];
    assert_eq!(s.with_node_updates(twice, 2).unwrap().stats(), d.stats());
}
