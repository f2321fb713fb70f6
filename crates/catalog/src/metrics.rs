//! The catalog's series: the answering snapshot and the link to the store.

use std::time::Duration;

use httpdns_core::Snapshot;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// Registered into the process's registry by whoever builds the catalog.
#[derive(Debug, Clone)]
pub struct CatalogMetrics {
    pub snapshot_revision: IntGauge,
    pub snapshot_built: IntGauge,
    /// Set at scrape time (an age is a property of now, not of a build).
    pub snapshot_age: prometheus::Gauge,
    pub snapshot_build_seconds: prometheus::Gauge,
    pub snapshot_objects: IntGaugeVec,
    /// Snapshots published, by how much was rebuilt (`BuildKind`).
    pub snapshot_builds: IntCounterVec,
    pub store_up: IntGauge,
    pub store_sync_errors: IntCounter,
    /// Stored rows that no longer parse (the catalog's and the config cache's alike).
    pub store_corrupt_rows: IntCounter,
}

impl CatalogMetrics {
    pub fn new(registry: &Registry) -> Self {
        let m = Self {
            snapshot_revision: IntGauge::new(
                "snapshot_revision",
                "Store revision of the answering snapshot.",
            )
            .expect("valid metric"),
            snapshot_built: IntGauge::new(
                "snapshot_built_timestamp_seconds",
                "Unix time the answering snapshot was built; its age is time() minus this.",
            )
            .expect("valid metric"),
            snapshot_age: prometheus::Gauge::new(
                "snapshot_age_seconds",
                "Seconds since the answering snapshot was built, at scrape time.",
            )
            .expect("valid metric"),
            snapshot_build_seconds: prometheus::Gauge::new(
                "snapshot_build_seconds",
                "Time the last snapshot took to build.",
            )
            .expect("valid metric"),
            snapshot_objects: IntGaugeVec::new(
                Opts::new("snapshot_objects", "Objects in the answering snapshot, by kind."),
                &["kind"],
            )
            .expect("valid metric"),
            snapshot_builds: IntCounterVec::new(
                Opts::new(
                    "snapshot_builds_total",
                    "Snapshots published, by what was rebuilt: nodes (changed nodes and their pools only), \
                     nodes_and_pools (all but the names), full, none (only the revision moved).",
                ),
                &["kind"],
            )
            .expect("valid metric"),
            store_up: IntGauge::new("store_up", "1 when the last sync reached the database.")
                .expect("valid metric"),
            store_sync_errors: IntCounter::new("store_sync_errors_total", "Failed syncs with the database.")
                .expect("valid metric"),
            store_corrupt_rows: IntCounter::new(
                "store_corrupt_rows_total",
                "Stored resources skipped because they did not parse.",
            )
            .expect("valid metric"),
        };
        for kind in BuildKind::ALL {
            m.snapshot_builds.with_label_values(&[kind.as_str()]);
        }
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.snapshot_revision.clone()),
            Box::new(m.snapshot_built.clone()),
            Box::new(m.snapshot_age.clone()),
            Box::new(m.snapshot_build_seconds.clone()),
            Box::new(m.snapshot_objects.clone()),
            Box::new(m.snapshot_builds.clone()),
            Box::new(m.store_up.clone()),
            Box::new(m.store_sync_errors.clone()),
            Box::new(m.store_corrupt_rows.clone()),
        ];
        for c in collectors {
            registry.register(c).expect("unique metric");
        }
        m
    }

    pub(crate) fn record_snapshot(&self, s: &Snapshot, kind: BuildKind, took: Duration) {
        self.snapshot_builds.with_label_values(&[kind.as_str()]).inc();
        let st = s.stats();
        self.snapshot_revision.set(s.revision());
        let now = httpdns_core::clock::unix_s();
        self.snapshot_built.set(now as i64);
        self.snapshot_build_seconds.set(took.as_secs_f64());
        for (kind, n) in [
            ("domains", st.domains),
            ("nodes", st.nodes),
            ("usable_nodes", st.usable_nodes),
            ("unservable_nodes", st.unservable_nodes),
            ("networks", st.networks),
            ("pools", st.pools),
        ] {
            self.snapshot_objects.with_label_values(&[kind]).set(n as i64);
        }
    }
}

/// How much of a snapshot a publish rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildKind {
    /// The changed nodes and their pools; everything else shared with the snapshot before.
    Nodes,
    /// Everything but the index of names, which is shared.
    NodesAndPools,
    /// Everything.
    Full,
    /// Nothing in the answers changed (a mirror rule, an image style, a row that did not
    /// parse): the snapshot is the current one at the new revision.
    None,
}

impl BuildKind {
    pub const ALL: [Self; 4] = [Self::Nodes, Self::NodesAndPools, Self::Full, Self::None];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Nodes => "nodes",
            Self::NodesAndPools => "nodes_and_pools",
            Self::Full => "full",
            Self::None => "none",
        }
    }
}
