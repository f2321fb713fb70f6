//! Scheduling beyond one pool: the weighted split between pools, rules by client attributes,
//! and the choice when nodes are down. Pure functions over the spec types, so the snapshot's
//! answer path and its explanation call the same code, and the figures in
//! `docs/scheduling.md` (the share of clients a weight change moves) come from these tests.
//!
//! # The split is weighted rendezvous hashing
//!
//! Each pool of a split draws, per client, `-ln(u) / weight` with `u` uniform in (0, 1) from a
//! hash of the client's seed and the pool's name; the smallest draw wins. The draws are
//! exponential with rate `weight`, so a pool wins with probability `weight / Σ weights`
//! exactly, and a client's draws depend only on its address and the pool names, so it keeps
//! its pool across TTLs. When weights change, only clients whose winner changes move: for
//! 70/30 -> 60/40 a client of the 30 side stays (its draw only got smaller), and clients of the
//! 70 side move to the other pool in proportion, 10% of all clients: the least any scheme that
//! keeps the weights can move.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::FieldError;
use crate::snapshot::ClientView;
use crate::token::Token;

/// One pool of a weighted split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitEntry {
    pub pool: Token,
    /// A relative weight (0 drains the pool; at least one entry is above 0).
    pub weight: u32,
}

/// What to answer when no node of the chosen pool (nor of the backup pool) is up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenAllDown {
    /// The chosen pool's nodes, as if they were up (possibly dead nodes beat sending every
    /// client to LocalDNS at once).
    #[default]
    FailOpen,
    /// The backup pool's nodes, as if they were up.
    Backup,
    /// No address (NODATA on DNS, an empty answer on HTTP).
    Empty,
}

impl WhenAllDown {
    pub fn is_default(&self) -> bool {
        *self == Self::FailOpen
    }
}

/// A rule: when every criterion given matches, answer from `pool`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(rename = "match")]
    pub matches: RuleMatch,
    pub pool: Token,
}

/// The criteria of a rule; each one given must match (at least one is given).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isp: Option<Token>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Token>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<VersionRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<Token>,
}

/// A semver range (`>=5.2`, `>=5.0, <6`, `~5.3`, `^4`), kept as written and parsed once.
#[derive(Clone, PartialEq, Eq)]
pub struct VersionRange {
    text: String,
    req: semver::VersionReq,
}

impl VersionRange {
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.len() > 128 {
            return Err("must be a semver range such as \">=5.2\" (at most 128 characters)".into());
        }
        semver::VersionReq::parse(trimmed)
            .map(|req| Self { text: trimmed.to_owned(), req })
            .map_err(|e| format!("{trimmed:?} is not a semver range such as \">=5.2\": {e}"))
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, version: &semver::Version) -> bool {
        self.req.matches(version)
    }
}

impl fmt::Debug for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VersionRange({})", self.text)
    }
}

impl Serialize for VersionRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for VersionRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// What a client says of itself beyond its address: its app's version and its tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientAttrs {
    pub app_version: Option<semver::Version>,
    /// Lowercase, as rules' tags are tokens.
    pub tags: Vec<String>,
}

/// The attributes of a client that said nothing.
pub static NO_ATTRS: ClientAttrs = ClientAttrs { app_version: None, tags: Vec::new() };

impl ClientAttrs {
    /// Reads an app version leniently, as apps write them: `5.2`, `v5.2.1`, `5.3.0-beta.1`,
    /// `5` (missing parts are 0). Anything else is no version (rules on versions then do
    /// not match), not an error: the parameter is the app's, not the operator's.
    pub fn parse_version(raw: &str) -> Option<semver::Version> {
        let raw = raw.trim();
        let raw = raw.strip_prefix(['v', 'V']).unwrap_or(raw);
        if raw.is_empty() || raw.len() > 64 {
            return None;
        }
        if let Ok(v) = semver::Version::parse(raw) {
            return Some(v);
        }
        // `5.2` or `5.2-beta`: pad the numeric core to three parts.
        let (core, rest) = match raw.find(['-', '+']) {
            Some(i) => raw.split_at(i),
            None => (raw, ""),
        };
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() > 3 || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
            return None;
        }
        let mut padded = parts.join(".");
        for _ in parts.len()..3 {
            padded.push_str(".0");
        }
        semver::Version::parse(&format!("{padded}{rest}")).ok()
    }

    /// Adds tags from a comma-separated list, lowercased; empty items are skipped and at most
    /// 16 tags are kept, so a request cannot make rule matching expensive.
    pub fn add_tags(&mut self, list: &str) {
        for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if self.tags.len() >= 16 {
                return;
            }
            let t = t.to_ascii_lowercase();
            if !self.tags.contains(&t) {
                self.tags.push(t);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.app_version.is_none() && self.tags.is_empty()
    }
}

