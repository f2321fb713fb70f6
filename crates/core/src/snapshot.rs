//! The immutable answering snapshot and the answer choice.
//!
//! A [`Snapshot`] is built from the whole model (every network, node, pool and domain) and is
//! never changed afterwards; a data change builds a new one and swaps it in. Everything the
//! answer path needs is precomputed or computed once per snapshot:
//!
//! * disabled nodes and nodes whose address may not be served are dropped at build time;
//! * the nodes of each pool are split by address family;
//! * the ranking of a pool's nodes for one kind of client, a pair (ISP, region) reduced to the
//!   ISPs and regions that the pool's nodes actually have, is computed on first use and cached
//!   in a `OnceLock`, so steady-state answers only walk a ready sorted list.
//!
//! # Answer choice
//!
//! 1. ISP first: if the pool has nodes of the client's ISP that are up, only they are
//!    candidates; otherwise every node of the pool is.
//! 2. Candidates are ranked by [`crate::score`] (higher first, ties by node id).
//! 3. Load spreading: the ranked list is cut into *tiers*. A tier starts at the best remaining
//!    node and takes every following node whose score is within `band` of that first score.
//!    Inside a tier the order is rotated by a seed derived from the client address, so clients
//!    spread evenly over near-equal nodes while each client keeps a stable answer.
//! 4. Up to `max_answers` addresses are taken in that order.
//! 5. Fail open: when no node of the pool is up, the nodes are answered as if all were up
//!    (like Envoy's panic threshold), since an answer pointing at possibly-dead nodes beats
//!    sending every client to LocalDNS at once.

use std::collections::HashMap;

use foldhash::HashMap as FastMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use ipnet::IpNet;

use crate::cidr::CidrTable;
use crate::live::{Feedback, LatencySource, LiveNode};
use crate::model::{AccountSpec, DomainSpec, NetworkSpec, NodeSpec, PoolSpec};
use crate::name::DomainName;
use crate::score::{terms, ScoreInput, ScoreTerms, Weights};
use crate::token::Token;

/// Address family of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }

    pub fn other(self) -> Self {
        match self {
            Self::V4 => Self::V6,
            Self::V6 => Self::V4,
        }
    }

    /// `ipv4` or `ipv6`.
    pub fn label(self) -> &'static str {
        match self {
            Self::V4 => "ipv4",
            Self::V6 => "ipv6",
        }
    }
}

/// What is known of a client: its carrier and region, each possibly unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ClientView {
    pub isp: Option<Token>,
    pub region: Option<Token>,
}

/// Tells whether a node is up. Node indices are those of the snapshot asked.
pub trait NodeHealth {
    fn is_up(&self, node: u32) -> bool;
}

/// Every node is up (no health checking configured).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllUp;

impl NodeHealth for AllUp {
    fn is_up(&self, _node: u32) -> bool {
        true
    }
}

/// The rules that decide answers, from configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub weights: Weights,
    /// Score band inside which answers are rotated per client to spread load (see module docs).
    pub band: f64,
    /// Serve private and loopback node addresses (intranet deployments, tests).
    pub allow_private: bool,
    /// The name servers of every managed name (its NS records, the first one its SOA MNAME).
    /// Empty: `ns.<name>`.
    pub nameservers: Vec<DomainName>,
    /// The SOA RNAME (the zone contact, `.` for `@`). `None`: `hostmaster.<name>`.
    pub hostmaster: Option<DomainName>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            weights: Weights::default(),
            band: 0.01,
            allow_private: false,
            nameservers: Vec::new(),
            hostmaster: None,
        }
    }
}

/// The whole model, as loaded from the store.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub networks: Vec<(IpNet, NetworkSpec)>,
    pub nodes: Vec<(String, NodeSpec)>,
    pub pools: Vec<(Token, PoolSpec)>,
    pub domains: Vec<(DomainName, DomainSpec)>,
    /// Measured values by node id, overriding the operator's figures.
    pub live: HashMap<String, LiveNode>,
    /// Per (node, client ISP, client region) latency from app feedback.
    pub feedback: Vec<Feedback>,
    /// Client accounts by id.
    pub accounts: Vec<(u32, AccountSpec)>,
}

/// The result of resolving one name for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The name is not a managed domain; it is for upstream DNS.
    NotManaged,
    /// The name is managed.
    Managed(ManagedAnswer),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedAnswer {
    pub ttl: u32,
    pub ips: Vec<IpAddr>,
    pub status: AnswerStatus,
    /// What chose the pool that answered (rule, split entry, backup).
    pub via: Via,
}

/// What chose the pool an answer came from, for explanations and tests: the domain's `pool`
/// when all are unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Via {
    /// The index of the rule that matched.
    pub rule: Option<u16>,
    /// The index of the split entry the client hashed to.
    pub split: Option<u16>,
    /// The backup pool answered (the chosen pool had too few nodes up).
    pub backup: bool,
}

