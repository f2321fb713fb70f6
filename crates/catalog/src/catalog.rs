//! The catalog: follows the store and publishes answering snapshots.
//!
//! It keeps the whole model in memory (parsed specs by name), pulls the changes after the
//! revision it has seen, applies them, builds a new [`Snapshot`] and swaps it in. The same
//! [`Catalog::sync`] runs after every admin write in this process (so a `PUT` is answered from
//! when it returns) and on a timer (so writes made by other replicas arrive within the sync
//! interval). The answer path only ever calls [`Catalog::snapshot`], a lock-free load.
//!
//! Live inputs (probe latencies, agent reports, app feedback) come in through
//! [`Catalog::set_live`] and trigger a rebuild from the same in-memory model. Each published
//! snapshot carries a [`HealthView`] of its nodes, so health checks take a node out of answers
//! the moment it fails, without a rebuild.
//!
//! Everything the catalog publishes goes out the same way, on a `watch` channel each
//! ([`Feeds`]): the snapshot ([`Catalog::snapshots`]), the health-check targets
//! ([`Catalog::targets`], followed by the live checker) and, for every kind the snapshot does
//! not hold, that kind's specs by name ([`Catalog::specs`]; the mirror rules and the image
//! styles, followed by the gateway, are [`Catalog::mirror_rules`] and
//! [`Catalog::image_styles`]). Consumers subscribe; the catalog knows none of them. A sync sends before it returns, so what an admin
//! write changed is on its channel before the write is answered. The answer path reads the
//! snapshot from an `ArcSwap` holding the same `Arc` (a lock-free load; a `watch` borrow takes
//! a read lock).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::{ArcSwap, Guard};
use httpdns_core::live::{Feedback, LiveNode};
use std::any::Any;

use httpdns_core::model::mirror::RuleSpec;
use httpdns_core::model::style::StyleSpec;
use httpdns_core::model::{parse_account_id, AccountSpec, DomainSpec, NetworkSpec, NodeSpec, PoolSpec};
use httpdns_core::snapshot::{Model, NodeUpdate, Policy};
use httpdns_core::{DomainName, Snapshot, Token};
use httpdns_live::checker::Target;
use httpdns_live::health::{HealthRegistry, HealthView};
use httpdns_live::Published;
use httpdns_store::{Change, Kind, Store, StoreError};
use ipnet::IpNet;
use tokio::sync::watch;

use crate::kinds::{each_kind, with_kind, ImageStyles, KindVisitor, MirrorRules, ResourceKind};
use crate::metrics::{BuildKind, CatalogMetrics};

/// Health of the catalog's link to the store, for `/readyz`.
#[derive(Debug, Clone)]
pub struct SyncStatus {
    /// A snapshot from the store has been published at least once.
    pub loaded: bool,
    /// The last sync reached the store.
    pub store_ok: bool,
    pub last_error: Option<String>,
    pub built_at: SystemTime,
    pub build_duration: Duration,
}

#[derive(Default)]
struct ModelState {
    revision: i64,
    live: HashMap<String, LiveNode>,
    feedback: Vec<Feedback>,
    networks: BTreeMap<String, (IpNet, NetworkSpec)>,
    nodes: BTreeMap<String, NodeSpec>,
    pools: BTreeMap<String, (Token, PoolSpec)>,
    domains: BTreeMap<String, (DomainName, DomainSpec)>,
    accounts: BTreeMap<u32, AccountSpec>,
    /// The kinds the snapshot does not hold ([`in_snapshot`]), by kind: a
    /// `BTreeMap<String, R::Spec>` each, published on the kind's channel when one changes.
    others: HashMap<Kind, Box<dyn Any + Send>>,
    /// What changed since the last publish, so the next one rebuilds only that.
    pending: Pending,
}

