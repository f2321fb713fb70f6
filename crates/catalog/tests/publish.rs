//! The catalog against a real SQLite store: a change to one node's spec or live figures is
//! published by rebuilding that node and its pool alone, and answers exactly as a snapshot
//! built from the whole model would; anything more rebuilds more.

use std::collections::HashMap;
use std::sync::Arc;

use httpdns_catalog::{Catalog, CatalogMetrics};
use httpdns_core::live::LiveNode;
use httpdns_core::snapshot::{AllUp, ClientView, Family, Model, Policy, Resolution};
use httpdns_core::{DomainName, Snapshot, Token};
use httpdns_live::health::HealthRegistry;
use httpdns_store::{Kind, Store};

struct Fixture {
    catalog: Catalog,
    registry: prometheus::Registry,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&format!("sqlite://{}", dir.path().join("c.db").display())).await.unwrap();
    let registry = prometheus::Registry::new();
    let catalog = Catalog::new(
        store,
        Policy::default(),
        CatalogMetrics::new(&registry),
        Arc::new(HealthRegistry::default()),
    );
    Fixture { catalog, registry, _dir: dir }
}

fn node(ip: &str, pool: &str, isp: &str, latency: u32, enabled: bool) -> String {
    format!(
        r#"{{"ip":"{ip}","pool":"{pool}","isp":"{isp}","region":"beijing","latency_ms":{latency},"enabled":{enabled}}}"#
    )
}

/// Publishes so far, by what was rebuilt.
fn builds(f: &Fixture) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for family in f.registry.gather() {
        if family.name() == "snapshot_builds_total" {
            for m in family.get_metric() {
                out.insert(m.get_label()[0].value().to_string(), m.get_counter().get_value() as u64);
            }
        }
    }
    out
}

fn answer(s: &Snapshot, isp: Option<&str>) -> Vec<String> {
    let view = ClientView { isp: isp.map(|i| Token::parse(i).unwrap()), region: None };
    match s.resolve(&DomainName::parse("www.example.com").unwrap(), Family::V4, &view, 0, &AllUp) {
        Resolution::Managed(a) => a.ips.iter().map(|i| i.to_string()).collect(),
        Resolution::NotManaged => panic!("not managed"),
    }
}

/// The snapshot a build of the whole stored model gives, live figures included.
async fn fresh(f: &Fixture, live: &HashMap<String, LiveNode>) -> Snapshot {
    let (revision, changes) = f.catalog.store().changes_since(0).await.unwrap();
    let mut model = Model { live: live.clone(), ..Model::default() };
    let mut nodes = std::collections::BTreeMap::new();
    for c in changes {
        match (c.kind, c.body) {
            (Kind::Node, Some(b)) => drop(nodes.insert(c.name, serde_json::from_str(&b).unwrap())),
            (Kind::Node, None) => drop(nodes.remove(&c.name)),
            (Kind::Domain, Some(b)) => {
                model.domains.push((DomainName::parse(&c.name).unwrap(), serde_json::from_str(&b).unwrap()));
            }
            _ => {}
        }
    }
    model.nodes = nodes.into_iter().collect();
    Snapshot::build(model, Policy::default(), revision)
}

async fn assert_as_fresh(f: &Fixture, live: &HashMap<String, LiveNode>) {
    let fresh = fresh(f, live).await;
    let published = f.catalog.snapshot();
    assert_eq!(published.stats(), fresh.stats());
    for isp in [None, Some("telecom"), Some("unicom"), Some("mobile")] {
        assert_eq!(answer(&published, isp), answer(&fresh, isp), "{isp:?}");
    }
}