/// Why a managed answer holds what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerStatus {
    /// Addresses of up nodes.
    Ok,
    /// No node of the pool was up; the addresses are answered anyway (fail open).
    FailOpen,
    /// The pool has usable nodes, but none of this address family (NODATA).
    NoRecord,
    /// The pool has no usable node at all: all disabled, none added, or none servable.
    NoHealthyNode,
}

/// Counts describing a snapshot, for metrics and `/readyz`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    pub networks: usize,
    pub nodes: usize,
    pub usable_nodes: usize,
    pub unservable_nodes: usize,
    pub pools: usize,
    pub domains: usize,
}

/// One node as the snapshot sees it.
#[derive(Debug, Clone)]
pub struct NodeEntry {
    pub id: Box<str>,
    pub spec: NodeSpec,
    /// Enabled and its address may be served under the policy.
    pub usable: bool,
    /// The score inputs in force: measured values where there are any, else the spec's.
    pub latency_ms: f64,
    pub latency_source: LatencySource,
    pub load_pct: f64,
    pub bandwidth_mbps: f64,
    /// Feedback latency by (client ISP, client region).
    pub feedback: Vec<(Token, Token, f64)>,
}

impl NodeEntry {
    /// The latency used for clients of `isp` and `region`, and where it came from.
    pub fn latency_for(&self, isp: Option<&Token>, region: Option<&Token>) -> (f64, LatencySource) {
        if let (Some(i), Some(r)) = (isp, region) {
            if let Some((_, _, l)) = self.feedback.iter().find(|(fi, fr, _)| fi == i && fr == r) {
                return (*l, LatencySource::Feedback);
            }
        }
        (self.latency_ms, self.latency_source)
    }

    /// The score terms of this node for a client.
    pub fn terms(&self, policy: &Policy, isp: Option<&Token>, region: Option<&Token>) -> ScoreTerms {
        let (latency_ms, _) = self.latency_for(isp, region);
        terms(
            &policy.weights,
            &ScoreInput {
                latency_ms,
                bandwidth_mbps: self.bandwidth_mbps,
                load_pct: self.load_pct,
                same_region: region == Some(&self.spec.region),
            },
        )
    }
}

/// The immutable answering snapshot.
///
/// Its parts are shared by `Arc` with the snapshots derived from it, so that a change costs
/// what it touches: [`Snapshot::with_domains_of`] keeps the names, and
/// [`Snapshot::with_node_updates`] keeps everything but the changed nodes and their pools.
#[derive(Debug)]
pub struct Snapshot {
    revision: i64,
    policy: Policy,
    networks: Arc<CidrTable<NetworkSpec>>,
    /// Each node behind its own `Arc`: a derived snapshot copies pointers, not entries.
    nodes: Vec<Arc<NodeEntry>>,
    pools: Vec<Arc<PoolEntry>>,
    pool_index: Arc<FastMap<Token, u32>>,
    /// Shared with the snapshots built from this one by [`Snapshot::with_domains_of`]: at a
    /// million names this map is most of a build, and most changes (nodes, live figures,
    /// feedback, accounts) do not touch it.
    domains: Arc<Domains>,
    accounts: Arc<Accounts>,
    /// Usable nodes by address (the first one when several share it), for answer labels.
    by_ip: Arc<FastMap<IpAddr, u32>>,
    stats: SnapshotStats,
}

/// Client accounts by id, and by their Tencent HTTPS token.
#[derive(Debug, Default)]
struct Accounts {
    by_id: FastMap<u32, AccountSpec>,
    tokens: FastMap<String, u32>,
}

#[derive(Debug)]
struct PoolEntry {
    name: Token,
    spec: PoolSpec,
    /// Every node of the pool, usable or not, for explanations.
    members: Vec<u32>,
    v4: FamilyNodes,
    v6: FamilyNodes,
}

/// The usable nodes of one pool and family, with per-client-kind rankings.
#[derive(Debug, Default)]
struct FamilyNodes {
    nodes: Vec<u32>,
    /// Distinct ISPs and regions of `nodes`, sorted, so a client's ISP or region reduces to an
    /// index, or to "none of these", which ranks the same as any other foreign value.
    isps: Vec<Token>,
    regions: Vec<Token>,
    /// Index `(isp_slot * (regions.len() + 1) + region_slot)`, slot 0 meaning "none".
    rankings: Box<[OnceLock<Ranking>]>,
}

#[derive(Debug)]
struct Ranking {
    same_isp: Ranked,
    all: Ranked,
}

