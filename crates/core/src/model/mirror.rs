//! The mirroring gateway's rule as operators write it (`/admin/v1/mirror/rules/{name}`): the
//! stored and wire form, and every check that needs no IO. The gateway (`httpdns-mirror`)
//! compiles a valid spec into the rule it serves with [`RuleSpec::compile_parts`], so what
//! validation accepts is exactly what the gateway can serve.

use std::collections::{BTreeMap, BTreeSet};

use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::ip::{origin_class, OriginClass};
use crate::model::FieldError;

/// One rule as stored (`/admin/v1/mirror/rules/{name}`). Defaults are written out when stored,
/// so a read shows what is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// The request path prefix, e.g. `/image`. Matched on whole segments.
    pub path_prefix: String,
    /// The primary origin's base URL; the key is appended to its path. May be left out when
    /// `origins` lists them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub origin: String,
    /// More origins, tried after `origin` by ascending priority (then `backup_origin`), each
    /// failing over to the next by the same rules as the backup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origins: Vec<OriginSpec>,
    /// Credentials of a private origin bucket: every origin request is SigV4-signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_auth: Option<OriginAuth>,
    /// Which client request headers reach the origin, and what is set on origin requests.
    #[serde(default, skip_serializing_if = "HeaderRules::is_empty")]
    pub headers: HeaderRules,
    /// `false`: proxy without keeping a copy (every request streamed from the origin, with its
    /// `Range` and conditionals).
    #[serde(default = "yes")]
    pub store: bool,
    /// Fill objects larger than this in ranges of this size (`None`: whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_bytes: Option<u64>,
    /// A backup origin, tried when the primary fails (5xx, timeout, refused) or is down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_origin: Option<String>,
    /// Replaces the matched prefix in the origin path (`None`: the prefix is stripped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix: Option<String>,
    /// Forward query parameters that identify the origin object. `false` (the default): the
    /// client's query string never reaches the origin. `true`: the parameters listed in
    /// `origin_query_params` (all of them when the list is empty) are forwarded, and they
    /// become part of the stored key, so two queries are two objects and neither replaces
    /// the bare key's copy. `x-oss-process` is never forwarded.
    #[serde(default)]
    pub pass_query: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub origin_query_params: Vec<String>,
    /// Origin statuses, besides 5xx, that make the gateway try the backup origin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover_statuses: Vec<u16>,
    /// A path on the primary probed with `HEAD` every `probe_interval_ms`; while it fails,
    /// fills go to the backup first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_path: Option<String>,
    #[serde(default = "default_probe_interval")]
    pub probe_interval_ms: u64,
    #[serde(default = "default_timeout")]
    pub connect_timeout_ms: u64,
    #[serde(default = "default_timeout")]
    pub first_byte_timeout_ms: u64,
    #[serde(default = "default_timeout")]
    pub idle_timeout_ms: u64,
    #[serde(default = "default_max_object")]
    pub max_object_bytes: u64,
    /// Request headers set on every origin fetch (e.g. `Host`, a shared secret).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set_headers: BTreeMap<String, String>,
    /// Other origins (`scheme://host:port`) that redirects may lead to. The configured origins
    /// are always allowed; any other hop must resolve to public addresses only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirect_origins: Vec<String>,
    /// Stored copies are immutable (mirror semantics) unless a TTL is set: then a copy older
    /// than it is revalidated with `If-None-Match`/`If-Modified-Since`, served stale meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_s: Option<u64>,
    /// How long past its TTL a copy may be served when the origin fails (RFC 5861 `stale-if-error`).
    #[serde(default = "default_stale_if_error")]
    pub stale_if_error_s: u64,
    /// How long an origin 404 is remembered.
    #[serde(default = "default_negative_ttl")]
    pub negative_ttl_ms: u64,
    /// Verify `Content-MD5` when the origin sends it; a mismatch is never stored.
    #[serde(default = "yes")]
    pub check_md5: bool,
    /// Serve `x-oss-process=image/...` variants computed from the stored original.
    #[serde(default = "yes")]
    pub image_process: bool,
}

