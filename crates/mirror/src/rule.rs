//! The compiled rule table the gateway matches request paths against (longest prefix wins,
//! on segment boundaries). The rule as stored and its validation are
//! `httpdns_core::model::mirror` (`RuleSpec`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use httpdns_core::model::mirror::{RuleParts, RuleSpec};
use httpdns_core::model::FieldError;
use url::Url;

/// A compiled rule, ready for requests.
#[derive(Debug)]
pub struct Rule {
    pub name: String,
    pub spec: RuleSpec,
    pub prefix: Vec<String>,
    pub origins: Vec<Url>,
    pub replace_prefix: Vec<String>,
    /// `scheme://host:port` of every origin a redirect may go to without the address check.
    pub trusted_origins: BTreeSet<String>,
    pub query_params: BTreeSet<String>,
}

impl Rule {
    /// The rule `spec` compiles to ([`RuleSpec::compile_parts`]), or the first field at fault.
    pub fn compile(name: &str, spec: RuleSpec) -> Result<Self, FieldError> {
        let RuleParts { prefix, origins, replace_prefix, trusted_origins, query_params } =
            spec.compile_parts()?;
        Ok(Self {
            name: name.to_owned(),
            prefix,
            origins,
            replace_prefix,
            trusted_origins,
            query_params,
            spec,
        })
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.spec.connect_timeout_ms)
    }
    pub fn first_byte_timeout(&self) -> Duration {
        Duration::from_millis(self.spec.first_byte_timeout_ms)
    }
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.spec.idle_timeout_ms)
    }
    pub fn negative_ttl(&self) -> Duration {
        Duration::from_millis(self.spec.negative_ttl_ms)
    }
}

/// Every rule, matched by longest prefix. Swapped whole when the admin API changes a rule.
#[derive(Debug, Default)]
pub struct RuleTable {
    /// Longest prefix first, so the first match is the most specific.
    rules: Vec<Arc<Rule>>,
}

impl RuleTable {
    /// Compiles stored rules; a rule that no longer validates is skipped with an error log
    /// rather than taking the others down.
    pub fn new(specs: impl IntoIterator<Item = (String, RuleSpec)>) -> Self {
        let mut rules: Vec<Arc<Rule>> = specs
            .into_iter()
            .filter_map(|(name, spec)| match Rule::compile(&name, spec) {
                Ok(r) => Some(Arc::new(r)),
                Err(e) => {
                    tracing::error!(rule = %name, field = %e.field, error = %e.message, "Skipping invalid mirror rule.");
                    None
                }
            })
            .collect();
        rules.sort_by(|a, b| b.prefix.len().cmp(&a.prefix.len()).then_with(|| a.name.cmp(&b.name)));
        Self { rules }
    }

    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    /// The most specific rule whose prefix is a whole-segment prefix of `path` (the raw,
    /// still encoded request path), and the rest of the path after it.
    pub fn matching<'p>(&self, path: &'p str) -> Option<(&Arc<Rule>, &'p str)> {
        let path = path.strip_prefix('/')?;
        self.rules.iter().find_map(|rule| {
            let mut rest = path;
            for seg in &rule.prefix {
                rest = rest.strip_prefix(seg.as_str())?;
                rest = rest.strip_prefix('/')?;
            }
            Some((rule, rest))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prefix: &str, origin: &str) -> RuleSpec {
        serde_json::from_value(serde_json::json!({"path_prefix": prefix, "origin": origin})).unwrap()
    }

    #[test]
    fn longest_prefix_on_segment_boundaries() {
        let t = RuleTable::new([
            ("img".to_owned(), spec("/image", "http://a")),
            ("thumbs".to_owned(), spec("/image/thumbs", "http://b")),
            ("all".to_owned(), spec("/", "http://c")),
        ]);
        let (r, rest) = t.matching("/image/thumbs/a.jpg").unwrap();
        assert_eq!((r.name.as_str(), rest), ("thumbs", "a.jpg"));
        let (r, rest) = t.matching("/image/a.jpg").unwrap();
        assert_eq!((r.name.as_str(), rest), ("img", "a.jpg"));
        // `/imagex` is not under `/image`.
        let (r, rest) = t.matching("/imagex/a.jpg").unwrap();
        assert_eq!((r.name.as_str(), rest), ("all", "imagex/a.jpg"));
        let only = RuleTable::new([("img".to_owned(), spec("/image", "http://a"))]);
        assert!(only.matching("/imagex/a.jpg").is_none());
        assert!(only.matching("/image").is_none());
    }
}
