//! The scheduling model as operators write it: networks, nodes, pools and managed domains.
//!
//! These `*Spec` types are the stored and wire form of each admin resource (the resource's
//! name lives in the URL, not in the body). Deserialising checks shapes and types; `validate`
//! checks everything that serde cannot (ranges, address classes) and names the offending field.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::ip::{classify, IpClass};
use crate::name::DomainName;
use crate::schedule::{self, Rule, SplitEntry, WhenAllDown};
use crate::token::Token;

pub mod mirror;
pub mod style;

/// A validation failure that names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// An operator CIDR: overrides GeoIP for addresses inside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isp: Option<Token>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Token>,
}

impl NetworkSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.isp.is_none() && self.region.is_none() {
            return Err(FieldError::new("isp", "a network needs an isp, a region or both"));
        }
        Ok(())
    }
}

/// Defaults for a node whose operator did not measure it yet. They sit mid-scale on purpose,
/// so that an unmeasured node neither beats measured good nodes nor loses to measured bad ones.
pub mod node_defaults {
    pub const LATENCY_MS: f64 = 100.0;
    pub const BANDWIDTH_MBPS: f64 = 100.0;
    pub const LOAD_PCT: f64 = 50.0;
}

/// An edge server that answers can point at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub ip: IpAddr,
    pub pool: Token,
    pub isp: Token,
    pub region: Token,
    #[serde(default = "default_bandwidth")]
    pub bandwidth_mbps: f64,
    #[serde(default = "default_load")]
    pub load_pct: f64,
    #[serde(default = "default_latency")]
    pub latency_ms: f64,
    #[serde(default = "default_true")]
    pub enabled: bool,
}

fn default_bandwidth() -> f64 {
    node_defaults::BANDWIDTH_MBPS
}
fn default_load() -> f64 {
    node_defaults::LOAD_PCT
}
fn default_latency() -> f64 {
    node_defaults::LATENCY_MS
}
fn default_true() -> bool {
    true
}

/// Upper bounds that catch unit mistakes (seconds typed as milliseconds, bits as megabits).
pub const MAX_LATENCY_MS: f64 = 600_000.0;
pub const MAX_BANDWIDTH_MBPS: f64 = 10_000_000.0;

impl NodeSpec {
    /// Checks ranges and the address class. `allow_private` admits private and loopback
    /// addresses for intranet deployments and tests; unspecified, multicast, documentation and
    /// reserved addresses are refused always.
    pub fn validate(&self, allow_private: bool) -> Result<(), FieldError> {
        match classify(self.ip) {
            IpClass::Public => {}
            IpClass::Private if allow_private => {}
            IpClass::Private => {
                return Err(FieldError::new(
                    "ip",
                    format!(
                        "{} is a private, loopback or link-local address; \
                         set HTTPDNS_ALLOW_PRIVATE_NODE_IPS=true for intranet deployments",
                        self.ip
                    ),
                ))
            }
            IpClass::Invalid => {
                return Err(FieldError::new(
                    "ip",
                    format!(
                        "{} is not a usable unicast address (unspecified, multicast, \
                         documentation or reserved range)",
                        self.ip
                    ),
                ))
            }
        }
        check_range("bandwidth_mbps", self.bandwidth_mbps, 0.0, MAX_BANDWIDTH_MBPS)?;
        check_range("load_pct", self.load_pct, 0.0, 100.0)?;
        check_range("latency_ms", self.latency_ms, 0.0, MAX_LATENCY_MS)?;
        Ok(())
    }
}

fn check_range(field: &str, value: f64, min: f64, max: f64) -> Result<(), FieldError> {
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(FieldError::new(field, format!("must be a number from {min} to {max}")))
    }
}

/// Options of a node pool. A pool exists as soon as a node or domain names it; this only
/// carries its settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheckSpec>,
}