fn default_probe_interval() -> u64 {
    5_000
}
fn default_timeout() -> u64 {
    10_000
}
fn default_max_object() -> u64 {
    5 << 30
}
fn default_stale_if_error() -> u64 {
    86_400
}
fn default_negative_ttl() -> u64 {
    10_000
}
fn yes() -> bool {
    true
}

/// What a valid spec compiles to: the parsed prefix, origins and the sets a request checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleParts {
    pub prefix: Vec<String>,
    /// In the order they are tried ([`ordered`]).
    pub origins: Vec<Url>,
    pub replace_prefix: Vec<String>,
    /// `scheme://host:port` of every origin a redirect may go to without the address check.
    pub trusted_origins: BTreeSet<String>,
    pub query_params: BTreeSet<String>,
}

impl RuleSpec {
    /// Whether the rule compiles: the URLs and prefixes parse and every other field is in range.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.compile_parts().map(drop)
    }

    /// The parsed parts of a valid spec, or the first field at fault.
    pub fn compile_parts(&self) -> Result<RuleParts, FieldError> {
        let prefix = parse_prefix(&self.path_prefix)?;
        let ordered = ordered(&self.origin, &self.origins, self.backup_origin.as_deref());
        if ordered.is_empty() {
            return Err(FieldError::new("origin", "give origin or origins"));
        }
        let origins =
            ordered.iter().map(|(field, raw)| parse_origin(raw, field)).collect::<Result<Vec<_>, _>>()?;
        let replace_prefix = match self.replace_prefix.as_deref() {
            None | Some("") => Vec::new(),
            Some(r) => parse_prefix(r).map_err(|e| FieldError::new("replace_prefix", e.message))?,
        };
        self.check_fields()?;
        let mut trusted_origins: BTreeSet<String> =
            origins.iter().map(|u| u.origin().ascii_serialization()).collect();
        for o in &self.redirect_origins {
            trusted_origins.insert(parse_origin(o, "redirect_origins")?.origin().ascii_serialization());
        }
        let query_params = self.origin_query_params.iter().cloned().collect();
        Ok(RuleParts { prefix, origins, replace_prefix, trusted_origins, query_params })
    }

    /// [`RuleSpec::validate`], and no origin (nor redirect origin) on this host or its link
    /// unless `allow_local` (`HTTPDNS_ALLOW_LOCAL_ORIGINS`): a typo must not make every
    /// anonymous mirror request a fetch from the cloud metadata service. Names are checked
    /// again, on their resolved addresses, at every connect.
    pub fn validate_with(&self, allow_local: bool) -> Result<(), FieldError> {
        self.validate()?;
        let ordered = ordered(&self.origin, &self.origins, self.backup_origin.as_deref());
        let fields =
            ordered.into_iter().chain(self.redirect_origins.iter().map(|o| ("redirect_origins", o.as_str())));
        for (field, raw) in fields {
            let url = parse_origin(raw, field)?;
            match host_class(&url) {
                OriginClass::Allowed => {}
                OriginClass::Local if allow_local => {}
                OriginClass::Local => {
                    return Err(FieldError::new(
                        field,
                        format!(
                            "{} is on this host or its link (loopback, link-local, unspecified); \
                             set HTTPDNS_ALLOW_LOCAL_ORIGINS=true to allow it",
                            url.host_str().unwrap_or("")
                        ),
                    ))
                }
                OriginClass::Unreachable => {
                    return Err(FieldError::new(
                        field,
                        format!(
                            "{} is a multicast, broadcast or reserved address",
                            url.host_str().unwrap_or("")
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    /// The checks of the fields that need no parsing into other types.
    fn check_fields(&self) -> Result<(), FieldError> {
        if !self.pass_query && !self.origin_query_params.is_empty() {
            return Err(FieldError::new(
                "origin_query_params",
                "set pass_query to true to forward parameters",
            ));
        }
        for p in &self.origin_query_params {
            if p.is_empty()
                || p.len() > 64
                || !p.bytes().all(|b| b.is_ascii_graphic() && b != b'=' && b != b'&')
            {
                return Err(FieldError::new(
                    "origin_query_params",
                    format!("{p:.64?} is not a parameter name"),
                ));
            }
            if p == "x-oss-process" {
                return Err(FieldError::new(
                    "origin_query_params",
                    "x-oss-process is processed here and never sent to the origin",
                ));
            }
        }
        for s in &self.failover_statuses {
            if !(400..=599).contains(s) {
                return Err(FieldError::new("failover_statuses", format!("{s} is not a 4xx or 5xx status")));
            }
        }
        if let Some(p) = &self.probe_path {
            if !p.starts_with('/') || p.contains(['?', '#']) || p.chars().any(|c| c.is_control() || c == ' ')
            {
                return Err(FieldError::new("probe_path", "must be an absolute path such as /health"));
            }
        }
        bounded("probe_interval_ms", self.probe_interval_ms, 100, 3_600_000)?;
        bounded("connect_timeout_ms", self.connect_timeout_ms, 10, 600_000)?;
        bounded("first_byte_timeout_ms", self.first_byte_timeout_ms, 10, 600_000)?;
        bounded("idle_timeout_ms", self.idle_timeout_ms, 10, 600_000)?;
        bounded("max_object_bytes", self.max_object_bytes, 1, 1 << 40)?;
        bounded("negative_ttl_ms", self.negative_ttl_ms, 0, 86_400_000)?;
        bounded("stale_if_error_s", self.stale_if_error_s, 0, 365 * 86_400)?;
        if let Some(t) = self.ttl_s {
            bounded("ttl_s", t, 1, 10 * 365 * 86_400)?;
        }
        check_set("set_headers", &self.set_headers)?;
        check_origins(&self.origins)?;
        self.headers.check()?;
        if let Some(auth) = &self.origin_auth {
            auth.check()?;
        }
        if let Some(n) = self.slice_bytes {
            bounded("slice_bytes", n, 1 << 20, 1 << 30)?;
            if !self.store {
                return Err(FieldError::new(
                    "slice_bytes",
                    "slices are stored copies; a store: false rule keeps none",
                ));
            }
        }
        Ok(())
    }

    /// A write that sends the secret back as reads show it keeps the stored secret (a read,
    /// edited, written again; `export` then `apply`), as long as the key id is the same; with
    /// no such stored secret it is refused.
    pub fn keep_secret(&mut self, stored: Option<&RuleSpec>) -> Result<(), FieldError> {
        let Some(new) = self.origin_auth.as_mut().filter(|a| a.secret_access_key == REDACTED) else {
            return Ok(());
        };
        match stored.and_then(|s| s.origin_auth.as_ref()) {
            Some(old) if old.access_key_id == new.access_key_id => {
                new.secret_access_key = old.secret_access_key.clone();
                Ok(())
            }
            _ => Err(FieldError::new(
                "origin_auth.secret_access_key",
                format!("{REDACTED} keeps the stored secret, and this rule has none for this access_key_id"),
            )),
        }
    }
}

/// A stored rule as reads show it (admin API, `export`, console): the secret of `origin_auth`
/// replaced by [`REDACTED`].
pub fn redacted(mut body: serde_json::Value) -> serde_json::Value {
    if let Some(secret) = body.pointer_mut("/origin_auth/secret_access_key") {
        *secret = serde_json::Value::String(REDACTED.into());
    }
    body
}

fn bounded(field: &str, v: u64, min: u64, max: u64) -> Result<(), FieldError> {
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(FieldError::new(field, format!("must be from {min} to {max}")))
    }
}

/// `/image` or `/a/b`: absolute, no trailing slash, plain segments. `/` alone matches all.
fn parse_prefix(p: &str) -> Result<Vec<String>, FieldError> {
    let err = |m: &str| FieldError::new("path_prefix", m.to_owned());
    if !p.starts_with('/') {
        return Err(err("must start with '/', e.g. /image"));
    }
    if p == "/" {
        return Ok(Vec::new());
    }
    if p.ends_with('/') {
        return Err(err("must not end with '/'"));
    }
    let mut out = Vec::new();
    for seg in p[1..].split('/') {
        if seg.is_empty()
            || seg == "."
            || seg == ".."
            || seg.len() > 128
            || !seg.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b))
        {
            return Err(err("segments may hold only letters, digits and -_.~"));
        }
        out.push(seg.to_owned());
    }
    Ok(out)
}

fn parse_origin(raw: &str, field: &str) -> Result<Url, FieldError> {
    let url =
        Url::parse(raw).map_err(|e| FieldError::new(field, format!("{raw:.128?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(FieldError::new(field, "must be an http:// or https:// URL"));
    }
    if url.host().is_none() {
        return Err(FieldError::new(field, "needs a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(FieldError::new(field, "credentials in the URL are not allowed; use set_headers"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(FieldError::new(field, "must not have a query or fragment"));
    }
    Ok(url)
}

/// Where a URL's host is, by its literal address (the URL parser has already read decimal,
/// hex and octal IPv4 spellings such as `2130706433` and `0x7f.1` as addresses), or by the
/// names that always mean this host (`localhost`, RFC 6761).
pub fn host_class(url: &Url) -> OriginClass {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => origin_class(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => origin_class(std::net::IpAddr::V6(ip)),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") {
                OriginClass::Local
            } else {
                OriginClass::Allowed
            }
        }
        None => OriginClass::Unreachable,
    }
}

/// One origin of `origins`: tried by ascending `priority` (ties in the order given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginSpec {
    pub url: String,
    #[serde(default)]
    pub priority: u32,
}

/// Credentials of a private origin bucket.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginAuth {
    /// `s3`: AWS Signature Version 4, which S3, OSS, R2, MinIO and Ceph accept.
    pub kind: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    #[serde(default = "default_region")]
    pub region: String,
}

/// What a rule's read shows instead of the secret; a write that sends it back keeps the stored
/// secret (so a read, edited and written again, does not need the secret re-typed).
pub const REDACTED: &str = "<redacted>";

fn default_region() -> String {
    "us-east-1".into()
}

// Never the secret in a log line or a panic message.
impl std::fmt::Debug for OriginAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginAuth")
            .field("kind", &self.kind)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &REDACTED)
            .field("region", &self.region)
            .finish()
    }
}

