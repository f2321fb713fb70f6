//! Building a snapshot: from the whole model ([`Snapshot::build`]), sharing the names of an
//! earlier one ([`Snapshot::with_domains_of`]), or from an earlier one with some nodes' inputs
//! replaced ([`Snapshot::with_node_updates`]). The last two must answer exactly as the first
//! would on the same model; `snapshot/tests.rs` compares them.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::HashMap as FastMap;
use std::net::IpAddr;

use super::{
    Accounts, Domains, Family, FamilyNodes, Model, NodeEntry, Policy, PoolEntry, Snapshot, SnapshotStats,
};
use crate::cidr::CidrTable;
use crate::live::{LatencySource, LiveNode};
use crate::model::{NodeSpec, PoolSpec};
use crate::token::Token;

/// New inputs of one node of a snapshot, for [`Snapshot::with_node_updates`]: its spec (the
/// same pool as before), measured values and app feedback.
#[derive(Debug, Clone)]
pub struct NodeUpdate {
    pub id: String,
    pub spec: NodeSpec,
    pub live: LiveNode,
    /// Latency by (client ISP, client region), in the order the model lists them.
    pub feedback: Vec<(Token, Token, f64)>,
}

impl NodeEntry {
    /// The entry of one node: its usability under `policy`, and the score inputs in force.
    fn new(
        id: Box<str>,
        spec: NodeSpec,
        live: LiveNode,
        mut feedback: Vec<(Token, Token, f64)>,
        policy: &Policy,
    ) -> Self {
        let usable = spec.enabled && crate::ip::servable(spec.ip, policy.allow_private);
        let finite = |v: Option<f64>| v.filter(|x| x.is_finite() && *x >= 0.0);
        let (latency_ms, latency_source) = match finite(live.latency_ms) {
            Some(l) => (l, LatencySource::Measured),
            None => (spec.latency_ms, LatencySource::Operator),
        };
        let load_pct = finite(live.load_pct).map_or(spec.load_pct, |l| l.min(100.0));
        let bandwidth_mbps = finite(live.bandwidth_mbps).unwrap_or(spec.bandwidth_mbps);
        feedback.retain(|f| f.2.is_finite() && f.2 >= 0.0);
        Self { id, spec, usable, latency_ms, latency_source, load_pct, bandwidth_mbps, feedback }
    }

    /// What this node adds to a snapshot's counts of usable and unservable nodes.
    fn counts(&self, policy: &Policy) -> (usize, usize) {
        (usize::from(self.usable), usize::from(!crate::ip::servable(self.spec.ip, policy.allow_private)))
    }
}

impl PoolEntry {
    fn new(name: Token) -> Self {
        Self {
            name,
            spec: PoolSpec::default(),
            members: Vec::new(),
            v4: FamilyNodes::default(),
            v6: FamilyNodes::default(),
        }
    }

    /// Splits the usable members by family (in member order, as a full build does) and
    /// prepares the rankings, empty.
    fn index(&mut self, nodes: &[Arc<NodeEntry>]) {
        self.v4.nodes.clear();
        self.v6.nodes.clear();
        for &idx in &self.members {
            let node = &nodes[idx as usize];
            if node.usable {
                match Family::of(node.spec.ip) {
                    Family::V4 => self.v4.nodes.push(idx),
                    Family::V6 => self.v6.nodes.push(idx),
                }
            }
        }
        self.v4.index(nodes);
        self.v6.index(nodes);
    }
}

