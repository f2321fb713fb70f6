//! The client resolution policy (`resolutionPolicy` in a config document) and the per-device
//! decision the config center answers with (`resolution`). Pure: the place, the segment and
//! the controller's share are passed in.
//!
//! ```json
//! "resolutionPolicy": {
//!   "default": {"httpdnsRate": 1, "localDnsFallback": true, "timeoutMs": 2000},
//!   "places": [{"isp": "unicom", "region": "shanghai", "httpdnsRate": 0.25, "localDnsFallback": false}],
//!   "segments": [{"segment": "premium", "httpdnsRate": 1}],
//!   "preResolveHosts": ["image.xxx.com"]
//! }
//! ```
//!
//! A field is taken from the first of: the device's place entry (the operator's: a listed place
//! is pinned), its segment entry, `default`. In a place that is not listed, the policy
//! controller may scale the rate down ([`Control::share`]) while the place is degraded or
//! recovering. A device is on HTTPDNS when `sha256("httpdnsRate." + deviceId)`'s bucket is below
//! the rate ([`rollout`]), so raising a rate only ever adds devices, and the devices of a probe
//! share are the first ones back at every step of a ramp.

use std::collections::HashSet;

use httpdns_core::model::FieldError;
use httpdns_core::name::DomainName;
use httpdns_core::Token;
use serde::{Deserialize, Serialize};

use crate::document::Rate;
use crate::rollout;

/// The key the policy's rate is bucketed under, in place of a host.
pub const HTTPDNS_RATE_KEY: &str = "httpdnsRate";

/// Bounds of `timeoutMs`: below 100 ms a healthy service times out on a mobile network; above
/// 30 s an app has given up long before.
pub const MIN_TIMEOUT_MS: u64 = 100;
pub const MAX_TIMEOUT_MS: u64 = 30_000;
/// The timeout when no entry names one (the Rust client's and the SDK's own default).
pub const DEFAULT_TIMEOUT_MS: u64 = 2_000;
/// Bounds on the lists, so a document stays small enough to ship to every device.
pub const MAX_PLACES: usize = 512;
pub const MAX_SEGMENTS: usize = 64;
pub const MAX_PRE_RESOLVE: usize = 64;

/// The fields an entry may set; each absent one falls through to the next entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Fields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub httpdns_rate: Option<Rate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_dns_fallback: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A place the operator decides for (the controller leaves it alone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PlaceEntry {
    pub isp: Token,
    pub region: Token,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub httpdns_rate: Option<Rate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_dns_fallback: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A segment of users (`premium`), as the app says in its config request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SegmentEntry {
    pub segment: Token,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub httpdns_rate: Option<Rate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_dns_fallback: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// `resolutionPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResolutionPolicy {
    #[serde(default)]
    pub default: Fields,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub places: Vec<PlaceEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<SegmentEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_resolve_hosts: Vec<DomainName>,
}

/// A place's state as the controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceState {
    #[default]
    Healthy,
    Degraded,
    Recovering,
}

impl PlaceState {
    pub const ALL: [PlaceState; 3] = [PlaceState::Healthy, PlaceState::Degraded, PlaceState::Recovering];

    pub fn as_str(self) -> &'static str {
        match self {
            PlaceState::Healthy => "healthy",
            PlaceState::Degraded => "degraded",
            PlaceState::Recovering => "recovering",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// What the controller says of a place that is not pinned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Control {
    pub state: PlaceState,
    /// The share of the place's rate in force, in `(0, 1]`: 1 when healthy.
    pub share: f64,
}

impl Control {
    pub const HEALTHY: Control = Control { state: PlaceState::Healthy, share: 1.0 };
}

/// The per-device decision (`"resolution"` in a POST answer).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    pub httpdns: bool,
    pub local_dns_fallback: bool,
    pub timeout_ms: u64,
    pub pre_resolve_hosts: Vec<DomainName>,
    /// The place the server classified the device in (`unknown` when it could not).
    pub place: Place,
    pub state: PlaceState,
    /// The rate the device was bucketed against, after the controller's share.
    pub httpdns_rate: Rate,
    /// What decided the fields: `place`, `segment`, `default` (the most specific that set any).
    pub decided_by: &'static str,
}

