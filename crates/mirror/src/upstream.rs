//! The production fields of a rule that shape origin requests: `origins` by priority,
//! `origin_auth` (SigV4 to a private bucket) and `headers` (what of the client's request
//! reaches the origin, and what is set on it).

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};
use httpdns_core::model::FieldError;
use serde::{Deserialize, Serialize};

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
    pub(crate) fn check(&self) -> Result<(), FieldError> {
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
const NEVER_PASSED: &[&str] = &[
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
pub(crate) const FORBIDDEN_SET: &[&str] =
    &["content-length", "transfer-encoding", "connection", "range", "accept-encoding", "te", "upgrade"];

fn header_name(field: &str, raw: &str) -> Result<HeaderName, FieldError> {
    HeaderName::from_bytes(raw.as_bytes())
        .map_err(|_| FieldError::new(field, format!("{raw:.64?} is not a header name")))
}

/// Checks `set`-style headers (`set_headers`, `headers.set`).
pub(crate) fn check_set(field: &str, set: &BTreeMap<String, String>) -> Result<(), FieldError> {
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

    pub(crate) fn check(&self) -> Result<(), FieldError> {
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

    /// The client headers that go to the origin under these rules.
    pub fn passed(&self, client: &HeaderMap) -> HeaderMap {
        let mut out = HeaderMap::new();
        if !self.passes_any() {
            return out;
        }
        for (name, value) in client {
            let n = name.as_str();
            if NEVER_PASSED.contains(&n) {
                continue;
            }
            let listed = |l: &[String]| l.iter().any(|h| h.eq_ignore_ascii_case(n));
            let pass = if self.pass_all { !listed(&self.remove) } else { listed(&self.pass) };
            if pass {
                out.append(name.clone(), value.clone());
            }
        }
        out
    }
}

/// Checks `origins` (URLs are parsed by the rule's compile).
pub(crate) fn check_origins(origins: &[OriginSpec]) -> Result<(), FieldError> {
    if origins.len() > 32 {
        return Err(FieldError::new("origins", "at most 32 origins"));
    }
    Ok(())
}

/// The origins in the order they are tried: `origin` first (when given), then `origins` by
/// priority, then `backup_origin`.
pub(crate) fn ordered<'a>(
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
mod tests {
    use super::*;

    #[test]
    fn header_rules_pass_remove_and_never_pass_framing() {
        let mut client = HeaderMap::new();
        for (k, v) in [
            ("x-trace", "1"),
            ("cookie", "c"),
            ("user-agent", "ua"),
            ("range", "bytes=0-1"),
            ("authorization", "Bearer t"),
        ] {
            client.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let only: HeaderRules = serde_json::from_str(r#"{"pass": ["X-Trace"]}"#).unwrap();
        only.check().unwrap();
        let got = only.passed(&client);
        assert_eq!(got.len(), 1);
        assert_eq!(got["x-trace"], "1");
        let all: HeaderRules = serde_json::from_str(r#"{"pass_all": true, "remove": ["cookie"]}"#).unwrap();
        let got = all.passed(&client);
        assert!(got.contains_key("x-trace") && got.contains_key("user-agent"));
        assert!(
            !got.contains_key("cookie") && !got.contains_key("range") && !got.contains_key("authorization")
        );
        assert!(HeaderRules::default().passed(&client).is_empty());
        let bad: HeaderRules = serde_json::from_str(r#"{"pass": ["Range"]}"#).unwrap();
        assert_eq!(bad.check().unwrap_err().field, "headers.pass");
        let bad: HeaderRules = serde_json::from_str(r#"{"remove": ["cookie"]}"#).unwrap();
        assert_eq!(bad.check().unwrap_err().field, "headers.remove");
        let bad: HeaderRules = serde_json::from_str(r#"{"set": {"Content-Length": "1"}}"#).unwrap();
        assert_eq!(bad.check().unwrap_err().field, "headers.set");
    }

    #[test]
    fn origins_in_priority_order() {
        let origins: Vec<OriginSpec> = serde_json::from_str(
            r#"[{"url": "http://c", "priority": 3}, {"url": "http://b", "priority": 1}, {"url": "http://b2", "priority": 1}]"#,
        )
        .unwrap();
        let urls: Vec<&str> = ordered("http://a", &origins, Some("http://z")).iter().map(|o| o.1).collect();
        assert_eq!(urls, ["http://a", "http://b", "http://b2", "http://c", "http://z"]);
        let urls: Vec<&str> = ordered("", &origins, None).iter().map(|o| o.1).collect();
        assert_eq!(urls, ["http://b", "http://b2", "http://c"]);
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let auth = OriginAuth {
            kind: "s3".into(),
            access_key_id: "AKID".into(),
            secret_access_key: "very-secret".into(),
            region: "us-east-1".into(),
        };
        assert!(!format!("{auth:?}").contains("very-secret"));
    }
}