impl OriginAuth {
    fn check(&self) -> Result<(), FieldError> {
        let field = |f: &str| format!("origin_auth.{f}");
        if self.kind != "s3" {
            return Err(FieldError::new(field("kind"), "must be s3 (AWS Signature Version 4)"));
        }
        let token = |v: &str| !v.is_empty() && v.len() <= 256 && v.bytes().all(|b| b.is_ascii_graphic());
        if !token(&self.access_key_id) {
            return Err(FieldError::new(field("access_key_id"), "must be 1 to 256 printable characters"));
        }
        // `<redacted>` passes here: a write that sends it keeps the stored secret, and the
        // admin API refuses it when there is none (`RuleSpec::keep_secret`).
        if !token(&self.secret_access_key) {
            return Err(FieldError::new(field("secret_access_key"), "must be 1 to 256 printable characters"));
        }
        if self.region.is_empty()
            || self.region.len() > 64
            || !self.region.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(FieldError::new(field("region"), "must be a region name such as us-east-1"));
        }
        Ok(())
    }
}

/// `headers`: which of the client's request headers go to the origin, and what is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderRules {
    /// Client headers passed to the origin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass: Vec<String>,
    /// Client headers never passed (with `pass_all`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    /// Pass every client header but those in `remove` and those that would break the fetch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pass_all: bool,
    /// Headers set on every origin request (they win over passed ones).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
}

