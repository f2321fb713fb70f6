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
            return ManagedAnswer {
                ttl: domain.ttl,
                ips: Vec::new(),
                status: AnswerStatus::NoHealthyNode,
                via,
            };
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

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::model::{DomainSpec, NodeSpec};
    use crate::schedule::{ClientAttrs, Rule, RuleMatch, SplitEntry, VersionRange, NO_ATTRS};
    use crate::snapshot::{Model, Policy, Resolution};
    use crate::DomainName;

    fn tok(s: &str) -> Token {
        Token::parse(s).unwrap()
    }

    fn node(id: &str, ip: &str, pool: &str) -> (String, NodeSpec) {
        let spec = serde_json::from_value(serde_json::json!(
            {"ip": ip, "pool": pool, "isp": "telecom", "region": "beijing"}))
        .unwrap();
        (id.into(), spec)
    }

    /// Nodes down by index.
    struct Down(Vec<u32>);
    impl NodeHealth for Down {
        fn is_up(&self, n: u32) -> bool {
            !self.0.contains(&n)
        }
    }

    fn snapshot(domains: Vec<(&str, DomainSpec)>) -> Snapshot {
        let model = Model {
            // Indices 0, 1: primary; 2: spare; 3: canary.
            nodes: vec![
                node("p1", "1.1.1.1", "primary"),
                node("p2", "1.1.1.2", "primary"),
                node("s1", "2.2.2.1", "spare"),
                node("c1", "3.3.3.1", "canary"),
            ],
            domains: domains.into_iter().map(|(n, d)| (DomainName::parse_pattern(n).unwrap(), d)).collect(),
            ..Model::default()
        };
        Snapshot::build(model, Policy { band: 0.0, ..Policy::default() }, 1)
    }

    fn answer(
        s: &Snapshot,
        name: &str,
        attrs: &ClientAttrs,
        down: &[u32],
    ) -> (Vec<IpAddr>, AnswerStatus, Via) {
        match s.resolve_with(
            &DomainName::parse(name).unwrap(),
            Family::V4,
            &ClientView::default(),
            attrs,
            9,
            &Down(down.to_vec()),
        ) {
            Resolution::Managed(a) => (a.ips, a.status, a.via),
            Resolution::NotManaged => panic!("{name} is not managed"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn backup_answers_when_the_pool_runs_thin_and_when_all_down_decides_after() {
        let domain = |when: WhenAllDown| {
            let mut d = DomainSpec::pooled(tok("primary"), 60, 4);
            d.backup_pool = Some(tok("spare"));
            d.min_healthy = 2;
            d.when_all_down = when;
            d
        };
        let s = snapshot(vec![
            ("f.example", domain(WhenAllDown::FailOpen)),
            ("b.example", domain(WhenAllDown::Backup)),
            ("e.example", domain(WhenAllDown::Empty)),
        ]);
        let (ips, status, via) = answer(&s, "f.example", &NO_ATTRS, &[]);
        assert_eq!((ips.len(), status, via.backup), (2, AnswerStatus::Ok, false));
        // One of two primaries down: below min_healthy, the backup answers.
        let (ips, status, via) = answer(&s, "f.example", &NO_ATTRS, &[1]);
        assert_eq!((ips, status, via.backup), (vec![ip("2.2.2.1")], AnswerStatus::Ok, true));
        // The backup down too: what the primary has up.
        let (ips, status, _) = answer(&s, "f.example", &NO_ATTRS, &[1, 2]);
        assert_eq!((ips, status), (vec![ip("1.1.1.1")], AnswerStatus::Ok));
        // All down.
        let (ips, status, _) = answer(&s, "f.example", &NO_ATTRS, &[0, 1, 2]);
        assert_eq!((ips.len(), status), (2, AnswerStatus::FailOpen));
        let (ips, status, via) = answer(&s, "b.example", &NO_ATTRS, &[0, 1, 2]);
        assert_eq!((ips, status, via.backup), (vec![ip("2.2.2.1")], AnswerStatus::FailOpen, true));
        let (ips, status, _) = answer(&s, "e.example", &NO_ATTRS, &[0, 1, 2]);
        assert_eq!((ips, status), (vec![], AnswerStatus::NoHealthyNode));
    }

    #[test]
    fn empty_without_backup_answers_nothing_only_when_all_are_down() {
        let mut d = DomainSpec::pooled(tok("primary"), 60, 4);
        d.when_all_down = WhenAllDown::Empty;
        let s = snapshot(vec![("e.example", d)]);
        assert_eq!(answer(&s, "e.example", &NO_ATTRS, &[0]).0, [ip("1.1.1.2")]);
        assert_eq!(answer(&s, "e.example", &NO_ATTRS, &[0, 1]).1, AnswerStatus::NoHealthyNode);
    }

    #[test]
    fn a_rule_wins_over_the_split_and_explain_names_both() {
        let mut d = DomainSpec::pooled(tok("primary"), 60, 4);
        d.pool = None;
        d.split = vec![
            SplitEntry { pool: tok("primary"), weight: 1 },
            SplitEntry { pool: tok("spare"), weight: 1 },
        ];
        d.rules = vec![Rule {
            matches: RuleMatch {
                app_version: Some(VersionRange::parse(">=5.2").unwrap()),
                ..RuleMatch::default()
            },
            pool: tok("canary"),
        }];
        let s = snapshot(vec![("r.example", d)]);
        let beta = ClientAttrs { app_version: ClientAttrs::parse_version("5.3"), tags: vec![] };
        let (ips, _, via) = answer(&s, "r.example", &beta, &[]);
        assert_eq!((ips, via.rule, via.split), (vec![ip("3.3.3.1")], Some(0), None));
        let (_, _, via) = answer(&s, "r.example", &NO_ATTRS, &[]);
        assert!(via.split.is_some() && via.rule.is_none());
        let name = DomainName::parse("r.example").unwrap();
        let e = s.explain(&name, Family::V4, &ClientView::default(), &beta, 9, &Down(vec![])).unwrap();
        assert_eq!((e.decided_by, e.pool.as_str(), e.rule.unwrap().index), ("rule", "canary", 0));
    }

    #[test]
    fn a_wildcard_covers_one_label_and_the_exact_name_wins() {
        let s = snapshot(vec![
            ("*.img.example", DomainSpec::pooled(tok("spare"), 60, 4)),
            ("exact.img.example", DomainSpec::pooled(tok("canary"), 60, 4)),
        ]);
        assert_eq!(answer(&s, "a.img.example", &NO_ATTRS, &[]).0, [ip("2.2.2.1")]);
        assert_eq!(answer(&s, "exact.img.example", &NO_ATTRS, &[]).0, [ip("3.3.3.1")]);
        for not in ["img.example", "x.a.img.example"] {
            assert!(s.domain(&DomainName::parse(not).unwrap()).is_none(), "{not}");
        }
        assert_eq!(s.domain_entry("b.img.example").map(|(k, _)| k), Some("*.img.example"));
        let parent = DomainName::parse("img.example").unwrap();
        assert!(s.has_managed_below(&parent), "the wildcard makes its parent an empty non-terminal");
        assert_eq!(s.stats().domains, 2);
    }
}