#[derive(Debug, Default)]
struct Ranked {
    /// (node index, score), best first.
    entries: Vec<(u32, f64)>,
    /// Exclusive end index of each tier in `entries`.
    tier_ends: Vec<u32>,
}

impl Snapshot {
    /// An empty snapshot (no data loaded yet).
    pub fn empty(policy: Policy) -> Self {
        Self::build(Model::default(), policy, 0)
    }

    /// The store revision this snapshot reflects.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    pub fn stats(&self) -> SnapshotStats {
        self.stats
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The operator network containing `ip`, if any (longest prefix).
    pub fn network(&self, ip: IpAddr) -> Option<&NetworkSpec> {
        self.networks.lookup(ip)
    }

    /// [`network`](Self::network) with the length of its prefix.
    pub fn network_prefix(&self, ip: IpAddr) -> Option<(u8, &NetworkSpec)> {
        self.networks.lookup_prefix(ip)
    }

    /// How many leading bits of `ip` decide its operator network (see
    /// [`CidrTable::decided_prefix`](crate::cidr::CidrTable::decided_prefix)).
    pub fn networks_decided_prefix(&self, ip: IpAddr) -> u8 {
        self.networks.decided_prefix(ip)
    }

    /// A client account.
    pub fn account(&self, id: u32) -> Option<&AccountSpec> {
        self.accounts.by_id.get(&id)
    }

    /// The account whose Tencent HTTPS token is `token`.
    pub fn account_by_token(&self, token: &str) -> Option<(u32, &AccountSpec)> {
        let id = *self.accounts.tokens.get(token)?;
        Some((id, self.accounts.by_id.get(&id)?))
    }

    /// Every node, usable or not, by snapshot index.
    pub fn nodes(&self) -> &[Arc<NodeEntry>] {
        &self.nodes
    }

    /// The usable node answered as `ip`, for labelling answers with its carrier.
    pub fn node_by_ip(&self, ip: IpAddr) -> Option<&NodeEntry> {
        self.by_ip.get(&ip).map(|&i| &*self.nodes[i as usize])
    }

    /// The pool names, for metrics and listings.
    pub fn pool_names(&self) -> impl Iterator<Item = &Token> {
        self.pools.iter().map(|p| &p.name)
    }

    /// Each pool's options with all its nodes, usable or not, as indices into
    /// [`nodes`](Self::nodes).
    pub fn pool_members(&self) -> impl Iterator<Item = (&PoolSpec, &[u32])> {
        self.pools.iter().map(|p| (&p.spec, p.members.as_slice()))
    }

    /// The options of a pool.
    pub fn pool(&self, name: &Token) -> Option<&PoolSpec> {
        self.pool_index.get(name).map(|&i| &self.pools[i as usize].spec)
    }

    /// Resolves `name` for `family` and a client. `seed` spreads load inside a score band and
    /// should be stable per client (see [`client_seed`]).
    pub fn resolve(
        &self,
        name: &DomainName,
        family: Family,
        client: &ClientView,
        seed: u64,
        health: &impl NodeHealth,
    ) -> Resolution {
        self.resolve_with(name, family, client, &crate::schedule::NO_ATTRS, seed, health)
    }

    /// [`resolve`](Self::resolve) for a client that says more of itself (rules by app version
    /// and tag).
    pub fn resolve_with(
        &self,
        name: &DomainName,
        family: Family,
        client: &ClientView,
        attrs: &crate::schedule::ClientAttrs,
        seed: u64,
        health: &impl NodeHealth,
    ) -> Resolution {
        match self.domains.find(name.as_str()) {
            Some(domain) => {
                Resolution::Managed(self.resolve_for(domain, family, client, attrs, seed, health))
            }
            None => Resolution::NotManaged,
        }
    }

    /// [`resolve`](Self::resolve) for a domain already looked up (by [`domain`](Self::domain)
    /// or [`domain_named`](Self::domain_named) of this snapshot).
    pub fn resolve_domain(
        &self,
        domain: &DomainSpec,
        family: Family,
        client: &ClientView,
        seed: u64,
        health: &impl NodeHealth,
    ) -> ManagedAnswer {
        self.resolve_for(domain, family, client, &crate::schedule::NO_ATTRS, seed, health)
    }
}

impl PoolEntry {
    fn family(&self, family: Family) -> &FamilyNodes {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }
}

