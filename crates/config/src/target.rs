//! Targeting: a module's `targets`, overrides of the document for the devices they match
//! (docs/config-center.md, "Targeting"). Pure.
//!
//! ```json
//! "targets": [{"match": {"platform": "android", "appVersion": ">=5.2 <6", "isp": "unicom",
//!              "region": "shanghai", "labels": {"channel": "beta"}},
//!              "override": {"configRequestInterval": 60000}}]
//! ```
//!
//! Every field of a `match` must hold (an absent one holds for everyone); the first target
//! whose `match` holds applies its `override`, fields of the document that replace the
//! document's own. `isp` and `region` are the server's classification of the device's address,
//! the rest what the device sends in its POST.

use std::collections::BTreeMap;
use std::net::IpAddr;

use httpdns_core::model::FieldError;
use serde::{Deserialize, Serialize};

use crate::document::{HostEntry, MergeHostConfig, Rate};

/// Targets a module may have, and labels a match may name.
pub const MAX_TARGETS: usize = 64;
pub const MAX_LABELS: usize = 16;
/// Longest label key or value, platform, carrier or region a match names.
pub const MAX_TEXT: usize = 64;

/// One target: who, and what changes for them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    #[serde(rename = "match")]
    pub when: Match,
    #[serde(rename = "override")]
    pub with: Override,
}

/// The device attributes a target needs; absent fields hold for every device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Match {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// A semver range: comparators (`>=5.2`, `<6`, `=5.2.1`, `^5.2`, `~5.2`, `5.2.*`, a bare
    /// version) joined by spaces or commas (all must hold), alternatives by `||`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Every label named must be sent with this value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// Fields of the document a target replaces (the rest stay the document's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Override {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_host_configs: Option<Vec<MergeHostConfig>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_list_config: Option<Vec<HostEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revive_probe_interval: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_request_interval: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_ip_list: Option<Vec<IpAddr>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convergence_rate: Option<Rate>,
}

/// What is known of a device when its document is rendered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Device<'a> {
    pub platform: Option<&'a str>,
    pub app_version: Option<&'a str>,
    /// The server's classification of the device's address.
    pub isp: Option<&'a str>,
    pub region: Option<&'a str>,
    pub labels: Option<&'a BTreeMap<String, String>>,
}

impl Match {
    /// Whether every field named holds for `device`. Platforms compare without case.
    pub fn holds(&self, device: &Device<'_>) -> bool {
        let same = |want: &Option<String>, have: Option<&str>| {
            want.as_ref().is_none_or(|w| have.is_some_and(|h| h.eq_ignore_ascii_case(w)))
        };
        same(&self.platform, device.platform)
            && same(&self.isp, device.isp)
            && same(&self.region, device.region)
            && self.app_version.as_ref().is_none_or(|range| {
                let have = device.app_version.and_then(Version::parse);
                have.is_some_and(|v| Range::parse(range).is_some_and(|r| r.holds(&v)))
            })
            && self.labels.iter().all(|(k, v)| device.labels.and_then(|l| l.get(k)) == Some(v))
    }

    fn validate(&self, at: &str) -> Result<(), FieldError> {
        for (name, value) in [("platform", &self.platform), ("isp", &self.isp), ("region", &self.region)] {
            if value.as_ref().is_some_and(|v| v.is_empty() || v.len() > MAX_TEXT) {
                return Err(FieldError::new(format!("{at}.{name}"), format!("1 to {MAX_TEXT} characters")));
            }
        }
        if let Some(r) = &self.app_version {
            if Range::parse(r).is_none() {
                return Err(FieldError::new(
                    format!("{at}.appVersion"),
                    "a semver range: comparators such as >=5.2, <6, ^5.2, ~5.2, 5.2.* joined by spaces, alternatives by ||",
                ));
            }
        }
        if self.labels.len() > MAX_LABELS {
            return Err(FieldError::new(format!("{at}.labels"), format!("at most {MAX_LABELS} labels")));
        }
        for (k, v) in &self.labels {
            if k.is_empty() || k.len() > MAX_TEXT || v.len() > MAX_TEXT {
                return Err(FieldError::new(
                    format!("{at}.labels.{k}"),
                    format!("keys of 1 to {MAX_TEXT} characters, values of at most {MAX_TEXT}"),
                ));
            }
        }
        Ok(())
    }
}