/// How the server probes the nodes of a pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckSpec {
    pub kind: HealthCheckKind,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default)]
    pub method: HealthCheckMethod,
    /// Server name sent in the TLS handshake of an `https` check (default: none, the address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<DomainName>,
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_healthy_threshold")]
    pub healthy_threshold: u32,
    #[serde(default = "default_unhealthy_threshold")]
    pub unhealthy_threshold: u32,
    /// Statuses that count as healthy (`http`/`https`); empty: any 2xx.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected_status: Vec<u16>,
    /// Text the body must contain (`http`/`https` with `GET`), searched in its first 64 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_match: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthCheckKind {
    /// A TCP connect to the port.
    Tcp,
    /// An HTTP/1.1 request to the port and path; a 2xx status is healthy.
    Http,
    /// The same over TLS. The certificate is not verified: nodes are probed by address, and
    /// the check is about liveness, not identity.
    Https,
}

/// The HTTP method of an `http` check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthCheckMethod {
    #[default]
    #[serde(rename = "GET")]
    Get,
    #[serde(rename = "HEAD")]
    Head,
}

fn default_interval_ms() -> u64 {
    2000
}
fn default_timeout_ms() -> u64 {
    1000
}
fn default_healthy_threshold() -> u32 {
    2
}
fn default_unhealthy_threshold() -> u32 {
    3
}

impl PoolSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        let Some(hc) = &self.health_check else {
            return Ok(());
        };
        if hc.sni.is_some() && hc.kind != HealthCheckKind::Https {
            return Err(FieldError::new("health_check.sni", "only an https check sends a server name"));
        }
        if hc.port == 0 {
            return Err(FieldError::new("health_check.port", "must be 1 to 65535"));
        }
        match (&hc.kind, &hc.path) {
            (HealthCheckKind::Tcp, Some(_)) => {
                return Err(FieldError::new("health_check.path", "a tcp check has no path"))
            }
            (HealthCheckKind::Http | HealthCheckKind::Https, Some(p))
                if !p.starts_with('/') || p.len() > 1024 || p.chars().any(char::is_control) =>
            {
                return Err(FieldError::new(
                    "health_check.path",
                    "must start with '/' and hold no control characters (at most 1024)",
                ))
            }
            _ => {}
        }
        if !hc.expected_status.is_empty() && hc.kind == HealthCheckKind::Tcp {
            return Err(FieldError::new("health_check.expected_status", "a tcp check has no status"));
        }
        if hc.expected_status.len() > 32 || hc.expected_status.iter().any(|c| !(100..=599).contains(c)) {
            return Err(FieldError::new(
                "health_check.expected_status",
                "at most 32 statuses, each 100 to 599",
            ));
        }
        if let Some(m) = &hc.body_match {
            if hc.kind == HealthCheckKind::Tcp || hc.method == HealthCheckMethod::Head {
                return Err(FieldError::new(
                    "health_check.body_match",
                    "only an http or https GET check reads a body",
                ));
            }
            if m.is_empty() || m.len() > 256 || m.chars().any(char::is_control) {
                return Err(FieldError::new(
                    "health_check.body_match",
                    "must be 1 to 256 characters without control characters",
                ));
            }
        }
        if !(100..=3_600_000).contains(&hc.interval_ms) {
            return Err(FieldError::new("health_check.interval_ms", "must be 100 to 3600000"));
        }
        if hc.timeout_ms < 10 || hc.timeout_ms > hc.interval_ms {
            return Err(FieldError::new(
                "health_check.timeout_ms",
                "must be at least 10 and at most interval_ms",
            ));
        }
        if !(1..=100).contains(&hc.healthy_threshold) {
            return Err(FieldError::new("health_check.healthy_threshold", "must be 1 to 100"));
        }
        if !(1..=100).contains(&hc.unhealthy_threshold) {
            return Err(FieldError::new("health_check.unhealthy_threshold", "must be 1 to 100"));
        }
        Ok(())
    }
}

/// Largest TTL a managed domain may carry: one day. Mobile SDKs cap far lower anyway
/// (Tencent's `MAX_DEFAULT_TTL` is 6000 s).
pub const MAX_TTL: u32 = 86_400;
/// Largest number of addresses in one answer.
pub const MAX_ANSWERS: u32 = 32;