impl RuleMatch {
    /// Whether every criterion given holds for the client.
    pub fn holds(&self, view: &ClientView, attrs: &ClientAttrs) -> bool {
        self.isp.as_ref().is_none_or(|i| view.isp.as_ref() == Some(i))
            && self.region.as_ref().is_none_or(|r| view.region.as_ref() == Some(r))
            && self
                .app_version
                .as_ref()
                .is_none_or(|range| attrs.app_version.as_ref().is_some_and(|v| range.matches(v)))
            && self.tag.as_ref().is_none_or(|t| attrs.tags.iter().any(|c| c == t.as_str()))
    }

    fn is_empty(&self) -> bool {
        self.isp.is_none() && self.region.is_none() && self.app_version.is_none() && self.tag.is_none()
    }
}

/// The index of the first rule that holds for the client.
pub fn first_rule(rules: &[Rule], view: &ClientView, attrs: &ClientAttrs) -> Option<usize> {
    rules.iter().position(|r| r.matches.holds(view, attrs))
}

/// The index of the split entry a client goes to (weighted rendezvous hashing, see the module
/// docs); `None` when no entry has a weight above 0.
pub fn split_pick(split: &[SplitEntry], seed: u64) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, e) in split.iter().enumerate() {
        if e.weight == 0 {
            continue;
        }
        let h = mix(seed ^ name_hash(e.pool.as_str()));
        // 53 bits to a float strictly inside (0, 1), so the logarithm is finite.
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let draw = -u.ln() / f64::from(e.weight);
        if best.is_none_or(|(_, b)| draw < b) {
            best = Some((i, draw));
        }
    }
    best.map(|(i, _)| i)
}

/// FNV-1a of a pool name: stable across processes and versions (std's hashers are not), so
/// every replica sends a client to the same pool.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The SplitMix64 finaliser: every bit of the input reaches every bit of the output.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Largest number of split entries and of rules of one domain.
pub const MAX_SPLIT: usize = 16;
pub const MAX_RULES: usize = 64;
/// Largest split weight (weights are relative; this keeps their sum far from overflow).
pub const MAX_WEIGHT: u32 = 1_000_000;

/// Checks a split's entries: 1 to [`MAX_SPLIT`], distinct pools, weights up to
/// [`MAX_WEIGHT`], at least one above 0.
pub fn validate_split(split: &[SplitEntry]) -> Result<(), FieldError> {
    if split.is_empty() || split.len() > MAX_SPLIT {
        return Err(FieldError::new("split", format!("must list 1 to {MAX_SPLIT} pools")));
    }
    for (i, e) in split.iter().enumerate() {
        if e.weight > MAX_WEIGHT {
            return Err(FieldError::new(format!("split[{i}].weight"), format!("must be 0 to {MAX_WEIGHT}")));
        }
        if split[..i].iter().any(|o| o.pool == e.pool) {
            return Err(FieldError::new(format!("split[{i}].pool"), "names a pool listed before"));
        }
    }
    if split.iter().all(|e| e.weight == 0) {
        return Err(FieldError::new("split", "at least one weight must be above 0"));
    }
    Ok(())
}