/// A (carrier, region) pair.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Place {
    pub isp: String,
    pub region: String,
}

/// Who is asking.
#[derive(Debug, Clone, Copy)]
pub struct Device<'a> {
    pub id: &'a str,
    pub place: &'a Place,
    pub segment: Option<&'a str>,
}

impl ResolutionPolicy {
    /// The operator's entry for `place`, if it is pinned.
    pub fn pinned(&self, isp: &str, region: &str) -> Option<&PlaceEntry> {
        self.places.iter().find(|p| p.isp.as_str() == isp && p.region.as_str() == region)
    }

    /// The decision for `device`; `control` is the controller's word on its place (ignored for
    /// a pinned place).
    pub fn decide(&self, device: Device<'_>, control: Option<Control>) -> Resolution {
        let place = self.pinned(&device.place.isp, &device.place.region);
        let segment = device.segment.and_then(|s| self.segments.iter().find(|e| e.segment.as_str() == s));
        let layers: [(&'static str, Option<Fields>); 3] = [
            (
                "place",
                place.map(|p| Fields {
                    httpdns_rate: p.httpdns_rate,
                    local_dns_fallback: p.local_dns_fallback,
                    timeout_ms: p.timeout_ms,
                }),
            ),
            (
                "segment",
                segment.map(|s| Fields {
                    httpdns_rate: s.httpdns_rate,
                    local_dns_fallback: s.local_dns_fallback,
                    timeout_ms: s.timeout_ms,
                }),
            ),
            ("default", Some(self.default.clone())),
        ];
        let decided_by = layers
            .iter()
            .find(|(_, l)| {
                l.as_ref().is_some_and(|l| {
                    l.httpdns_rate.is_some() || l.local_dns_fallback.is_some() || l.timeout_ms.is_some()
                })
            })
            .map_or("default", |(n, _)| *n);
        let rate = layers.iter().find_map(|(_, l)| l.as_ref()?.httpdns_rate).map_or(1.0, Rate::get);
        let fallback = layers.iter().find_map(|(_, l)| l.as_ref()?.local_dns_fallback).unwrap_or(true);
        let timeout = layers.iter().find_map(|(_, l)| l.as_ref()?.timeout_ms).unwrap_or(DEFAULT_TIMEOUT_MS);
        let control = if place.is_some() { None } else { control };
        let (state, rate) = match control {
            Some(c) => (c.state, rate * c.share.clamp(0.0, 1.0)),
            None => (PlaceState::Healthy, rate),
        };
        Resolution {
            httpdns: rollout::enabled(HTTPDNS_RATE_KEY, device.id, rate),
            local_dns_fallback: fallback,
            timeout_ms: timeout,
            pre_resolve_hosts: self.pre_resolve_hosts.clone(),
            place: device.place.clone(),
            state,
            httpdns_rate: Rate::new(rate),
            decided_by,
        }
    }

    /// Checks what serde cannot, naming the field at fault (under `resolutionPolicy`).
    pub fn validate(&self) -> Result<(), FieldError> {
        const F: &str = "resolutionPolicy";
        let timeout = |field: String, t: Option<u64>| match t {
            Some(t) if !(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&t) => Err(FieldError::new(
                field,
                format!("must be {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS} milliseconds"),
            )),
            _ => Ok(()),
        };
        timeout(format!("{F}.default.timeoutMs"), self.default.timeout_ms)?;
        if self.places.len() > MAX_PLACES {
            return Err(FieldError::new(format!("{F}.places"), format!("at most {MAX_PLACES} places")));
        }
        if self.segments.len() > MAX_SEGMENTS {
            return Err(FieldError::new(format!("{F}.segments"), format!("at most {MAX_SEGMENTS} segments")));
        }
        if self.pre_resolve_hosts.len() > MAX_PRE_RESOLVE {
            return Err(FieldError::new(
                format!("{F}.preResolveHosts"),
                format!("at most {MAX_PRE_RESOLVE} names"),
            ));
        }
        let mut seen = HashSet::new();
        for (i, p) in self.places.iter().enumerate() {
            timeout(format!("{F}.places[{i}].timeoutMs"), p.timeout_ms)?;
            if !seen.insert((p.isp.clone(), p.region.clone())) {
                return Err(FieldError::new(
                    format!("{F}.places[{i}]"),
                    format!("{}/{} is listed twice", p.isp, p.region),
                ));
            }
        }
        let mut seen = HashSet::new();
        for (i, s) in self.segments.iter().enumerate() {
            timeout(format!("{F}.segments[{i}].timeoutMs"), s.timeout_ms)?;
            if !seen.insert(s.segment.clone()) {
                return Err(FieldError::new(
                    format!("{F}.segments[{i}].segment"),
                    format!("{} is listed twice", s.segment),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: &str) -> ResolutionPolicy {
        serde_json::from_str(json).unwrap()
    }

    fn place(isp: &str, region: &str) -> Place {
        Place { isp: isp.into(), region: region.into() }
    }

    const DOC: &str = r#"{
        "default": {"httpdnsRate": 1, "localDnsFallback": true, "timeoutMs": 2000},
        "places": [{"isp": "unicom", "region": "shanghai", "httpdnsRate": 0.25, "localDnsFallback": false}],
        "segments": [{"segment": "premium", "httpdnsRate": 1, "timeoutMs": 3000}],
        "preResolveHosts": ["image.xxx.com"]
    }"#;

    #[test]
    fn a_pinned_place_beats_the_segment_and_the_controller() {
        let p = policy(DOC);
        p.validate().unwrap();
        let here = place("unicom", "shanghai");
        let degraded = Some(Control { state: PlaceState::Degraded, share: 0.01 });
        let r = p.decide(Device { id: "device-0001", place: &here, segment: Some("premium") }, degraded);
        assert_eq!((r.decided_by, r.state, r.httpdns_rate.get()), ("place", PlaceState::Healthy, 0.25));
        assert!(!r.local_dns_fallback);
        assert_eq!(r.timeout_ms, 3000, "the place does not set it; the segment does");
    }

    #[test]
    fn the_controller_scales_an_unlisted_place_and_devices_are_bucketed() {
        let p = policy(DOC);
        let there = place("telecom", "beijing");
        let share = Some(Control { state: PlaceState::Degraded, share: 0.01 });
        let on: usize = (0..10_000)
            .filter(|i| {
                p.decide(Device { id: &format!("d{i}"), place: &there, segment: None }, share).httpdns
            })
            .count();
        assert!((50..=150).contains(&on), "{on} of 10000 at 1%");
        let healthy = p.decide(Device { id: "d1", place: &there, segment: None }, None);
        assert!(healthy.httpdns && healthy.local_dns_fallback);
        assert_eq!(healthy.pre_resolve_hosts.len(), 1);
    }

    #[test]
    fn a_raised_share_only_adds_devices() {
        let p = policy(DOC);
        let there = place("mobile", "guangzhou");
        let at = |share: f64, i: usize| {
            p.decide(
                Device { id: &format!("d{i}"), place: &there, segment: None },
                Some(Control { state: PlaceState::Recovering, share }),
            )
            .httpdns
        };
        for i in 0..2_000 {
            assert!(!at(0.05, i) || at(0.25, i), "device {i} left the cohort when the ramp rose");
        }
    }

    #[test]
    fn bad_entries_name_their_field() {
        let p = policy(r#"{"default": {"timeoutMs": 5}}"#);
        assert_eq!(p.validate().unwrap_err().field, "resolutionPolicy.default.timeoutMs");
        let p = policy(r#"{"places": [{"isp": "unicom", "region": "x"}, {"isp": "unicom", "region": "x"}]}"#);
        assert_eq!(p.validate().unwrap_err().field, "resolutionPolicy.places[1]");
        assert!(serde_json::from_str::<ResolutionPolicy>(r#"{"default": {"httpdnsRate": 2}}"#).is_err());
        assert!(serde_json::from_str::<ResolutionPolicy>(
            r#"{"places": [{"isp": "Unicom", "region": "x"}]}"#
        )
        .is_err());
        assert!(serde_json::from_str::<ResolutionPolicy>(r#"{"preResolveHosts": ["not a name"]}"#).is_err());
    }
}