impl FamilyNodes {
    fn index(&mut self, nodes: &[Arc<NodeEntry>]) {
        // Client ISPs and regions that rank differently: those of the nodes, and those that
        // feedback exists for (a Shanghai client ranks differently when a node has Shanghai
        // feedback, even if no node is in Shanghai).
        let feedback = || self.nodes.iter().flat_map(|&n| nodes[n as usize].feedback.iter());
        let mut isps: Vec<Token> = self
            .nodes
            .iter()
            .map(|&n| nodes[n as usize].spec.isp.clone())
            .chain(feedback().map(|f| f.0.clone()))
            .collect();
        isps.sort();
        isps.dedup();
        let mut regions: Vec<Token> = self
            .nodes
            .iter()
            .map(|&n| nodes[n as usize].spec.region.clone())
            .chain(feedback().map(|f| f.1.clone()))
            .collect();
        regions.sort();
        regions.dedup();
        let slots = (isps.len() + 1) * (regions.len() + 1);
        self.rankings = (0..slots).map(|_| OnceLock::new()).collect();
        self.isps = isps;
        self.regions = regions;
    }

    fn slot(list: &[Token], value: Option<&Token>) -> usize {
        value.and_then(|v| list.binary_search(v).ok()).map_or(0, |i| i + 1)
    }

    fn ranking(&self, client: &ClientView, nodes: &[Arc<NodeEntry>], policy: &Policy) -> &Ranking {
        let isp_slot = Self::slot(&self.isps, client.isp.as_ref());
        let region_slot = Self::slot(&self.regions, client.region.as_ref());
        let slot = isp_slot * (self.regions.len() + 1) + region_slot;
        self.rankings[slot].get_or_init(|| {
            let isp = (isp_slot > 0).then(|| &self.isps[isp_slot - 1]);
            let region = (region_slot > 0).then(|| &self.regions[region_slot - 1]);
            self.rank(isp, region, nodes, policy)
        })
    }

    fn rank(
        &self,
        isp: Option<&Token>,
        region: Option<&Token>,
        nodes: &[Arc<NodeEntry>],
        policy: &Policy,
    ) -> Ranking {
        let mut all: Vec<(u32, f64)> =
            self.nodes.iter().map(|&n| (n, nodes[n as usize].terms(policy, isp, region).total())).collect();
        all.sort_by(|a, b| {
            b.1.total_cmp(&a.1).then_with(|| nodes[a.0 as usize].id.cmp(&nodes[b.0 as usize].id))
        });
        let same_isp: Vec<(u32, f64)> = match isp {
            Some(isp) => all.iter().copied().filter(|&(n, _)| &nodes[n as usize].spec.isp == isp).collect(),
            None => Vec::new(),
        };
        Ranking { same_isp: Ranked::new(same_isp, policy.band), all: Ranked::new(all, policy.band) }
    }
}

impl Ranked {
    fn new(entries: Vec<(u32, f64)>, band: f64) -> Self {
        let mut tier_ends = Vec::new();
        let mut i = 0;
        while i < entries.len() {
            let lead = entries[i].1;
            let mut j = i + 1;
            while j < entries.len() && entries[j].1 >= lead - band {
                j += 1;
            }
            tier_ends.push(j as u32);
            i = j;
        }
        Self { entries, tier_ends }
    }

    fn any_up(&self, up: &impl Fn(u32) -> bool) -> bool {
        self.entries.iter().any(|&(n, _)| up(n))
    }

    fn pick(
        &self,
        max: usize,
        seed: u64,
        up: &impl Fn(u32) -> bool,
        nodes: &[Arc<NodeEntry>],
        out: &mut Vec<IpAddr>,
    ) {
        let mut start = 0usize;
        for &end in &self.tier_ends {
            if out.len() >= max {
                break;
            }
            let end = end as usize;
            // Rotate the up members of the tier without collecting them: the answer path
            // allocates nothing but its result.
            let members = || self.entries[start..end].iter().map(|e| e.0).filter(|&n| up(n));
            let count = members().count();
            if count > 0 {
                let rot = (seed % count as u64) as usize;
                for n in members().skip(rot).chain(members().take(rot)) {
                    if out.len() >= max {
                        break;
                    }
                    // Two nodes may share an address (an operator slip); answer it once.
                    let ip = nodes[n as usize].spec.ip;
                    if !out.contains(&ip) {
                        out.push(ip);
                    }
                }
            }
            start = end;
        }
    }
}

/// A well-mixed seed from a client address (SplitMix64 finaliser over the address bits), so
/// that neighbouring addresses land on different rotations.
pub fn client_seed(ip: IpAddr) -> u64 {
    let bits: u128 = match ip.to_canonical() {
        IpAddr::V4(a) => u128::from(a.to_bits()),
        // The /64 is the subscriber in IPv6; the interface id changes often (privacy
        // addresses) and must not change the rotation.
        IpAddr::V6(a) => a.to_bits() >> 64,
    };
    let mut z = (bits as u64) ^ ((bits >> 64) as u64) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

mod build;
mod explain;
mod names;
mod route;

use names::Domains;

pub use build::NodeUpdate;
pub use explain::{Explanation, NodeExplanation, RuleExplanation, SplitExplanation};

#[cfg(test)]
mod tests;