/// What the next publish must rebuild. Cleared only once a snapshot is swapped in: a publish
/// that never got there (its future dropped by a caller, at shutdown, or a panic) leaves it for
/// the next sync, which publishes while anything is pending. Admin writes publish on a task of
/// their own, so a client hanging up is not such a caller.
#[derive(Debug)]
struct Pending {
    /// A domain was written or removed: the next snapshot indexes the names afresh. Otherwise
    /// it shares the current snapshot's (at a million names the names are most of a build).
    domains: bool,
    /// Anything but a node's own inputs changed (networks, pools, accounts, a node added,
    /// removed or moved to another pool), or nothing was published yet: build from the whole
    /// model (sharing the names unless `domains` is set too).
    full: bool,
    /// Nodes whose spec, measured values or feedback changed: with nothing else pending, the
    /// next snapshot is the current one with these nodes and their pools rebuilt.
    nodes: BTreeSet<String>,
    /// A node's spec changed (not only its live figures): the check targets may differ.
    specs: bool,
}

impl Default for Pending {
    fn default() -> Self {
        Self { domains: true, full: true, nodes: BTreeSet::new(), specs: true }
    }
}

impl Pending {
    /// Nothing to rebuild: the state right after a publish.
    fn clean() -> Self {
        Self { domains: false, full: false, nodes: BTreeSet::new(), specs: false }
    }

    fn is_empty(&self) -> bool {
        !self.domains && !self.full && self.nodes.is_empty() && !self.specs
    }
}

/// The mirror rules by name, as the catalog publishes them.
pub type RuleSpecs = Arc<Vec<(String, RuleSpec)>>;
/// The image styles by name, as the catalog publishes them.
pub type StyleSpecs = Arc<Vec<(String, StyleSpec)>>;

/// The specs of one kind by name, as the catalog publishes them ([`Catalog::specs`]).
pub type Specs<R> = Arc<Vec<(String, <R as ResourceKind>::Spec)>>;

/// What the catalog publishes, one `watch` channel each. A subscriber sees the newest value
/// (not every one) and learns of a new one with `changed` or `has_changed`.
struct Feeds {
    snapshots: watch::Sender<Arc<Published>>,
    targets: watch::Sender<Arc<Vec<Target>>>,
    /// Every kind not in the snapshot: a `watch::Sender<Specs<R>>` each.
    kinds: HashMap<Kind, Box<dyn Any + Send + Sync>>,
}

/// Whether the snapshot holds a kind's resources (they shape answers); every other kind is
/// kept by name and published on a channel of its own, so a new kind needs nothing here.
fn in_snapshot(kind: Kind) -> bool {
    matches!(kind, Kind::Network | Kind::Node | Kind::Pool | Kind::Domain | Kind::Account)
}

/// Follows the store; shared behind an `Arc`.
pub struct Catalog {
    store: Store,
    policy: Policy,
    /// The snapshot in force: the `Arc` last sent on `feeds.snapshots`, for lock-free loads.
    snapshot: ArcSwap<Published>,
    registry: Arc<HealthRegistry>,
    feeds: Feeds,
    state: tokio::sync::Mutex<ModelState>,
    // A blocking mutex: held only to copy or replace a small struct, never across an await.
    status: Mutex<SyncStatus>,
    metrics: CatalogMetrics,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("revision", &self.snapshot.load().revision()).finish_non_exhaustive()
    }
}