/// A managed domain: answered from a node pool (or a weighted split of pools, or by rules)
/// instead of upstream DNS, or as an alias of another name (`cname`). See
/// `docs/scheduling.md` for every field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<Token>,
    /// Pools by weight instead of `pool`, sticky per client address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<SplitEntry>,
    /// Answered from when fewer than `min_healthy` nodes of the chosen pool are up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_pool: Option<Token>,
    #[serde(default = "default_min_healthy", skip_serializing_if = "is_default_min_healthy")]
    pub min_healthy: u32,
    #[serde(default, skip_serializing_if = "WhenAllDown::is_default")]
    pub when_all_down: WhenAllDown,
    /// Answer as an alias of this name instead of from nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cname: Option<DomainName>,
    /// First match wins; no match: `split`, else `pool`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    #[serde(default = "default_ttl")]
    pub ttl: u32,
    #[serde(default = "default_max_answers")]
    pub max_answers: u32,
}

fn default_ttl() -> u32 {
    60
}
fn default_max_answers() -> u32 {
    4
}
fn default_min_healthy() -> u32 {
    1
}
fn is_default_min_healthy(n: &u32) -> bool {
    *n == 1
}

/// Largest `min_healthy`.
pub const MAX_MIN_HEALTHY: u32 = 10_000;

impl DomainSpec {
    /// A domain answered from one pool, every other field at its default.
    pub fn pooled(pool: Token, ttl: u32, max_answers: u32) -> Self {
        Self {
            pool: Some(pool),
            split: Vec::new(),
            backup_pool: None,
            min_healthy: 1,
            when_all_down: WhenAllDown::FailOpen,
            cname: None,
            rules: Vec::new(),
            ttl,
            max_answers,
        }
    }

    /// Every pool this domain may answer from: `pool`, the split's, the rules', the backup.
    pub fn pools(&self) -> impl Iterator<Item = &Token> {
        self.pool
            .iter()
            .chain(self.split.iter().map(|e| &e.pool))
            .chain(self.rules.iter().map(|r| &r.pool))
            .chain(self.backup_pool.iter())
    }

    pub fn validate(&self) -> Result<(), FieldError> {
        if !(1..=MAX_TTL).contains(&self.ttl) {
            return Err(FieldError::new("ttl", format!("must be 1 to {MAX_TTL} seconds")));
        }
        if !(1..=MAX_ANSWERS).contains(&self.max_answers) {
            return Err(FieldError::new("max_answers", format!("must be 1 to {MAX_ANSWERS}")));
        }
        let sources = usize::from(self.pool.is_some()) + usize::from(!self.split.is_empty());
        if self.cname.is_some() {
            // An alias has no data of its own (RFC 1034 §3.6.2), so nothing that picks nodes.
            let extra = [
                ("pool", self.pool.is_some()),
                ("split", !self.split.is_empty()),
                ("rules", !self.rules.is_empty()),
                ("backup_pool", self.backup_pool.is_some()),
                ("min_healthy", self.min_healthy != 1),
                ("when_all_down", !self.when_all_down.is_default()),
            ];
            if let Some((field, _)) = extra.iter().find(|(_, set)| *set) {
                return Err(FieldError::new(
                    *field,
                    "a cname domain answers with its alias only; remove this field",
                ));
            }
            return Ok(());
        }
        match sources {
            0 => return Err(FieldError::new("pool", "a domain needs a pool, a split or a cname")),
            2 => return Err(FieldError::new("split", "give either pool or split, not both")),
            _ => {}
        }
        if !self.split.is_empty() {
            schedule::validate_split(&self.split)?;
        }
        schedule::validate_rules(&self.rules)?;
        if !(1..=MAX_MIN_HEALTHY).contains(&self.min_healthy) {
            return Err(FieldError::new("min_healthy", format!("must be 1 to {MAX_MIN_HEALTHY}")));
        }
        if self.when_all_down == WhenAllDown::Backup && self.backup_pool.is_none() {
            return Err(FieldError::new("when_all_down", "\"backup\" needs a backup_pool"));
        }
        if let Some(b) = &self.backup_pool {
            if self.pool.as_ref() == Some(b) || self.split.iter().any(|e| &e.pool == b) {
                return Err(FieldError::new("backup_pool", "must differ from the pools it backs up"));
            }
        }
        Ok(())
    }
}

/// Digits of the shortest numeric (Tencent-issued) account token taken.
pub const MIN_NUMERIC_TOKEN: usize = 6;

