//! The resolution policy on the device (`resolutionPolicy`, docs/policy.md): whether this
//! device asks HTTPDNS at all, whether LocalDNS may answer when the service fails, the
//! service's timeout and the names to resolve at start.
//!
//! The server decides per device (its place, segment and bucket, and the policy controller's
//! word on the place) in the answer to a `POST` of the config center; without one (no device
//! id, the server unreachable) the device decides from the document's `default` and `segments`
//! with the same bucket, as the Android SDK does.

use std::time::Duration;

use httpdns_config::policy::{Device, Place, ResolutionPolicy};
use serde_json::Value;

/// What the policy says this device does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// False: LocalDNS at once, the service is not asked (no timeout paid).
    pub httpdns: bool,
    /// False: when the service fails, a stale answer instead of LocalDNS (places where
    /// LocalDNS is known to lie).
    pub local_dns_fallback: bool,
    /// The service's per-request timeout, when the policy sets one.
    pub timeout: Option<Duration>,
    pub pre_resolve_hosts: Vec<String>,
    /// `healthy`, `degraded` or `recovering`, when the server said.
    pub state: Option<String>,
}

impl Default for Decision {
    fn default() -> Self {
        Self {
            httpdns: true,
            local_dns_fallback: true,
            timeout: None,
            pre_resolve_hosts: Vec::new(),
            state: None,
        }
    }
}

impl Decision {
    /// The server's decision: the `resolution` object of a per-device answer.
    pub fn from_answer(body: &Value) -> Option<Self> {
        let r = body.get("resolution")?.as_object()?;
        Some(Self {
            httpdns: r.get("httpdns").and_then(Value::as_bool).unwrap_or(true),
            local_dns_fallback: r.get("localDnsFallback").and_then(Value::as_bool).unwrap_or(true),
            timeout: r.get("timeoutMs").and_then(Value::as_u64).filter(|t| *t > 0).map(Duration::from_millis),
            pre_resolve_hosts: r
                .get("preResolveHosts")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|h| h.as_str().map(str::to_owned)).collect())
                .unwrap_or_default(),
            state: r.get("state").and_then(Value::as_str).map(str::to_owned),
        })
    }

    /// The device's own decision from a document's policy: `segments`, then `default`, with
    /// the same bucket as the server. Places are the server's to match (it knows the device's
    /// address), so none applies here.
    pub fn from_policy(policy: &ResolutionPolicy, segment: Option<&str>, device_id: &str) -> Self {
        let nowhere = Place { isp: String::new(), region: String::new() };
        let d = policy.decide(Device { id: device_id, place: &nowhere, segment }, None);
        Self {
            httpdns: d.httpdns,
            local_dns_fallback: d.local_dns_fallback,
            timeout: Some(Duration::from_millis(d.timeout_ms)),
            pre_resolve_hosts: d.pre_resolve_hosts.iter().map(|n| n.as_str().to_owned()).collect(),
            state: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_answer_and_the_devices_own_decision() {
        let v = serde_json::json!({"resolution": {"httpdns": false, "localDnsFallback": false, "timeoutMs": 900,
            "preResolveHosts": ["a.example.com"], "state": "degraded", "place": {"isp": "unicom", "region": "x"}}});
        let d = Decision::from_answer(&v).unwrap();
        assert_eq!(
            d,
            Decision {
                httpdns: false,
                local_dns_fallback: false,
                timeout: Some(Duration::from_millis(900)),
                pre_resolve_hosts: vec!["a.example.com".into()],
                state: Some("degraded".into()),
            }
        );
        assert_eq!(Decision::from_answer(&serde_json::json!({})), None);
        let p: ResolutionPolicy = serde_json::from_str(
            r#"{"default": {"httpdnsRate": 0}, "segments": [{"segment": "premium", "httpdnsRate": 1}]}"#,
        )
        .unwrap();
        assert!(!Decision::from_policy(&p, None, "d1").httpdns);
        assert!(Decision::from_policy(&p, Some("premium"), "d1").httpdns);
    }
}
