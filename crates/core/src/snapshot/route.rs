//! Which pool answers a domain for a client, and the answer from that pool.
//!
//! 1. The pool: the first rule that holds for the client, else the split entry the client
//!    hashes to, else `pool` ([`crate::schedule`]).
//! 2. With a `backup_pool`: when fewer than `min_healthy` usable nodes of that pool are up
//!    (any address family: the count is about the pool, not the question), the backup answers
//!    if any of its nodes is up; if none is, the chosen pool answers with what it has up.
//! 3. When neither has a node up, `when_all_down` decides: the chosen pool's nodes anyway
//!    (`fail_open`), the backup's nodes anyway (`backup`), or nothing (`empty`).
//!
//! A domain with none of these fields takes the path it always took: one pool, no counting.

use std::net::IpAddr;

use super::{AnswerStatus, ClientView, Family, ManagedAnswer, NodeHealth, PoolEntry, Snapshot, Via};
use crate::model::DomainSpec;
use crate::schedule::{first_rule, split_pick, ClientAttrs, WhenAllDown};
use crate::token::Token;

impl Snapshot {
    /// Answers a managed domain (looked up in this snapshot) for a client with attributes.
    /// A `cname` domain has no nodes: its answer is empty here, the front-ends answer the
    /// alias.
    pub fn resolve_for(
        &self,
        domain: &DomainSpec,
        family: Family,
        client: &ClientView,
        attrs: &ClientAttrs,
        seed: u64,
        health: &impl NodeHealth,
    ) -> ManagedAnswer {
        let (chosen, mut via) = choose(domain, client, attrs, seed);
        let Some(pool) = chosen.and_then(|p| self.pool_entry(p)) else {
            return ManagedAnswer { ttl: domain.ttl, ips: Vec::new(), status: AnswerStatus::NoHealthyNode, via };
        };
        let backup = domain.backup_pool.as_ref().and_then(|b| self.pool_entry(b));
        let from = |pool: &PoolEntry, via: Via| {
            let mut a = self.answer_pool(pool, domain, family, client, seed, health);
            a.via = via;
            a
        };
        let Some(backup) = backup else {
            let mut a = from(pool, via);
            if a.status == AnswerStatus::FailOpen && domain.when_all_down == WhenAllDown::Empty {
                a.ips.clear();
                a.status = AnswerStatus::NoHealthyNode;
            }
            return a;
        };
        if self.up_at_least(pool, domain.min_healthy, health) {
            return from(pool, via);
        }
        if self.up_at_least(backup, 1, health) {
            via.backup = true;
            return from(backup, via);
        }
        if self.up_at_least(pool, 1, health) {
            // Thin but alive, and the backup is all down: what is up beats nothing.
            return from(pool, via);
        }
        match domain.when_all_down {
            WhenAllDown::FailOpen => from(pool, via),
            WhenAllDown::Backup => {
                via.backup = true;
                from(backup, via)
            }
            WhenAllDown::Empty => {
                ManagedAnswer { ttl: domain.ttl, ips: Vec::new(), status: AnswerStatus::NoHealthyNode, via }
            }
        }
    }

    /// The name of the pool an answer with `via` came from.
    pub fn pool_of<'d>(&self, domain: &'d DomainSpec, via: Via) -> Option<&'d Token> {
        if via.backup {
            return domain.backup_pool.as_ref();
        }
        if let Some(r) = via.rule {
            return domain.rules.get(usize::from(r)).map(|r| &r.pool);
        }
        if let Some(s) = via.split {
            return domain.split.get(usize::from(s)).map(|e| &e.pool);
        }
        domain.pool.as_ref()
    }

    pub(super) fn pool_entry(&self, name: &Token) -> Option<&PoolEntry> {
        self.pool_index.get(name).map(|&i| &*self.pools[i as usize])
    }

    /// Whether at least `n` usable nodes of `pool` are up. Stops at the `n`-th, so a healthy
    /// pool costs `n` health reads.
    fn up_at_least(&self, pool: &PoolEntry, n: u32, health: &impl NodeHealth) -> bool {
        let mut up = 0;
        for &node in pool.v4.nodes.iter().chain(&pool.v6.nodes) {
            if health.is_up(node) {
                up += 1;
                if up >= n {
                    return true;
                }
            }
        }
        false
    }

    /// The answer from one pool: ISP first, ranked, rotated in tiers; fail open when nothing
    /// is up (see the module docs of [`crate::snapshot`]).
    fn answer_pool(
        &self,
        pool: &PoolEntry,
        domain: &DomainSpec,
        family: Family,
        client: &ClientView,
        seed: u64,
        health: &impl NodeHealth,
    ) -> ManagedAnswer {
        let fam = pool.family(family);
        let ttl = domain.ttl;
        let via = Via::default();
        if fam.nodes.is_empty() {
            let other = pool.family(family.other());
            let status =
                if other.nodes.is_empty() { AnswerStatus::NoHealthyNode } else { AnswerStatus::NoRecord };
            return ManagedAnswer { ttl, ips: Vec::new(), status, via };
        }

        let ranking = fam.ranking(client, &self.nodes, &self.policy);
        let max = domain.max_answers as usize;
        let mut ips: Vec<IpAddr> = Vec::with_capacity(max.min(fam.nodes.len()));
        let up = |n: u32| health.is_up(n);
        let status = if ranking.same_isp.any_up(&up) {
            ranking.same_isp.pick(max, seed, &up, &self.nodes, &mut ips);
            AnswerStatus::Ok
        } else if ranking.all.any_up(&up) {
            ranking.all.pick(max, seed, &up, &self.nodes, &mut ips);
            AnswerStatus::Ok
        } else {
            let list = if ranking.same_isp.entries.is_empty() { &ranking.all } else { &ranking.same_isp };
            list.pick(max, seed, &|_| true, &self.nodes, &mut ips);
            AnswerStatus::FailOpen
        };
        ManagedAnswer { ttl, ips, status, via }
    }
}

/// The pool a domain's client goes to before health is considered, and what chose it.
fn choose<'d>(
    domain: &'d DomainSpec,
    client: &ClientView,
    attrs: &ClientAttrs,
    seed: u64,
) -> (Option<&'d Token>, Via) {
    let mut via = Via::default();
    if !domain.rules.is_empty() {
        if let Some(i) = first_rule(&domain.rules, client, attrs) {
            via.rule = Some(i as u16);
            return (Some(&domain.rules[i].pool), via);
        }
    }
    if !domain.split.is_empty() {
        let i = split_pick(&domain.split, seed);
        via.split = i.map(|i| i as u16);
        return (i.map(|i| &domain.split[i].pool), via);
    }
    (domain.pool.as_ref(), via)
}
