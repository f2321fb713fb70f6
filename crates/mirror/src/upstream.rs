//! What of a client's request reaches the origin under a rule's `headers` (the spec and its
//! checks are `httpdns_core::model::mirror::HeaderRules`; this is the request-time half).

use http::HeaderMap;
use httpdns_core::model::mirror::{HeaderRules, NEVER_PASSED};

/// The client headers that go to the origin.
pub(crate) trait PassedHeaders {
    /// The client headers that go to the origin under these rules.
    fn passed(&self, client: &HeaderMap) -> HeaderMap;
}

impl PassedHeaders for HeaderRules {
    fn passed(&self, client: &HeaderMap) -> HeaderMap {
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

#[cfg(test)]
mod tests {
    use http::{HeaderName, HeaderValue};

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
}