impl Catalog {
    pub fn new(store: Store, policy: Policy, metrics: CatalogMetrics, registry: Arc<HealthRegistry>) -> Self {
        let empty =
            Arc::new(Published { snapshot: Snapshot::empty(policy.clone()), health: HealthView::default() });
        // A channel for every kind the snapshot does not hold.
        struct Channels(HashMap<Kind, Box<dyn Any + Send + Sync>>);
        impl KindVisitor for Channels {
            fn visit<R: ResourceKind>(&mut self) {
                if !in_snapshot(R::KIND) {
                    let channel: watch::Sender<Specs<R>> = watch::Sender::new(Arc::new(Vec::new()));
                    self.0.insert(R::KIND, Box::new(channel));
                }
            }
        }
        let mut kinds = Channels(HashMap::new());
        each_kind(&mut kinds);
        let feeds = Feeds {
            snapshots: watch::Sender::new(empty.clone()),
            targets: watch::Sender::new(Arc::new(Vec::new())),
            kinds: kinds.0,
        };
        Self {
            store,
            snapshot: ArcSwap::new(empty),
            registry,
            feeds,
            policy,
            state: tokio::sync::Mutex::new(ModelState::default()),
            status: Mutex::new(SyncStatus {
                loaded: false,
                store_ok: false,
                last_error: None,
                built_at: httpdns_core::clock::now(),
                build_duration: Duration::ZERO,
            }),
            metrics,
        }
    }

    /// The current snapshot and its health: a lock-free load, safe on the answer path.
    pub fn snapshot(&self) -> Guard<Arc<Published>> {
        self.snapshot.load()
    }

    /// The current snapshot as an `Arc`, to hold across awaits (one load per request).
    pub fn snapshot_full(&self) -> Arc<Published> {
        self.snapshot.load_full()
    }

    /// The health registry shared with the checker.
    pub fn registry(&self) -> &Arc<HealthRegistry> {
        &self.registry
    }

    /// Every published snapshot, for those who follow it (the answer path loads
    /// [`Catalog::snapshot`] instead).
    pub fn snapshots(&self) -> watch::Receiver<Arc<Published>> {
        self.feeds.snapshots.subscribe()
    }

    /// The nodes to health-check, republished with every snapshot that changes them.
    pub fn targets(&self) -> watch::Receiver<Arc<Vec<Target>>> {
        self.feeds.targets.subscribe()
    }

    /// The specs of kind `R` by name, republished whenever one changes. Only for kinds the
    /// snapshot does not hold (those are read from the snapshot).
    pub fn specs<R: ResourceKind>(&self) -> watch::Receiver<Specs<R>> {
        self.sender::<R>().subscribe()
    }

    /// The mirror rules, republished whenever one changes.
    pub fn mirror_rules(&self) -> watch::Receiver<RuleSpecs> {
        self.specs::<MirrorRules>()
    }

    /// The image styles, republished whenever one changes.
    pub fn image_styles(&self) -> watch::Receiver<StyleSpecs> {
        self.specs::<ImageStyles>()
    }

    fn sender<R: ResourceKind>(&self) -> &watch::Sender<Specs<R>> {
        self.feeds
            .kinds
            .get(&R::KIND)
            .and_then(|c| c.downcast_ref())
            .unwrap_or_else(|| panic!("{} are in the snapshot, not on a channel", R::INFO.section))
    }

    /// Replaces the live inputs and republishes when they changed: the nodes whose figures or
    /// feedback differ are rebuilt, not the whole snapshot.
    pub async fn set_live(&self, live: HashMap<String, LiveNode>, feedback: Vec<Feedback>) {
        let mut state = self.state.lock().await;
        if state.live == live && state.feedback == feedback {
            return;
        }
        let mut changed = BTreeSet::new();
        for (id, l) in &live {
            if state.live.get(id) != Some(l) {
                changed.insert(id.clone());
            }
        }
        changed.extend(state.live.keys().filter(|id| !live.contains_key(*id)).cloned());
        if state.feedback != feedback {
            let (old, new) = (feedback_by_node(&state.feedback), feedback_by_node(&feedback));
            changed
                .extend(new.iter().filter(|(id, f)| old.get(*id) != Some(*f)).map(|(id, _)| id.to_string()));
            changed.extend(old.keys().filter(|id| !new.contains_key(*id)).map(|id| id.to_string()));
        }
        // Figures of nodes the model does not have answer nothing, here or in a full build.
        changed.retain(|id| state.nodes.contains_key(id));
        state.live = live;
        state.feedback = feedback;
        if changed.is_empty() {
            return;
        }
        state.pending.nodes.extend(changed);
        self.publish(&mut state, 0).await;
    }