/// Checks the targets (the overridden documents are checked by the document's `validate`).
pub fn validate(targets: &[Target]) -> Result<(), FieldError> {
    if targets.len() > MAX_TARGETS {
        return Err(FieldError::new("targets", format!("at most {MAX_TARGETS} targets")));
    }
    for (i, t) in targets.iter().enumerate() {
        t.when.validate(&format!("targets[{i}].match"))?;
    }
    Ok(())
}

/// The index of the first target whose match holds for `device`.
pub fn first_match(targets: &[Target], device: &Device<'_>) -> Option<usize> {
    targets.iter().position(|t| t.when.holds(device))
}

/// A version as apps write it: up to three numbers (missing ones are 0) and an optional
/// pre-release after `-` (which sorts before its release, as semver says); `+build` ignored.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    numbers: [u64; 3],
    /// `true` for a release: it sorts after every pre-release of the same numbers.
    release: bool,
    pre: String,
}

impl Version {
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().trim_start_matches(['v', 'V']);
        let s = s.split('+').next()?;
        let (core, pre) = match s.split_once('-') {
            Some((c, p)) if !p.is_empty() => (c, p),
            Some(_) => return None,
            None => (s, ""),
        };
        let mut numbers = [0u64; 3];
        for (n, part) in core.split('.').enumerate() {
            if n == 3 || part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) || part.len() > 18 {
                return None;
            }
            numbers[n] = part.parse().ok()?;
        }
        Some(Self { numbers, release: pre.is_empty(), pre: pre.to_owned() })
    }

    fn of(numbers: [u64; 3]) -> Self {
        Self { numbers, release: true, pre: String::new() }
    }

    /// The lowest version of `numbers` (its first pre-release): a range's `<6` excludes `6.0.0-rc1`.
    fn lowest(numbers: [u64; 3]) -> Self {
        Self { numbers, release: false, pre: String::new() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

/// A semver range: alternatives (`||`) of comparator sets, each all of its comparators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    any_of: Vec<Vec<(Op, Version)>>,
}

impl Range {
    pub fn parse(s: &str) -> Option<Self> {
        let mut any_of = Vec::new();
        for alt in s.split("||") {
            let mut all = Vec::new();
            for c in alt.split([' ', ',']).filter(|c| !c.is_empty()) {
                all.extend(comparator(c)?);
            }
            if all.is_empty() {
                return None;
            }
            any_of.push(all);
        }
        Some(Self { any_of })
    }

    pub fn holds(&self, v: &Version) -> bool {
        self.any_of.iter().any(|all| {
            all.iter().all(|(op, w)| match op {
                Op::Lt => v < w,
                Op::Le => v <= w,
                Op::Gt => v > w,
                Op::Ge => v >= w,
                Op::Eq => v == w,
            })
        })
    }
}

/// How many numbers a partial version names (`5.2` names two), and them.
fn partial(s: &str) -> Option<(usize, [u64; 3])> {
    let s = s.trim_end_matches(".*").trim_end_matches(".x");
    if s.contains('-') || s.contains('*') {
        return None;
    }
    let n = s.split('.').count();
    Version::parse(s).map(|v| (n.min(3), v.numbers))
}

/// The next version after every one that starts with the first `n` numbers of `v`.
fn bump(n: usize, v: [u64; 3]) -> Option<[u64; 3]> {
    let i = n.checked_sub(1)?;
    let mut out = [0; 3];
    out[..i].copy_from_slice(&v[..i]);
    out[i] = v[i].checked_add(1)?;
    Some(out)
}

fn comparator(c: &str) -> Option<Vec<(Op, Version)>> {
    for (prefix, op) in
        [(">=", Op::Ge), ("<=", Op::Le), (">", Op::Gt), ("<", Op::Lt), ("==", Op::Eq), ("=", Op::Eq)]
    {
        if let Some(rest) = c.strip_prefix(prefix) {
            let v = Version::parse(rest)?;
            // `<6` means below every 6.x, its pre-releases included.
            let v = if op == Op::Lt && v.release { Version::lowest(v.numbers) } else { v };
            return Some(vec![(op, v)]);
        }
    }
    if let Some(rest) = c.strip_prefix('^') {
        let (n, v) = partial(rest)?;
        // The first non-zero number stays fixed (of those named).
        let fixed = v.iter().take(n).position(|x| *x != 0).map_or(n, |i| i + 1);
        return Some(vec![(Op::Ge, Version::of(v)), (Op::Lt, Version::lowest(bump(fixed, v)?))]);
    }
    if let Some(rest) = c.strip_prefix('~') {
        let (n, v) = partial(rest)?;
        let fixed = if n >= 2 { 2 } else { 1 };
        return Some(vec![(Op::Ge, Version::of(v)), (Op::Lt, Version::lowest(bump(fixed, v)?))]);
    }
    if c == "*" || c == "x" {
        return Some(vec![(Op::Ge, Version::lowest([0, 0, 0]))]);
    }
    let (n, v) = partial(c)?;
    if n == 3 && !c.ends_with('*') && !c.ends_with('x') {
        return Some(vec![(Op::Eq, Version::parse(c)?)]);
    }
    Some(vec![(Op::Ge, Version::of(v)), (Op::Lt, Version::lowest(bump(n, v)?))])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(range: &str, version: &str) -> bool {
        Range::parse(range).unwrap().holds(&Version::parse(version).unwrap())
    }

    #[test]
    fn semver_ranges() {
        assert!(holds(">=5.2", "5.2.0") && holds(">=5.2", "5.10") && !holds(">=5.2", "5.1.9"));
        assert!(holds(">=5.2 <6", "5.9.9") && !holds(">=5.2 <6", "6.0.0") && !holds(">=5.2 <6", "6.0.0-rc1"));
        assert!(holds(">=5.2, <6", "5.3"));
        assert!(holds("^5.2", "5.99") && !holds("^5.2", "6.0") && !holds("^5.2", "5.1"));
        assert!(holds("^0.3", "0.3.7") && !holds("^0.3", "0.4.0"));
        assert!(holds("~5.2", "5.2.9") && !holds("~5.2", "5.3.0"));
        assert!(holds("5.2.*", "5.2.3") && !holds("5.2.*", "5.3.0") && holds("5", "5.7.1"));
        assert!(
            holds("=5.2.1", "5.2.1") && !holds("=5.2.1", "5.2.1-beta") && holds("5.2.1", "v5.2.1+build7")
        );
        assert!(holds("<5 || >=7", "4.9") && holds("<5 || >=7", "7.0") && !holds("<5 || >=7", "6.1"));
        assert!(
            holds(">=5.2.0-beta", "5.2.0-beta")
                && holds(">5.2.0-beta", "5.2.0")
                && !holds(">=5.2", "5.2.0-beta")
        );
        for bad in ["", ">=", "5..2", ">=a", "1.2.3.4", "^", "||", ">=5 ||"] {
            assert!(Range::parse(bad).is_none(), "{bad:?}");
        }
        assert!(Version::parse("5.x.1").is_none() && Version::parse("").is_none());
    }

    #[test]
    fn the_first_matching_target_wins_and_absent_fields_hold_for_all() {
        let targets: Vec<Target> = serde_json::from_str(
            r#"[{"match": {"platform": "ios", "labels": {"channel": "beta"}}, "override": {"configRequestInterval": 60000}},
                {"match": {"isp": "unicom"}, "override": {}},
                {"match": {}, "override": {}}]"#,
        )
        .unwrap();
        validate(&targets).unwrap();
        let labels: BTreeMap<String, String> = [("channel".to_owned(), "beta".to_owned())].into();
        let beta_ios = Device { platform: Some("iOS"), labels: Some(&labels), ..Device::default() };
        assert_eq!(first_match(&targets, &beta_ios), Some(0));
        let ios = Device { platform: Some("ios"), isp: Some("unicom"), ..Device::default() };
        assert_eq!(first_match(&targets, &ios), Some(1));
        assert_eq!(first_match(&targets, &Device::default()), Some(2));
        let bad: Vec<Target> =
            serde_json::from_str(r#"[{"match": {"appVersion": ">=x"}, "override": {}}]"#).unwrap();
        assert_eq!(validate(&bad).unwrap_err().field, "targets[0].match.appVersion");
        assert!(serde_json::from_str::<Vec<Target>>(r#"[{"match": {"os": "x"}, "override": {}}]"#).is_err());
        assert!(
            serde_json::from_str::<Vec<Target>>(r#"[{"match": {}, "override": {"targets": []}}]"#).is_err()
        );
    }
}