impl Snapshot {
    /// Builds a snapshot of `model` under `policy`. Never fails: the store only holds validated
    /// specs, and anything that is still unusable (a node address not servable under this
    /// policy, a domain naming a pool without nodes) simply answers nothing.
    pub fn build(mut model: Model, policy: Policy, revision: i64) -> Self {
        let mut specs = FastMap::with_capacity_and_hasher(model.domains.len(), Default::default());
        let mut wildcards: FastMap<Box<str>, _> = FastMap::default();
        let mut pools = Vec::new();
        let mut seen: std::collections::HashSet<Token> = std::collections::HashSet::new();
        for (name, mut spec) in std::mem::take(&mut model.domains) {
            // The names of one pool share one copy of the pool's name. Every answer hashes it
            // to find the pool, and a copy per name (as the store's rows are read) is a cold
            // cache line per query: that read was 70% of `resolve_domain` in a profile of plain
            // DNS over 1,000 names (docs/benchmarks.md).
            if let Some(pool) = &mut spec.pool {
                if let Some(shared) = seen.get(pool) {
                    *pool = shared.clone();
                }
            }
            for pool in spec.pools() {
                if !seen.contains(pool) {
                    seen.insert(pool.clone());
                    pools.push(pool.clone());
                }
            }
            match name.wildcard_parent() {
                Some(parent) => {
                    wildcards.insert(parent.into(), (name.clone(), spec));
                }
                None => {
                    specs.insert(name, spec);
                }
            }
        }
        Self::assemble(model, Arc::new(Domains { specs, wildcards, pools }), policy, revision)
    }

    /// The snapshot of `model` with the managed names of `self`, shared rather than rebuilt
    /// (`model.domains` is not read). Answers are those of [`Snapshot::build`] of the whole
    /// model when the names are unchanged since `self`; the catalog calls it only then.
    pub fn with_domains_of(&self, model: Model, policy: Policy, revision: i64) -> Self {
        Self::assemble(model, self.domains.clone(), policy, revision)
    }

    /// `self` with the inputs of some of its nodes replaced: the answers of [`Snapshot::build`]
    /// of the model `self` was built from with those nodes' specs, measured values and
    /// feedback replaced, at the cost of the changed nodes and their pools. Every other part
    /// (names, networks, accounts, the other pools and the rankings they computed so far) is
    /// shared, and node indices are unchanged, so a health view of `self` serves the result.
    ///
    /// `None` when an update names a node `self` does not have or moves a node to another
    /// pool: then build afresh.
    pub fn with_node_updates(&self, updates: Vec<NodeUpdate>, revision: i64) -> Option<Self> {
        let mut nodes = self.nodes.clone();
        let mut stats = self.stats;
        let mut touched: Vec<u32> = Vec::new();
        // Addresses whose entry in `by_ip` may change: the old and new address of every node
        // that was or is usable and changed either.
        let mut addresses: Vec<IpAddr> = Vec::new();
        for update in updates {
            let index = self.node_index(&update.id)?;
            // From the snapshot being built: a second update of the same node replaces the first.
            let old = nodes[index].clone();
            if old.spec.pool != update.spec.pool {
                return None;
            }
            let entry = NodeEntry::new(
                update.id.into_boxed_str(),
                update.spec,
                update.live,
                update.feedback,
                &self.policy,
            );
            let (old_usable, old_unservable) = old.counts(&self.policy);
            let (usable, unservable) = entry.counts(&self.policy);
            stats.usable_nodes = stats.usable_nodes - old_usable + usable;
            stats.unservable_nodes = stats.unservable_nodes - old_unservable + unservable;
            if old.usable != entry.usable || old.spec.ip != entry.spec.ip {
                addresses.extend([old.spec.ip, entry.spec.ip]);
            }
            let pool = *self.pool_index.get(&entry.spec.pool)?;
            if !touched.contains(&pool) {
                touched.push(pool);
            }
            nodes[index] = Arc::new(entry);
        }
        let mut pools = self.pools.clone();
        for pool in touched {
            let old = &self.pools[pool as usize];
            let mut entry = PoolEntry::new(old.name.clone());
            entry.spec = old.spec.clone();
            entry.members = old.members.clone();
            entry.index(&nodes);
            pools[pool as usize] = Arc::new(entry);
        }
        let by_ip = match addresses.len() {
            0 => self.by_ip.clone(),
            // Each address costs a scan of the nodes; past a few, rebuilding the map is cheaper.
            1..=16 => {
                let mut by_ip = (*self.by_ip).clone();
                for ip in addresses {
                    match nodes.iter().position(|n| n.usable && n.spec.ip == ip) {
                        Some(i) => by_ip.insert(ip, i as u32),
                        None => by_ip.remove(&ip),
                    };
                }
                Arc::new(by_ip)
            }
            _ => Arc::new(by_ip(&nodes)),
        };
        Some(Self {
            revision,
            policy: self.policy.clone(),
            networks: self.networks.clone(),
            nodes,
            pools,
            pool_index: self.pool_index.clone(),
            domains: self.domains.clone(),
            accounts: self.accounts.clone(),
            by_ip,
            stats,
        })
    }