#[tokio::test]
async fn one_node_changes_rebuild_that_node_and_answer_as_a_full_build() {
    let f = fixture().await;
    let store = f.catalog.store();
    for (id, ip, isp, latency) in
        [("a", "1.1.1.1", "telecom", 5), ("b", "1.1.1.2", "telecom", 10), ("c", "2.2.2.1", "unicom", 1)]
    {
        store.put(Kind::Node, id, &node(ip, "edge", isp, latency, true)).await.unwrap();
    }
    store.put(Kind::Node, "z", &node("3.3.3.1", "other", "telecom", 1, true)).await.unwrap();
    store.put(Kind::Domain, "www.example.com", r#"{"pool":"edge","ttl":60,"max_answers":2}"#).await.unwrap();
    f.catalog.sync().await.unwrap();
    assert_eq!(builds(&f)["full"], 1);
    assert_eq!(answer(&f.catalog.snapshot(), Some("telecom")), ["1.1.1.1", "1.1.1.2"]);
    let live = HashMap::new();
    assert_as_fresh(&f, &live).await;

    // Disabling a node is that node and its pool rebuilt; it leaves the answer at once.
    store.put(Kind::Node, "a", &node("1.1.1.1", "edge", "telecom", 5, false)).await.unwrap();
    f.catalog.sync().await.unwrap();
    assert_eq!(builds(&f)["nodes"], 1);
    assert_eq!(answer(&f.catalog.snapshot(), Some("telecom")), ["1.1.1.2"]);
    assert_as_fresh(&f, &live).await;

    // A new address and latency for another, then enabled again: still derived.
    store.put(Kind::Node, "b", &node("1.1.1.9", "edge", "telecom", 1, true)).await.unwrap();
    store.put(Kind::Node, "a", &node("1.1.1.1", "edge", "telecom", 5, true)).await.unwrap();
    f.catalog.sync().await.unwrap();
    assert_eq!(builds(&f)["nodes"], 2);
    assert_eq!(answer(&f.catalog.snapshot(), Some("telecom")), ["1.1.1.9", "1.1.1.1"]);
    assert!(f.catalog.snapshot().node_by_ip("1.1.1.2".parse().unwrap()).is_none());
    assert_as_fresh(&f, &live).await;

    // Measured latency of one node changes the ranking through the same path.
    let live: HashMap<String, LiveNode> =
        [("b".to_string(), LiveNode { latency_ms: Some(400.0), ..LiveNode::default() })].into();
    f.catalog.set_live(live.clone(), Vec::new()).await;
    assert_eq!(builds(&f)["nodes"], 3);
    assert_eq!(answer(&f.catalog.snapshot(), Some("telecom")), ["1.1.1.1", "1.1.1.9"]);
    assert_as_fresh(&f, &live).await;
    // Figures for a node the model does not have change nothing, and publish nothing.
    let mut unknown = live.clone();
    unknown.insert("nobody".into(), LiveNode { latency_ms: Some(1.0), ..LiveNode::default() });
    f.catalog.set_live(unknown, Vec::new()).await;
    assert_eq!(builds(&f).values().sum::<u64>(), 4);

    // A node moved to another pool, added or removed changes the pools' members: everything
    // but the names is rebuilt.
    store.put(Kind::Node, "z", &node("3.3.3.1", "edge", "telecom", 1, true)).await.unwrap();
    f.catalog.sync().await.unwrap();
    assert_eq!(builds(&f)["nodes_and_pools"], 1);
    assert_eq!(answer(&f.catalog.snapshot(), Some("telecom")), ["3.3.3.1", "1.1.1.1"]);
    store.put(Kind::Node, "y", &node("3.3.3.2", "edge", "telecom", 0, true)).await.unwrap();
    f.catalog.sync().await.unwrap();
    store.delete(Kind::Node, "y").await.unwrap();
    f.catalog.sync().await.unwrap();
    assert_eq!(builds(&f)["nodes_and_pools"], 3);
    assert_as_fresh(&f, &live).await;

    // A mirror rule changes nothing in the answers: the same snapshot at the new revision.
    let before = f.catalog.snapshot().revision();
    store
        .put(Kind::MirrorRule, "cdn", r#"{"path_prefix":"/x","origin":"https://origin.example"}"#)
        .await
        .unwrap();
    f.catalog.sync().await.unwrap();
    assert_eq!(builds(&f)["none"], 1);
    assert!(f.catalog.snapshot().revision() > before);
    assert_as_fresh(&f, &live).await;

    // A domain re-indexes the names.
    store.put(Kind::Domain, "www.example.com", r#"{"pool":"edge","ttl":60,"max_answers":1}"#).await.unwrap();
    f.catalog.sync().await.unwrap();
    assert_eq!(builds(&f)["full"], 2);
    assert_eq!(answer(&f.catalog.snapshot(), Some("telecom")), ["3.3.3.1"]);
    assert_as_fresh(&f, &live).await;
}

/// Everything the catalog publishes goes out on a `watch` channel, and a sync has sent what
/// it changed by the time it returns (the gateway relies on that: a rule is served from the
/// moment its `PUT` is answered). A channel sends only what changed.
#[tokio::test]
async fn a_sync_sends_the_snapshot_targets_rules_and_styles_before_it_returns() {
    let f = fixture().await;
    let store = f.catalog.store();
    let (snapshots, targets, rules, styles) =
        (f.catalog.snapshots(), f.catalog.targets(), f.catalog.mirror_rules(), f.catalog.image_styles());
    store.put(Kind::Pool, "edge", r#"{"health_check":{"kind":"tcp","port":80}}"#).await.unwrap();
    store.put(Kind::Node, "a", &node("1.1.1.1", "edge", "telecom", 5, true)).await.unwrap();
    store
        .put(Kind::MirrorRule, "cdn", r#"{"path_prefix":"/x","origin":"https://origin.example"}"#)
        .await
        .unwrap();
    f.catalog.sync().await.unwrap();
    for (name, changed) in [
        ("snapshots", snapshots.has_changed()),
        ("targets", targets.has_changed()),
        ("mirror_rules", rules.has_changed()),
    ] {
        assert!(changed.unwrap(), "{name} sent by the sync");
    }
    assert!(!styles.has_changed().unwrap(), "no style changed, none sent");
    assert!(
        Arc::ptr_eq(&snapshots.borrow(), &f.catalog.snapshot_full()),
        "the snapshot in force is the one sent"
    );
    assert_eq!(targets.borrow().iter().map(|t| t.node_id.as_str()).collect::<Vec<_>>(), ["a"]);
    assert_eq!(
        rules.borrow().iter().map(|(n, r)| (n.as_str(), r.path_prefix.as_str())).collect::<Vec<_>>(),
        [("cdn", "/x")]
    );

    // A subscriber that comes later sees the values in force.
    store.put(Kind::ImageStyle, "thumb", r#"{"process":"image/resize,w_100"}"#).await.unwrap();
    store.delete(Kind::MirrorRule, "cdn").await.unwrap();
    f.catalog.sync().await.unwrap();
    assert!(styles.has_changed().unwrap());
    assert_eq!(
        f.catalog.image_styles().borrow().iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["thumb"]
    );
    assert!(f.catalog.mirror_rules().borrow().is_empty(), "a deleted rule is gone from the channel");
}
