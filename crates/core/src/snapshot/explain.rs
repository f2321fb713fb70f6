//! Why an answer is what it is: every node of the domain's pool with its score terms, health
//! and the reason it is or is not in the answer. The answer itself comes from
//! [`Snapshot::resolve`], so an explanation can never disagree with a real answer.

use std::net::IpAddr;

use serde::Serialize;

use super::{AnswerStatus, ClientView, Family, NodeHealth, Resolution, Snapshot, Via};
use crate::live::LatencySource;
use crate::name::DomainName;
use crate::schedule::ClientAttrs;
use crate::score::ScoreTerms;

/// The explanation of one answer.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The pool that answered.
    pub pool: String,
    /// What chose it: `rule` (with `rule`), `split` (with `split`), or `pool`; `backup` when
    /// the chosen pool had fewer than `min_healthy` nodes up.
    pub decided_by: &'static str,
    /// The index of the rule that matched, and its match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleExplanation>,
    /// The split entry the client hashed to, with its weight and the split's total.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitExplanation>,
    /// The pool the rule, split or `pool` chose, when the backup answered instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen_pool: Option<String>,
    pub ttl: u32,
    pub max_answers: u32,
    pub family: &'static str,
    /// `ok`, `fail-open`, `no-record` or `no-healthy-node`.
    pub status: &'static str,
    /// `same_isp` (only the client's ISP was eligible), `all`, or `none`.
    pub candidates: &'static str,
    pub answer: Vec<IpAddr>,
    /// The pool's nodes of this address family: answered first in answer order, then the
    /// other usable ones by score, then the unusable ones.
    pub nodes: Vec<NodeExplanation>,
}

/// The rule that chose the pool.
#[derive(Debug, Clone, Serialize)]
pub struct RuleExplanation {
    pub index: usize,
    #[serde(rename = "match")]
    pub matches: crate::schedule::RuleMatch,
}

/// The split entry that chose the pool.
#[derive(Debug, Clone, Serialize)]
pub struct SplitExplanation {
    pub index: usize,
    pub weight: u32,
    pub total_weight: u64,
}

/// One node in an explanation.
#[derive(Debug, Clone, Serialize)]
pub struct NodeExplanation {
    pub id: String,
    pub ip: IpAddr,
    pub isp: String,
    pub region: String,
    pub enabled: bool,
    /// The address may be served under the policy.
    pub servable: bool,
    /// Passing health checks (always true without checks).
    pub up: bool,
    pub same_isp: bool,
    pub score: f64,
    pub terms: ScoreTerms,
    pub latency_ms: f64,
    pub latency_source: LatencySource,
    pub in_answer: bool,
    pub reason: &'static str,
}

impl Snapshot {
    /// Explains the answer for `name`, `family` and a client; `None` when the name is not
    /// managed.
    pub fn explain(
        &self,
        name: &DomainName,
        family: Family,
        client: &ClientView,
        attrs: &ClientAttrs,
        seed: u64,
        health: &impl NodeHealth,
    ) -> Option<Explanation> {
        let domain = self.domains.find(name.as_str())?;
        let Resolution::Managed(answer) = self.resolve_with(name, family, client, attrs, seed, health) else {
            return None;
        };
        let pool = self.pool_entry(self.pool_of(domain, answer.via)?)?;
        let via = answer.via;
        let rule = via.rule.map(usize::from).and_then(|i| {
            domain.rules.get(i).map(|r| RuleExplanation { index: i, matches: r.matches.clone() })
        });
        let split = via.split.map(usize::from).and_then(|i| {
            domain.split.get(i).map(|e| SplitExplanation {
                index: i,
                weight: e.weight,
                total_weight: domain.split.iter().map(|e| u64::from(e.weight)).sum(),
            })
        });
        let chosen_pool = via
            .backup
            .then(|| self.pool_of(domain, Via { backup: false, ..via }).map(ToString::to_string))
            .flatten();
        let decided_by = if via.backup {
            "backup"
        } else if via.rule.is_some() {
            "rule"
        } else if via.split.is_some() {
            "split"
        } else {
            "pool"
        };
        let fam = pool.family(family);
        let same_isp_up = client.isp.as_ref().is_some_and(|isp| {
            fam.nodes.iter().any(|&n| &self.nodes[n as usize].spec.isp == isp && health.is_up(n))
        });
        let (isp, region) = (client.isp.as_ref(), client.region.as_ref());
        let mut nodes: Vec<NodeExplanation> = pool
            .members
            .iter()
            .map(|&n| (n, &self.nodes[n as usize]))
            .filter(|(_, e)| Family::of(e.spec.ip) == family)
            .map(|(n, e)| {
                let servable = crate::ip::servable(e.spec.ip, self.policy.allow_private);
                let up = health.is_up(n);
                let same_isp = isp == Some(&e.spec.isp);
                let in_answer = e.usable && answer.ips.contains(&e.spec.ip);
                let reason = if !e.spec.enabled {
                    "disabled"
                } else if !servable {
                    "address not servable (unspecified, private, loopback or reserved)"
                } else if in_answer && answer.status == AnswerStatus::FailOpen {
                    "in answer: no node is up, so the answer fails open (when_all_down)"
                } else if in_answer {
                    "in answer"
                } else if !up && answer.status != AnswerStatus::FailOpen {
                    "down: failing health checks"
                } else if same_isp_up && !same_isp {
                    "other ISP: nodes of the client's ISP are up"
                } else {
                    "ranked below the answer's max_answers"
                };
                let terms = e.terms(&self.policy, isp, region);
                let (latency_ms, latency_source) = e.latency_for(isp, region);
                NodeExplanation {
                    id: e.id.to_string(),
                    ip: e.spec.ip,
                    isp: e.spec.isp.to_string(),
                    region: e.spec.region.to_string(),
                    enabled: e.spec.enabled,
                    servable,
                    up,
                    same_isp,
                    score: terms.total(),
                    terms,
                    latency_ms,
                    latency_source,
                    in_answer,
                    reason,
                }
            })
            .collect();
        let position =
            |n: &NodeExplanation| answer.ips.iter().position(|ip| *ip == n.ip).unwrap_or(usize::MAX);
        // Answered nodes first in answer order, then usable ones by score, then the rest.
        nodes.sort_by(|a, b| {
            b.in_answer
                .cmp(&a.in_answer)
                .then_with(|| (b.enabled && b.servable).cmp(&(a.enabled && a.servable)))
                .then_with(|| position(a).cmp(&position(b)))
                .then_with(|| b.score.total_cmp(&a.score))
                .then_with(|| a.id.cmp(&b.id))
        });
        let candidates = match answer.status {
            AnswerStatus::NoRecord | AnswerStatus::NoHealthyNode => "none",
            _ if same_isp_up => "same_isp",
            _ => "all",
        };
        Some(Explanation {
            pool: pool.name.to_string(),
            decided_by,
            rule,
            split,
            chosen_pool,
            ttl: answer.ttl,
            max_answers: domain.max_answers,
            family: family.label(),
            status: match answer.status {
                AnswerStatus::Ok => "ok",
                AnswerStatus::FailOpen => "fail-open",
                AnswerStatus::NoRecord => "no-record",
                AnswerStatus::NoHealthyNode => "no-healthy-node",
            },
            candidates,
            answer: answer.ips,
            nodes,
        })
    }
}