/// Client headers never passed, whatever the rules: framing, connection state, the client's
/// own credentials toward us, and what the gateway sets itself (`Range` and `Accept-Encoding`
/// of a fill, the validators of a revalidation). A proxy rule (`store: false`) passes the
/// client's `Range` and conditionals separately.
pub const NEVER_PASSED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "range",
    "if-range",
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "accept-encoding",
    "authorization",
    "expect",
];

/// Headers a rule may not set: they would break framing or the fill's own requests.
pub const FORBIDDEN_SET: &[&str] =
    &["content-length", "transfer-encoding", "connection", "range", "accept-encoding", "te", "upgrade"];

fn header_name(field: &str, raw: &str) -> Result<HeaderName, FieldError> {
    HeaderName::from_bytes(raw.as_bytes())
        .map_err(|_| FieldError::new(field, format!("{raw:.64?} is not a header name")))
}

/// Checks `set`-style headers (`set_headers`, `headers.set`).
fn check_set(field: &str, set: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for (k, v) in set {
        let name = header_name(field, k)?;
        if FORBIDDEN_SET.contains(&name.as_str()) {
            return Err(FieldError::new(field, format!("{k} may not be set on origin fetches")));
        }
        if HeaderValue::from_str(v).is_err() || v.contains(['\r', '\n']) || v.len() > 1024 {
            return Err(FieldError::new(field, format!("the value of {k} is not a valid header value")));
        }
    }
    Ok(())
}