    /// The catalog's series (snapshot and store health).
    pub fn metrics(&self) -> &CatalogMetrics {
        &self.metrics
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn status(&self) -> SyncStatus {
        self.status.lock().clone()
    }

    /// Pulls changes from the store and publishes a new snapshot if there were any. Returns
    /// the revision now published.
    pub async fn sync(&self) -> Result<i64, StoreError> {
        let mut state = self.state.lock().await;
        let result = self.store.changes_since(state.revision).await;
        let (revision, changes) = match result {
            Ok(ok) => ok,
            Err(e) => {
                self.metrics.store_up.set(0);
                self.metrics.store_sync_errors.inc();
                let mut status = self.status.lock();
                status.store_ok = false;
                status.last_error = Some(e.to_string());
                return Err(e);
            }
        };
        self.metrics.store_up.set(1);
        let first = !self.status().loaded;
        if changes.is_empty() && revision == state.revision && !first && state.pending.is_empty() {
            self.mark_ok();
            return Ok(revision);
        }
        for change in &changes {
            apply(&mut state, change, &self.metrics);
        }
        // Sent before this sync returns, so before the admin write that caused it is answered.
        let changed: BTreeSet<Kind> = changes.iter().map(|c| c.kind).filter(|k| !in_snapshot(*k)).collect();
        for kind in changed {
            with_kind(kind, &mut SendSpecs { catalog: self, state: &state });
        }
        state.revision = revision;
        self.publish(&mut state, changes.len()).await;
        self.mark_ok();
        Ok(revision)
    }

    /// Builds a snapshot of `state` and swaps it in, with its health view and check targets.
    /// It rebuilds what [`Pending`] says changed: only some nodes and their pools when nothing
    /// else did, else everything but the names when they are unchanged, else everything.
    async fn publish(&self, state: &mut ModelState, changes: usize) {
        let revision = state.revision;
        let current = self.snapshot.load_full();
        let started = Instant::now();
        let derived = if !state.pending.full && !state.pending.domains {
            let (updates, base) = (node_updates(state, &state.pending.nodes), current.clone());
            tokio::task::spawn_blocking(move || base.snapshot.with_node_updates(updates, revision))
                .await
                .expect("snapshot derivation does not panic")
        } else {
            None
        };
        let (snapshot, kind) = match derived {
            Some(snapshot) if state.pending.nodes.is_empty() => (snapshot, BuildKind::None),
            Some(snapshot) => (snapshot, BuildKind::Nodes),
            // Not derivable (the pending nodes say otherwise: a bug, but a full build is right
            // whatever the catalog noted), or more than nodes changed.
            None => {
                let model = whole_model(state, state.pending.domains);
                let names_from = (!state.pending.domains).then(|| current.clone());
                let kind = if names_from.is_some() { BuildKind::NodesAndPools } else { BuildKind::Full };
                let policy = self.policy.clone();
                // Large models take a while to index; keep that off the async workers.
                let snapshot = tokio::task::spawn_blocking(move || match names_from {
                    Some(current) => current.snapshot.with_domains_of(model, policy, revision),
                    None => Snapshot::build(model, policy, revision),
                })
                .await
                .expect("snapshot build does not panic");
                (snapshot, kind)
            }
        };
        let took = started.elapsed();
        // A derived snapshot has the same nodes at the same indices; so does a rebuild after a
        // spec or live change (not an addition or removal). Either way the current view holds
        // exactly the states `view` would look up again, one by one.
        let derived = matches!(kind, BuildKind::Nodes | BuildKind::None);
        let same_nodes = derived
            || (current.snapshot.nodes().len() == snapshot.nodes().len()
                && current.snapshot.nodes().iter().zip(snapshot.nodes()).all(|(a, b)| a.id == b.id));
        let health = if same_nodes {
            current.health.clone()
        } else {
            let ids = || snapshot.nodes().iter().map(|n| &*n.id);
            let view = self.registry.view(ids());
            // Deleted nodes' states go with them.
            self.registry.retain(&ids().collect());
            view
        };
        drop(current);
        let targets = (!derived || state.pending.specs).then(|| check_targets(&snapshot));
        self.metrics.record_snapshot(&snapshot, kind, took);
        let published = Arc::new(Published { snapshot, health });
        self.snapshot.store(published.clone());
        self.feeds.snapshots.send_replace(published);
        // Only now: a publish dropped before the swap leaves its work pending for the next.
        state.pending = Pending::clean();
        if let Some(targets) = targets {
            self.feeds.targets.send_if_modified(|old| {
                if **old == targets {
                    false
                } else {
                    *old = Arc::new(targets);
                    true
                }
            });
        }
        {
            let mut status = self.status.lock();
            status.built_at = httpdns_core::clock::now();
            status.build_duration = took;
        }
        tracing::debug!(
            revision,
            changes,
            kind = kind.as_str(),
            build_ms = took.as_millis() as u64,
            "Published snapshot."
        );
    }

    /// Records a successful sync: data is loaded and the store answers.
    fn mark_ok(&self) {
        let mut status = self.status.lock();
        status.loaded = true;
        status.store_ok = true;
        status.last_error = None;
    }
}

/// Sends the specs of a kind not in the snapshot on its channel.
struct SendSpecs<'a> {
    catalog: &'a Catalog,
    state: &'a ModelState,
}