    /// The index of node `id`. The catalog builds in id order, so a binary search finds it;
    /// a model in any other order still gets the right answer, by a scan.
    fn node_index(&self, id: &str) -> Option<usize> {
        match self.nodes.binary_search_by(|n| (*n.id).cmp(id)) {
            Ok(i) => Some(i),
            Err(_) => self.nodes.iter().position(|n| &*n.id == id),
        }
    }

    fn assemble(model: Model, domains: Arc<Domains>, policy: Policy, revision: i64) -> Self {
        let mut stats = SnapshotStats {
            networks: model.networks.len(),
            nodes: model.nodes.len(),
            domains: domains.specs.len() + domains.wildcards.len(),
            ..SnapshotStats::default()
        };
        let networks = Arc::new(CidrTable::new(model.networks));

        let mut pool_index: FastMap<Token, u32> = FastMap::default();
        let mut pools: Vec<PoolEntry> = Vec::new();
        let mut pool_of = |name: &Token, pools: &mut Vec<PoolEntry>| -> u32 {
            // Found without cloning the name: this runs once per node.
            if let Some(&i) = pool_index.get(name) {
                return i;
            }
            *pool_index.entry(name.clone()).or_insert_with(|| {
                pools.push(PoolEntry::new(name.clone()));
                (pools.len() - 1) as u32
            })
        };
        for (name, spec) in model.pools {
            let idx = pool_of(&name, &mut pools);
            pools[idx as usize].spec = spec;
        }

        let mut feedback: HashMap<String, Vec<(Token, Token, f64)>> = HashMap::new();
        for f in model.feedback {
            feedback.entry(f.node).or_default().push((f.isp, f.region, f.latency_ms));
        }
        let mut nodes = Vec::with_capacity(model.nodes.len());
        for (id, spec) in model.nodes {
            let idx = nodes.len() as u32;
            let pool = pool_of(&spec.pool, &mut pools) as usize;
            pools[pool].members.push(idx);
            let live = model.live.get(&id).copied().unwrap_or_default();
            let node_feedback = feedback.remove(&id).unwrap_or_default();
            let entry = NodeEntry::new(id.into_boxed_str(), spec, live, node_feedback, &policy);
            let (usable, unservable) = entry.counts(&policy);
            stats.usable_nodes += usable;
            stats.unservable_nodes += unservable;
            nodes.push(Arc::new(entry));
        }

        // Pools named only by domains exist too, empty.
        for pool in &domains.pools {
            pool_of(pool, &mut pools);
        }

        for pool in &mut pools {
            pool.index(&nodes);
        }
        stats.pools = pools.len();

        let by_id: FastMap<u32, _> = model.accounts.into_iter().collect();
        // A token shared by two accounts belongs to the lower id (the admin API should not
        // let it happen; if it does, the choice is at least stable).
        let mut tokens: FastMap<String, u32> = FastMap::default();
        for (id, a) in &by_id {
            if let Some(t) = &a.token {
                let e = tokens.entry(t.clone()).or_insert(*id);
                *e = (*e).min(*id);
            }
        }
        let by_ip = Arc::new(by_ip(&nodes));
        Self {
            revision,
            policy,
            networks,
            nodes,
            pools: pools.into_iter().map(Arc::new).collect(),
            pool_index: Arc::new(pool_index),
            domains,
            accounts: Arc::new(Accounts { by_id, tokens }),
            by_ip,
            stats,
        }
    }
}

/// Usable nodes by address, the first by index when several share one.
fn by_ip(nodes: &[Arc<NodeEntry>]) -> FastMap<IpAddr, u32> {
    let mut by_ip = FastMap::with_capacity_and_hasher(nodes.len(), Default::default());
    for (i, n) in nodes.iter().enumerate().filter(|(_, n)| n.usable) {
        by_ip.entry(n.spec.ip).or_insert(i as u32);
    }
    by_ip
}
