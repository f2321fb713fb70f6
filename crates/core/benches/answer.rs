//! Answer cost of the pure core: flat in the number of managed domains, the cost of a split,
//! of rules and of a backup pool against a plain name, the snapshot rebuild time for a large
//! node set, and the cost of one node's change at that size.
//!
//! Run: `cargo bench -p httpdns-core --bench answer`

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use httpdns_core::model::{DomainSpec, NodeSpec};
use httpdns_core::schedule::{ClientAttrs, Rule, RuleMatch, SplitEntry, VersionRange};
use httpdns_core::snapshot::{client_seed, AllUp, Model, NodeUpdate, Policy};
use httpdns_core::{ClientView, DomainName, Family, Snapshot, Token};

const ISPS: [&str; 4] = ["telecom", "unicom", "mobile", "cernet"];
const REGIONS: [&str; 8] =
    ["beijing", "shanghai", "guangdong", "zhejiang", "jiangsu", "sichuan", "hubei", "shandong"];

fn model(domains: usize, nodes: usize, pools: usize) -> Model {
    let tok = |s: &str| Token::parse(s).unwrap();
    let nodes = (0..nodes)
        .map(|i| {
            let ip = IpAddr::from([1 + (i >> 24) as u8 % 100, (i >> 16) as u8, (i >> 8) as u8, i as u8 | 1]);
            (
                format!("node-{i}"),
                NodeSpec {
                    ip,
                    pool: tok(&format!("pool{}", i % pools)),
                    isp: tok(ISPS[i % ISPS.len()]),
                    region: tok(REGIONS[(i / 4) % REGIONS.len()]),
                    bandwidth_mbps: 100.0 + (i % 900) as f64,
                    load_pct: (i % 100) as f64,
                    latency_ms: (i % 200) as f64,
                    enabled: i % 17 != 0,
                },
            )
        })
        .collect();
    let domains = (0..domains)
        .map(|i| {
            (
                DomainName::parse(&format!("d{i}.example.com")).unwrap(),
                DomainSpec::pooled(tok(&format!("pool{}", i % pools)), 60, 4),
            )
        })
        .collect();
    Model { nodes, domains, ..Model::default() }
}

fn answer(c: &mut Criterion) {
    let view = ClientView {
        isp: Some(Token::parse("unicom").unwrap()),
        region: Some(Token::parse("shanghai").unwrap()),
    };
    let seed = client_seed("203.0.113.7".parse().unwrap());
    let mut group = c.benchmark_group("resolve");
    for domains in [1_000usize, 1_000_000] {
        let snap = Snapshot::build(model(domains, 2_000, 50), Policy::default(), 1);
        let names: Vec<DomainName> = (0..1024)
            .map(|i| DomainName::parse(&format!("d{}.example.com", (i * 7919) % domains)).unwrap())
            .collect();
        let mut i = 0usize;
        group.bench_function(format!("{domains}_domains"), |b| {
            b.iter(|| {
                i = (i + 1) & 1023;
                black_box(snap.resolve(&names[i], Family::V4, &view, seed, &AllUp))
            });
        });
    }
    group.finish();
}

/// The same 2,000 nodes in 50 pools, one name per way of choosing the pool: a plain `pool`, a
/// 70/30 split, three rules (the last one matching), and a split with a backup pool
/// (`min_healthy` 2, so the chosen pool's up nodes are counted on every answer).
fn scheduling(c: &mut Criterion) {
    let tok = |s: &str| Token::parse(s).unwrap();
    let mut m = model(1_000, 2_000, 50);
    let split =
        vec![SplitEntry { pool: tok("pool1"), weight: 70 }, SplitEntry { pool: tok("pool2"), weight: 30 }];
    let rule = |m: RuleMatch, p: &str| Rule { matches: m, pool: tok(p) };
    let mut split_d = DomainSpec::pooled(tok("pool0"), 60, 4);
    split_d.pool = None;
    split_d.split = split;
    let mut rules_d = DomainSpec::pooled(tok("pool0"), 60, 4);
    rules_d.rules = vec![
        rule(RuleMatch { isp: Some(tok("mobile")), ..RuleMatch::default() }, "pool3"),
        rule(RuleMatch { tag: Some(tok("beta")), ..RuleMatch::default() }, "pool4"),
        rule(
            RuleMatch { app_version: Some(VersionRange::parse(">=5.2").unwrap()), ..RuleMatch::default() },
            "pool5",
        ),
    ];
    let mut backup_d = split_d.clone();
    backup_d.backup_pool = Some(tok("pool6"));
    backup_d.min_healthy = 2;
    for (name, spec) in [("split", split_d), ("rules", rules_d), ("backup", backup_d)] {
        m.domains.push((DomainName::parse(&format!("{name}.example.com")).unwrap(), spec));
    }
    let snap = Snapshot::build(m, Policy::default(), 1);
    let view = ClientView { isp: Some(tok("unicom")), region: Some(tok("shanghai")) };
    let attrs = ClientAttrs { app_version: ClientAttrs::parse_version("5.3.1"), tags: vec!["vip".into()] };
    // Clients vary, so the split's hash is not answered from one cache line.
    let seeds: Vec<u64> =
        (0..1024u32).map(|i| client_seed(IpAddr::from((0x0b00_0000 + i * 7919).to_be_bytes()))).collect();
    let mut group = c.benchmark_group("resolve_scheduling");
    for name in ["d1.example.com", "split.example.com", "rules.example.com", "backup.example.com"] {
        let dn = DomainName::parse(name).unwrap();
        let mut i = 0usize;
        group.bench_function(name.split('.').next().unwrap(), |b| {
            b.iter(|| {
                i = (i + 1) & 1023;
                black_box(snap.resolve_with(&dn, Family::V4, &view, &attrs, seeds[i], &AllUp))
            });
        });
    }
    group.finish();
}

fn rebuild(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot_build");
    group.sample_size(10);
    group.bench_function("100k_nodes_10k_domains", |b| {
        b.iter_batched(
            || model(10_000, 100_000, 500),
            |m| black_box(Snapshot::build(m, Policy::default(), 1)),
            BatchSize::LargeInput,
        );
    });
    // One node disabled and enabled again: what a node change costs at this size.
    let base = Snapshot::build(model(10_000, 100_000, 500), Policy::default(), 1);
    let node = base.nodes()[1_234].clone();
    let mut toggled = false;
    group.sample_size(50);
    group.bench_function("100k_nodes_one_node_updated", |b| {
        b.iter(|| {
            toggled = !toggled;
            let update = NodeUpdate {
                id: node.id.to_string(),
                spec: NodeSpec { enabled: !toggled, ..node.spec.clone() },
                live: Default::default(),
                feedback: Vec::new(),
            };
            black_box(base.with_node_updates(vec![update], 2).expect("same pool"))
        });
    });
    group.finish();
}

criterion_group!(benches, answer, scheduling, rebuild);
criterion_main!(benches);