impl KindVisitor for SendSpecs<'_> {
    fn visit<R: ResourceKind>(&mut self) {
        let specs = kept::<R>(self.state).map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        self.catalog.sender::<R>().send_replace(Arc::new(specs.unwrap_or_default()));
    }
}

/// The specs of kind `R` the model keeps outside the snapshot, if any were written.
fn kept<R: ResourceKind>(state: &ModelState) -> Option<&BTreeMap<String, R::Spec>> {
    state.others.get(&R::KIND).and_then(|m| m.downcast_ref())
}

/// Applies a change of a kind not in the snapshot: its spec kept by name, or removed.
struct KeepSpec<'a> {
    others: &'a mut HashMap<Kind, Box<dyn Any + Send>>,
    name: &'a str,
    body: Option<&'a str>,
    result: Result<(), String>,
}

impl KindVisitor for KeepSpec<'_> {
    fn visit<R: ResourceKind>(&mut self) {
        let kept = self.others.entry(R::KIND).or_insert_with(|| Box::new(BTreeMap::<String, R::Spec>::new()));
        let kept: &mut BTreeMap<String, R::Spec> = kept.downcast_mut().expect("kept by kind");
        match self.body.map(serde_json::from_str::<R::Spec>) {
            None => drop(kept.remove(self.name)),
            Some(Ok(spec)) => drop(kept.insert(self.name.to_owned(), spec)),
            Some(Err(e)) => self.result = Err(e.to_string()),
        }
    }
}

/// Every usable node of a pool that has a health check, walked by pool so that a fleet of
/// unchecked pools costs nothing per node.
fn check_targets(snapshot: &Snapshot) -> Vec<Target> {
    let nodes = snapshot.nodes();
    snapshot
        .pool_members()
        .filter_map(|(spec, members)| Some((spec.health_check.as_ref()?, members)))
        .flat_map(|(check, members)| {
            members.iter().map(|&i| &nodes[i as usize]).filter(|n| n.usable).map(|n| Target {
                node_id: n.id.to_string(),
                addr: std::net::SocketAddr::new(n.spec.ip, check.port),
                check: check.clone(),
            })
        })
        .collect()
}

mod model;
use model::{apply, feedback_by_node, node_updates, whole_model};