/// Checks rules: at most [`MAX_RULES`], each with at least one criterion.
pub fn validate_rules(rules: &[Rule]) -> Result<(), FieldError> {
    if rules.len() > MAX_RULES {
        return Err(FieldError::new("rules", format!("at most {MAX_RULES} rules")));
    }
    for (i, r) in rules.iter().enumerate() {
        if r.matches.is_empty() {
            return Err(FieldError::new(
                format!("rules[{i}].match"),
                "needs at least one of isp, region, app_version, tag",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(s: &str) -> Token {
        Token::parse(s).unwrap()
    }

    fn split(weights: &[(&str, u32)]) -> Vec<SplitEntry> {
        weights.iter().map(|(p, w)| SplitEntry { pool: tok(p), weight: *w }).collect()
    }

    fn seeds(n: u32) -> impl Iterator<Item = u64> {
        (0..n).map(|i| {
            crate::snapshot::client_seed(std::net::IpAddr::from([
                1,
                (i >> 16) as u8,
                (i >> 8) as u8,
                i as u8,
            ]))
        })
    }

    #[test]
    fn split_follows_the_weights() {
        let s = split(&[("vendor-a", 70), ("vendor-b", 30)]);
        let n = 100_000;
        let a = seeds(n).filter(|&x| split_pick(&s, x) == Some(0)).count();
        let share = a as f64 / f64::from(n);
        assert!((share - 0.7).abs() < 0.01, "{share}");
    }

    #[test]
    fn weight_change_moves_only_the_difference() {
        let before = split(&[("vendor-a", 70), ("vendor-b", 30)]);
        let after = split(&[("vendor-a", 60), ("vendor-b", 40)]);
        let n = 100_000;
        let (mut moved, mut b_to_a) = (0, 0);
        for x in seeds(n) {
            let (p, q) = (split_pick(&before, x), split_pick(&after, x));
            if p != q {
                moved += 1;
                if p == Some(1) {
                    b_to_a += 1;
                }
            }
        }
        let share = f64::from(moved) / f64::from(n);
        // The least a split that keeps the weights can move is 10%.
        assert!((share - 0.10).abs() < 0.005, "{share}");
        assert_eq!(b_to_a, 0, "a client of the side that grew never moves");
    }

    #[test]
    fn zero_weight_drains_and_all_zero_picks_nothing() {
        let s = split(&[("a", 0), ("b", 5)]);
        assert!(seeds(1000).all(|x| split_pick(&s, x) == Some(1)));
        assert_eq!(split_pick(&split(&[("a", 0)]), 7), None);
    }

    #[test]
    fn versions_are_read_leniently() {
        let v = |s: &str| ClientAttrs::parse_version(s).map(|v| v.to_string());
        assert_eq!(v("5.2").as_deref(), Some("5.2.0"));
        assert_eq!(v("v5.2.1").as_deref(), Some("5.2.1"));
        assert_eq!(v("5").as_deref(), Some("5.0.0"));
        assert_eq!(v("5.3-beta.1").as_deref(), Some("5.3.0-beta.1"));
        assert_eq!(v("five"), None);
        assert_eq!(v("1.2.3.4"), None);
    }

    #[test]
    fn rules_match_on_every_given_criterion() {
        let range = VersionRange::parse(">=5.2").unwrap();
        let m = RuleMatch { isp: Some(tok("unicom")), app_version: Some(range), ..RuleMatch::default() };
        let view = ClientView { isp: Some(tok("unicom")), region: None };
        let mut attrs = ClientAttrs { app_version: ClientAttrs::parse_version("5.2"), tags: vec![] };
        assert!(m.holds(&view, &attrs));
        attrs.app_version = ClientAttrs::parse_version("5.1.9");
        assert!(!m.holds(&view, &attrs));
        attrs.app_version = None;
        assert!(!m.holds(&view, &attrs), "a version rule needs a version");
        let t = RuleMatch { tag: Some(tok("beta")), ..RuleMatch::default() };
        attrs.add_tags("VIP, Beta");
        assert!(t.holds(&ClientView::default(), &attrs));
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(validate_split(&[]).unwrap_err().field, "split");
        assert_eq!(validate_split(&split(&[("a", 1), ("a", 2)])).unwrap_err().field, "split[1].pool");
        assert_eq!(validate_split(&split(&[("a", 0)])).unwrap_err().field, "split");
        let empty = Rule { matches: RuleMatch::default(), pool: tok("c") };
        assert_eq!(validate_rules(&[empty]).unwrap_err().field, "rules[0].match");
        assert!(VersionRange::parse("=>5").is_err());
        assert!(VersionRange::parse(">=5.0, <6").is_ok());
    }
}
