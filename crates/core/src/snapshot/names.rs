//! The managed names of a snapshot: exact names and wildcards, and the lookups the answer
//! path and the DNS zone logic make in them.

use foldhash::HashMap as FastMap;

use super::Snapshot;
use crate::model::DomainSpec;
use crate::name::DomainName;
use crate::token::Token;

/// The managed names, and the distinct pools they name (in first-seen order), so a snapshot
/// that shares the map can create those pools without reading it.
#[derive(Debug, Default)]
pub(super) struct Domains {
    pub(super) specs: FastMap<DomainName, DomainSpec>,
    /// Wildcard domains (`*.img.example.com`) by the name their label stands under
    /// (`img.example.com`), so a name's wildcard is found by slicing off its first label,
    /// without building a string.
    pub(super) wildcards: FastMap<Box<str>, (DomainName, DomainSpec)>,
    pub(super) pools: Vec<Token>,
}

impl Domains {
    /// The domain answering `name`: its own, else the wildcard of its parent (one label).
    pub(super) fn find(&self, name: &str) -> Option<&DomainSpec> {
        match self.specs.get(name) {
            Some(d) => Some(d),
            None if self.wildcards.is_empty() => None,
            None => self.wildcards.get(name.split_once('.')?.1).map(|(_, d)| d),
        }
    }

    /// [`find`](Self::find) with the name of the domain resource that answers (the wildcard's
    /// for a name it covers).
    pub(super) fn find_entry(&self, name: &str) -> Option<(&str, &DomainSpec)> {
        match self.specs.get_key_value(name) {
            Some((k, d)) => Some((k.as_str(), d)),
            None if self.wildcards.is_empty() => None,
            None => self.wildcards.get(name.split_once('.')?.1).map(|(k, d)| (k.as_str(), d)),
        }
    }
}

impl Snapshot {
    /// Whether `name` is a managed domain (itself or through a wildcard).
    pub fn is_managed(&self, name: &DomainName) -> bool {
        self.domains.find(name.as_str()).is_some()
    }

    /// The spec answering `name`: the domain of that name, else the wildcard `*.<parent>` of
    /// its parent (a wildcard stands for exactly one label; `docs/scheduling.md`).
    pub fn domain(&self, name: &DomainName) -> Option<&DomainSpec> {
        self.domains.find(name.as_str())
    }

    /// [`domain`](Self::domain) for a name spelled `name` (lowercase, no trailing dot), without
    /// making a [`DomainName`] of it first: no valid name, no managed domain.
    pub fn domain_named(&self, name: &str) -> Option<&DomainSpec> {
        self.domains.find(name)
    }

    /// [`domain_named`](Self::domain_named) with the name of the domain resource that answers
    /// it: the name itself, or the wildcard (`*.img.example.com`) that covers it.
    pub fn domain_entry(&self, name: &str) -> Option<(&str, &DomainSpec)> {
        self.domains.find_entry(name)
    }

    /// The nearest managed name strictly above `name` (`www.example.com` for
    /// `a.www.example.com`), with its spec: the zone `name` would be in.
    pub fn enclosing_domain(&self, name: &DomainName) -> Option<(DomainName, &DomainSpec)> {
        let mut rest = name.as_str();
        while let Some((_, parent)) = rest.split_once('.') {
            rest = parent;
            if let Ok(p) = DomainName::parse(parent) {
                if let Some(d) = self.domains.specs.get(&p) {
                    return Some((p, d));
                }
            }
        }
        None
    }

    /// Whether some managed name lies below `name` (which is then an empty non-terminal).
    /// Linear in the number of domains: only asked for names under a managed one that are
    /// not managed themselves.
    pub fn has_managed_below(&self, name: &DomainName) -> bool {
        let suffix = format!(".{}", name.as_str());
        // A wildcard `*.<parent>` lies below its parent and what is above it.
        self.domains.specs.keys().any(|d| d.as_str().ends_with(&suffix))
            || self.domains.wildcards.keys().any(|p| **p == *name.as_str() || p.ends_with(&suffix))
    }
}
