//! The step every front-end shares: one family of one managed domain for a classified client,
//! with the domain's aliases (`cname`) followed inside the snapshot. Generic over the health
//! source, so plain DNS's general path and its tests call it with their own.

use std::net::IpAddr;

use httpdns_core::model::DomainSpec;
use httpdns_core::schedule::ClientAttrs;
use httpdns_core::snapshot::NodeHealth;
use httpdns_core::{ClientView, DomainName, Family, Snapshot};

use crate::outcome::Outcome;

/// Largest number of aliases followed inside the snapshot (`cname` to a managed name that is
/// itself an alias), so a loop an operator made ends.
pub const MAX_ALIASES: usize = 8;

/// The addresses of one family of one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyAnswer {
    pub ips: Vec<IpAddr>,
    pub ttl: u32,
    pub outcome: Outcome,
}

impl FamilyAnswer {
    pub(crate) fn empty(outcome: Outcome) -> Self {
        Self { ips: Vec::new(), ttl: 0, outcome }
    }
}

/// What one family of a managed domain resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Chosen from the snapshot (the TTL capped by the aliases that led there).
    Managed(FamilyAnswer),
    /// An alias whose target is not managed here: the name to ask upstream, and the smallest
    /// TTL of the aliases that led there (which caps the answer's).
    Upstream(DomainName, u32),
    /// An alias loop, or a chain longer than [`MAX_ALIASES`].
    Loop,
}

/// Resolves family `fam` of `domain` for a client classified as `view`.
pub fn family<H: NodeHealth>(
    snapshot: &Snapshot,
    health: &H,
    domain: &DomainSpec,
    fam: Family,
    view: &ClientView,
    attrs: &ClientAttrs,
    seed: u64,
) -> Found {
    let resolve = |domain: &DomainSpec| {
        let a = snapshot.resolve_for(domain, fam, view, attrs, seed, health);
        FamilyAnswer { ips: a.ips, ttl: a.ttl, outcome: Outcome::from_status(a.status) }
    };
    if domain.cname.is_none() {
        return Found::Managed(resolve(domain));
    }
    match target(snapshot, domain) {
        Target::Managed(d, ttl) => {
            let mut f = resolve(d);
            f.ttl = f.ttl.min(ttl);
            Found::Managed(f)
        }
        Target::Upstream(alias, ttl) => Found::Upstream(alias, ttl),
        Target::Loop => Found::Loop,
    }
}

/// Where a name's answer comes from once aliases are followed.
enum Target<'s> {
    Managed(&'s DomainSpec, u32),
    Upstream(DomainName, u32),
    Loop,
}

/// Follows `domain`'s aliases inside `snapshot`.
fn target<'s>(snapshot: &'s Snapshot, mut domain: &'s DomainSpec) -> Target<'s> {
    let mut ttl = u32::MAX;
    for _ in 0..MAX_ALIASES {
        let Some(alias) = &domain.cname else { return Target::Managed(domain, ttl) };
        ttl = ttl.min(domain.ttl);
        match snapshot.domain(alias) {
            Some(next) => domain = next,
            None => return Target::Upstream(alias.clone(), ttl),
        }
    }
    Target::Loop
}