impl HeaderRules {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Whether the lists name real headers, none that is never passed, and `set` holds only
    /// headers a rule may set.
    pub fn check(&self) -> Result<(), FieldError> {
        for (field, list) in [("headers.pass", &self.pass), ("headers.remove", &self.remove)] {
            if list.len() > 64 {
                return Err(FieldError::new(field, "at most 64 names"));
            }
            for raw in list {
                let name = header_name(field, raw)?;
                if field == "headers.pass" && NEVER_PASSED.contains(&name.as_str()) {
                    return Err(FieldError::new(field, format!("{raw} is never passed to the origin")));
                }
            }
        }
        if !self.pass_all && !self.remove.is_empty() {
            return Err(FieldError::new("headers.remove", "removes from pass_all; set pass_all to true"));
        }
        check_set("headers.set", &self.set)
    }

    /// Whether a fill of this rule depends on the client's request (then a copy is still one per
    /// key: the first client's headers fetch it, as OSS's mirror does).
    pub fn passes_any(&self) -> bool {
        self.pass_all || !self.pass.is_empty()
    }
}

/// Checks `origins` (URLs are parsed by [`RuleSpec::compile_parts`]).
fn check_origins(origins: &[OriginSpec]) -> Result<(), FieldError> {
    if origins.len() > 32 {
        return Err(FieldError::new("origins", "at most 32 origins"));
    }
    Ok(())
}

/// The origins in the order they are tried: `origin` first (when given), then `origins` by
/// priority, then `backup_origin`.
pub fn ordered<'a>(
    origin: &'a str,
    origins: &'a [OriginSpec],
    backup: Option<&'a str>,
) -> Vec<(&'static str, &'a str)> {
    let mut listed: Vec<&OriginSpec> = origins.iter().collect();
    listed.sort_by_key(|o| o.priority);
    let first = (!origin.is_empty()).then_some(("origin", origin));
    first
        .into_iter()
        .chain(listed.into_iter().map(|o| ("origins", o.url.as_str())))
        .chain(backup.map(|b| ("backup_origin", b)))
        .collect()
}

#[cfg(test)]
mod tests;