/// A client account for signed or encrypted requests (DNSPod `id=`, Alibaba `/{account}/...`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountSpec {
    /// The shared secret: the DES/AES key of DNSPod requests, the signing secret of Alibaba ones.
    pub secret: String,
    /// Requests per second allowed to this account (none: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_qps: Option<u32>,
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Tencent's HTTPS mode: `/d?token=<token>` over HTTPS identifies this account, with the
    /// parameters and the answer in plain text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Alibaba's `/v2/d` encrypted modes (`m=1` AES-CBC, `m=2` AES-GCM): the AES key, hex
    /// (32, 48 or 64 digits: AES-128, -192, -256), as the SDKs' `aesSecretKey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aes_key: Option<String>,
}

impl AccountSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        let s = &self.secret;
        // DES uses the first 8 bytes of the key, so shorter secrets cannot work.
        if s.len() < 8 || s.len() > 128 || !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(FieldError::new(
                "secret",
                "must be 8 to 128 printable ASCII characters without spaces",
            ));
        }
        if self.rate_limit_qps == Some(0) {
            return Err(FieldError::new("rate_limit_qps", "must be at least 1 (omit it for no limit)"));
        }
        if let Some(t) = &self.token {
            // Ours: 16 to 128 characters. Tencent's console issues numbers (`8086421`), which
            // apps already ship: those are taken as they are, at 6 digits or more; a wrong
            // token costs its address a bounded budget of tries (docs/api.md).
            let ours = (16..=128).contains(&t.len())
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            let vendors = (MIN_NUMERIC_TOKEN..16).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit());
            if !ours && !vendors {
                return Err(FieldError::new(
                    "token",
                    "must be 16 to 128 letters, digits, '-', '_' or '.', or a number of 6 to 15 digits (Tencent's form)",
                ));
            }
        }
        if let Some(k) = &self.aes_key {
            if ![32, 48, 64].contains(&k.len()) || !k.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(FieldError::new(
                    "aes_key",
                    "must be 32, 48 or 64 hex digits (AES-128, -192 or -256)",
                ));
            }
        }
        Ok(())
    }
}

/// An account id: a decimal number from 1 to 4294967295, in canonical form.
pub fn parse_account_id(raw: &str) -> Result<u32, FieldError> {
    match raw.parse::<u32>() {
        Ok(n) if n > 0 && !raw.starts_with('0') && !raw.starts_with('+') => Ok(n),
        _ => Err(FieldError::new("id", "an account id is a number from 1 to 4294967295")),
    }
}

/// The name of a node or other free-form resource: 1..=128 characters of ASCII letters,
/// digits, `.`, `-` and `_`. Keeps ids safe to echo into URLs, logs and file names.
pub fn validate_resource_id(id: &str) -> Result<(), FieldError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        && id != "."
        && id != "..";
    if ok {
        Ok(())
    } else {
        Err(FieldError::new("id", "must be 1 to 128 characters of letters, digits, '.', '-' or '_'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(json: &str) -> NodeSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn node_defaults_apply() {
        let n = node(r#"{"ip":"1.2.3.4","pool":"edge","isp":"telecom","region":"beijing"}"#);
        assert!(n.enabled);
        assert_eq!(n.latency_ms, node_defaults::LATENCY_MS);
        n.validate(false).unwrap();
    }

    #[test]
    fn node_rejects_bad_addresses_and_ranges() {
        let base = r#""pool":"edge","isp":"telecom","region":"beijing""#;
        for ip in ["0.0.0.0", "224.0.0.1", "192.0.2.1", "::"] {
            let n = node(&format!(r#"{{"ip":"{ip}",{base}}}"#));
            assert_eq!(n.validate(true).unwrap_err().field, "ip", "{ip}");
        }
        let lo = node(&format!(r#"{{"ip":"127.0.0.1",{base}}}"#));
        assert_eq!(lo.validate(false).unwrap_err().field, "ip");
        lo.validate(true).unwrap();
        let load = node(&format!(r#"{{"ip":"1.2.3.4",{base},"load_pct":101}}"#));
        assert_eq!(load.validate(false).unwrap_err().field, "load_pct");
        let lat = node(&format!(r#"{{"ip":"1.2.3.4",{base},"latency_ms":-1}}"#));
        assert_eq!(lat.validate(false).unwrap_err().field, "latency_ms");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<DomainSpec>(r#"{"pool":"edge","tll":5}"#).unwrap_err();
        assert!(err.to_string().contains("tll"));
    }

    #[test]
    fn domain_ranges() {
        let d: DomainSpec = serde_json::from_str(r#"{"pool":"edge"}"#).unwrap();
        assert_eq!((d.ttl, d.max_answers), (60, 4));
        let d: DomainSpec = serde_json::from_str(r#"{"pool":"edge","ttl":0}"#).unwrap();
        assert_eq!(d.validate().unwrap_err().field, "ttl");
        let d: DomainSpec = serde_json::from_str(r#"{"pool":"edge","max_answers":33}"#).unwrap();
        assert_eq!(d.validate().unwrap_err().field, "max_answers");
    }

    #[test]
    fn domain_scheduling_fields() {
        let d = |json: &str| serde_json::from_str::<DomainSpec>(json).unwrap().validate();
        d(r#"{"split":[{"pool":"a","weight":70},{"pool":"b","weight":30}],"backup_pool":"c","min_healthy":2,"when_all_down":"backup"}"#).unwrap();
        d(r#"{"cname":"cdn.vendor.example"}"#).unwrap();
        d(r#"{"pool":"edge","rules":[{"match":{"app_version":">=5.2","tag":"beta"},"pool":"canary"}]}"#)
            .unwrap();
        assert_eq!(d("{}").unwrap_err().field, "pool");
        assert_eq!(d(r#"{"pool":"a","split":[{"pool":"b","weight":1}]}"#).unwrap_err().field, "split");
        assert_eq!(d(r#"{"cname":"x.example","pool":"a"}"#).unwrap_err().field, "pool");
        assert_eq!(d(r#"{"pool":"a","when_all_down":"backup"}"#).unwrap_err().field, "when_all_down");
        assert_eq!(d(r#"{"pool":"a","backup_pool":"a"}"#).unwrap_err().field, "backup_pool");
        assert_eq!(d(r#"{"pool":"a","min_healthy":0}"#).unwrap_err().field, "min_healthy");
        let bad = serde_json::from_str::<DomainSpec>(
            r#"{"pool":"a","rules":[{"match":{"app_version":"=>5"},"pool":"b"}]}"#,
        );
        assert!(bad.unwrap_err().to_string().contains("semver"));
        // The defaults are not written back, so stored bodies of plain domains are unchanged.
        let plain: DomainSpec = serde_json::from_str(r#"{"pool":"edge"}"#).unwrap();
        assert_eq!(serde_json::to_string(&plain).unwrap(), r#"{"pool":"edge","ttl":60,"max_answers":4}"#);
    }

    #[test]
    fn pool_health_check_validation() {
        let p: PoolSpec = serde_json::from_str(
            r#"{"health_check":{"kind":"http","port":80,"path":"/health","interval_ms":2000,
                "timeout_ms":1000,"healthy_threshold":2,"unhealthy_threshold":3}}"#,
        )
        .unwrap();
        p.validate().unwrap();
        let p: PoolSpec =
            serde_json::from_str(r#"{"health_check":{"kind":"tcp","port":80,"timeout_ms":5000}}"#).unwrap();
        assert_eq!(p.validate().unwrap_err().field, "health_check.timeout_ms");
        let hc = |extra: &str| {
            let json = format!(r#"{{"health_check":{{"kind":"http","port":80{extra}}}}}"#);
            serde_json::from_str::<PoolSpec>(&json).unwrap().validate()
        };
        hc(r#","expected_status":[200,301],"body_match":"OK""#).unwrap();
        assert_eq!(hc(r#","expected_status":[99]"#).unwrap_err().field, "health_check.expected_status");
        assert_eq!(hc(r#","method":"HEAD","body_match":"OK""#).unwrap_err().field, "health_check.body_match");
        assert_eq!(hc(r#","body_match":"""#).unwrap_err().field, "health_check.body_match");
    }

    #[test]
    fn resource_ids() {
        validate_resource_id("bj-telecom-1").unwrap();
        for bad in ["", "..", "a/b", "a b", &"x".repeat(129)] {
            assert!(validate_resource_id(bad).is_err(), "{bad:?}");
        }
    }
}
