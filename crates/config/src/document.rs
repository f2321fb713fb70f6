//! The config document of seed `000` (§2.4, §3.2), field names as written there.
//!
//! ```json
//! {"mergeHostConfigs": [{"host": "image.xxx.com", "pathPrefix": "/image", "rate": 1}],
//!  "hostListConfig": [{"host": "cdn.xxx.com", "rate": 1}],
//!  "reviveProbeInterval": 600000, "configRequestInterval": 600000,
//!  "configVersion": 1, "publicIpList": ["223.5.5.5"]}
//! ```

use std::collections::HashSet;
use std::net::IpAddr;

use httpdns_core::model::FieldError;
use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::policy::{Resolution, ResolutionPolicy};
use crate::rollout;
use crate::target::{Device, Target};

/// Bounds of `reviveProbeInterval` and `configRequestInterval`, in milliseconds: below 10 s a
/// bad publish would turn every app into a load generator; above a day a fix takes too long.
pub const MIN_INTERVAL_MS: u64 = 10_000;
pub const MAX_INTERVAL_MS: u64 = 86_400_000;
/// Bounds on list sizes, so a document stays small enough to ship to every device.
pub const MAX_ENTRIES: usize = 256;
pub const MAX_PREFIX_LEN: usize = 256;

/// A gray-release ratio in `[0, 1]`, written as an integer when whole (`1`, not `1.0`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate(f64);

impl Rate {
    /// `v` clamped into `[0, 1]` (NaN as 0).
    pub fn new(v: f64) -> Self {
        Self(if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) })
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.fract() == 0.0 {
            s.serialize_u64(self.0 as u64)
        } else {
            s.serialize_f64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v.is_finite() && (0.0..=1.0).contains(&v) {
            Ok(Rate(v))
        } else {
            Err(serde::de::Error::custom(format!("rate {v} must be from 0 to 1")))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MergeHostConfig {
    pub host: Host,
    pub path_prefix: String,
    pub rate: Rate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostEntry {
    pub host: Host,
    pub rate: Rate,
}

/// The document as operators publish it and the store keeps it. `configVersion` is assigned
/// by the store; a value in a published body is ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConfigDocument {
    pub merge_host_configs: Vec<MergeHostConfig>,
    pub host_list_config: Vec<HostEntry>,
    pub revive_probe_interval: u64,
    pub config_request_interval: u64,
    #[serde(default)]
    pub config_version: u64,
    #[serde(default)]
    pub public_ip_list: Vec<IpAddr>,
    /// The global switch of the whole convergence feature (host rewriting and the unified
    /// host list), bucketed per device independently of every `rate`
    /// ([`rollout::convergence_enabled`]). Absent means 1: documents from before it stay valid
    /// and are served as they were (per-device answers add `convergenceEnabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convergence_rate: Option<Rate>,
    /// How devices resolve, per place and segment (docs/policy.md). Absent: every device on
    /// HTTPDNS with LocalDNS as its fallback, as before the policy existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution_policy: Option<ResolutionPolicy>,
    /// Overrides for the devices they match, the first match winning ([`crate::target`]).
    /// Never served as such: a device's answer is the document with its target's override
    /// applied, and says which target that was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<Target>,
}

impl ConfigDocument {
    /// The document as target `i` makes it: the target's override fields replace the
    /// document's own, and the targets are gone.
    pub fn with_target(&self, i: usize) -> Self {
        let mut out = Self { targets: Vec::new(), ..self.clone() };
        let Some(t) = self.targets.get(i) else { return out };
        let o = &t.with;
        if let Some(v) = &o.merge_host_configs {
            out.merge_host_configs = v.clone();
        }
        if let Some(v) = &o.host_list_config {
            out.host_list_config = v.clone();
        }
        if let Some(v) = o.revive_probe_interval {
            out.revive_probe_interval = v;
        }
        if let Some(v) = o.config_request_interval {
            out.config_request_interval = v;
        }
        if let Some(v) = &o.public_ip_list {
            out.public_ip_list = v.clone();
        }
        if let Some(v) = o.convergence_rate {
            out.convergence_rate = Some(v);
        }
        out
    }

    /// The body a device gets: the document of the first target that matches it, with
    /// `"target": i` added when one did, and the device's `resolution` when it has one (see
    /// [`ConfigDocument::render_with`]).
    pub fn render_for(
        &self,
        version: u64,
        device_id: &str,
        device: &Device<'_>,
        resolution: Option<&Resolution>,
    ) -> (Vec<u8>, Option<usize>) {
        match crate::target::first_match(&self.targets, device) {
            None => (self.render_with(version, Some(device_id), resolution), None),
            Some(i) => {
                let mut body = self.with_target(i).render_with(version, Some(device_id), resolution);
                // The rendering is one JSON object: its closing brace makes room for the field.
                if body.last() == Some(&b'}') {
                    body.pop();
                    body.extend_from_slice(format!(",\"target\":{i}}}").as_bytes());
                }
                (body, Some(i))
            }
        }
    }

    /// The document as operators read it (`GET /admin/v1/config/{module}`): what apps get
    /// without a device, plus the `targets`.
    pub fn render_admin(&self, version: u64) -> Vec<u8> {
        let mut body = self.render(version, None);
        if !self.targets.is_empty() && body.last() == Some(&b'}') {
            body.pop();
            body.extend_from_slice(b",\"targets\":");
            body.extend(serde_json::to_vec(&self.targets).expect("targets serialise"));
            body.push(b'}');
        }
        body
    }
    /// Whether convergence is on for `device_id` under the global switch.
    pub fn convergence_enabled(&self, device_id: &str) -> bool {
        rollout::convergence_enabled(device_id, self.convergence_rate.map_or(1.0, Rate::get))
    }

    /// Checks what serde cannot, naming the field at fault.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.host_list_config.is_empty() {
            return Err(FieldError::new("hostListConfig", "at least one host is required"));
        }
        if self.host_list_config.len() > MAX_ENTRIES {
            return Err(FieldError::new("hostListConfig", format!("at most {MAX_ENTRIES} hosts")));
        }
        if self.merge_host_configs.len() > MAX_ENTRIES {
            return Err(FieldError::new("mergeHostConfigs", format!("at most {MAX_ENTRIES} entries")));
        }
        if self.public_ip_list.len() > MAX_ENTRIES {
            return Err(FieldError::new("publicIpList", format!("at most {MAX_ENTRIES} addresses")));
        }
        let mut hosts = HashSet::new();
        for (i, h) in self.host_list_config.iter().enumerate() {
            if !hosts.insert(h.host.to_string()) {
                return Err(FieldError::new(
                    format!("hostListConfig[{i}].host"),
                    format!("{} is listed twice", h.host),
                ));
            }
        }
        let mut prefixes = HashSet::new();
        for (i, m) in self.merge_host_configs.iter().enumerate() {
            let field = format!("mergeHostConfigs[{i}].pathPrefix");
            let p = &m.path_prefix;
            let valid = p.starts_with('/')
                && p.len() >= 2
                && p.len() <= MAX_PREFIX_LEN
                && !p.ends_with('/')
                && p.split('/').skip(1).all(|seg| !seg.is_empty() && seg != "." && seg != "..")
                && p.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'%' | b'\\'));
            if !valid {
                return Err(FieldError::new(
                    field,
                    "must start with '/', name at least one path segment, and hold no '?', '#', '%', \
                     '\\', spaces, empty, '.' or '..' segments or a trailing '/'",
                ));
            }
            if !prefixes.insert(p.as_str()) {
                return Err(FieldError::new(field, format!("{p} is used twice")));
            }
        }
        for (field, v) in [
            ("reviveProbeInterval", self.revive_probe_interval),
            ("configRequestInterval", self.config_request_interval),
        ] {
            if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&v) {
                return Err(FieldError::new(
                    field,
                    format!("must be {MIN_INTERVAL_MS} to {MAX_INTERVAL_MS} milliseconds"),
                ));
            }
        }
        if let Some(p) = &self.resolution_policy {
            p.validate()?;
        }
        crate::target::validate(&self.targets)?;
        // Every device must get a valid document, whichever target applies to it.
        for i in 0..self.targets.len() {
            self.with_target(i)
                .validate()
                .map_err(|e| FieldError::new(format!("targets[{i}].override.{}", e.field), e.message))?;
        }
        Ok(())
    }

    /// The document as stored: `configVersion` cleared, since the version belongs to the
    /// store's row, not to the content (a rollback republishes content under a new version).
    pub fn content(&self) -> Self {
        Self { config_version: 0, ..self.clone() }
    }

    /// The body served to apps for `version`, in the seed's field order. With a device id,
    /// each entry also carries `"enabled"` computed by [`rollout::enabled`].
    pub fn render(&self, version: u64, device_id: Option<&str>) -> Vec<u8> {
        self.render_with(version, device_id, None)
    }

    /// [`Self::render`] with the device's `resolution` decision (a POST with a device id of a
    /// module that has a `resolutionPolicy`).
    pub fn render_with(
        &self,
        version: u64,
        device_id: Option<&str>,
        resolution: Option<&Resolution>,
    ) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Merge<'a> {
            host: &'a Host,
            path_prefix: &'a str,
            rate: Rate,
            #[serde(skip_serializing_if = "Option::is_none")]
            enabled: Option<bool>,
        }
        #[derive(Serialize)]
        struct Entry<'a> {
            host: &'a Host,
            rate: Rate,
            #[serde(skip_serializing_if = "Option::is_none")]
            enabled: Option<bool>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Out<'a> {
            merge_host_configs: Vec<Merge<'a>>,
            host_list_config: Vec<Entry<'a>>,
            revive_probe_interval: u64,
            config_request_interval: u64,
            config_version: u64,
            public_ip_list: &'a [IpAddr],
            #[serde(skip_serializing_if = "Option::is_none")]
            convergence_rate: Option<Rate>,
            #[serde(skip_serializing_if = "Option::is_none")]
            convergence_enabled: Option<bool>,
            #[serde(skip_serializing_if = "Option::is_none")]
            resolution_policy: Option<&'a ResolutionPolicy>,
            #[serde(skip_serializing_if = "Option::is_none")]
            resolution: Option<&'a Resolution>,
        }
        // An entry is on for the device when the global switch and the entry's own rate both
        // include it: thin clients that read only `enabled` honour the switch too.
        let switch = device_id.map(|d| self.convergence_enabled(d));
        let on = |host: &Host, rate: Rate| {
            device_id.map(|d| switch == Some(true) && rollout::enabled(&host.to_string(), d, rate.get()))
        };
        let out = Out {
            merge_host_configs: self
                .merge_host_configs
                .iter()
                .map(|m| Merge {
                    host: &m.host,
                    path_prefix: &m.path_prefix,
                    rate: m.rate,
                    enabled: on(&m.host, m.rate),
                })
                .collect(),
            host_list_config: self
                .host_list_config
                .iter()
                .map(|h| Entry { host: &h.host, rate: h.rate, enabled: on(&h.host, h.rate) })
                .collect(),
            revive_probe_interval: self.revive_probe_interval,
            config_request_interval: self.config_request_interval,
            config_version: version,
            public_ip_list: &self.public_ip_list,
            convergence_rate: self.convergence_rate,
            convergence_enabled: switch,
            resolution_policy: self.resolution_policy.as_ref(),
            resolution,
        };
        serde_json::to_vec(&out).expect("document serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const SEED: &str = r#"{
        "mergeHostConfigs": [
          {"host": "image.xxx.com",     "pathPrefix": "/image",     "rate": 1},
          {"host": "product.xxx.com",   "pathPrefix": "/product",   "rate": 0.5},
          {"host": "community.xxx.com", "pathPrefix": "/community", "rate": 0.1}
        ],
        "hostListConfig": [
          {"host": "cdn.xxx.com",     "rate": 1},
          {"host": "cdn-ss.xxx.com",  "rate": 1},
          {"host": "cdn-bak.xxx.com", "rate": 1}
        ],
        "reviveProbeInterval": 600000,
        "configRequestInterval": 600000,
        "configVersion": 1,
        "publicIpList": ["223.5.5.5", "180.76.76.76"]
    }"#;

    fn doc(json: &str) -> ConfigDocument {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_seed_document_round_trips_in_its_own_shape() {
        let d = doc(SEED);
        d.validate().unwrap();
        let body = String::from_utf8(d.render(1, None)).unwrap();
        let compact: String = SEED.split_whitespace().collect();
        assert_eq!(body, compact);
    }

    #[test]
    fn device_id_adds_enabled_flags_by_the_rollout_rule() {
        let d = doc(SEED);
        let v: serde_json::Value = serde_json::from_slice(&d.render(7, Some("a1b2c3d4e5f6"))).unwrap();
        assert_eq!(v["configVersion"], 7);
        // Buckets (documented vectors): image 9171 < 10000, product 6936 >= 5000,
        // community 1618 >= 1000.
        assert_eq!(v["mergeHostConfigs"][0]["enabled"], true);
        assert_eq!(v["mergeHostConfigs"][1]["enabled"], false);
        assert_eq!(v["mergeHostConfigs"][2]["enabled"], false);
        assert_eq!(v["hostListConfig"][0]["enabled"], true);
    }

    #[test]
    fn the_global_switch_is_optional_and_buckets_devices_apart_from_rate() {
        let old = doc(SEED);
        assert_eq!(old.convergence_rate, None);
        assert!(old.convergence_enabled("device-0001"), "absent means on for everyone");
        let v: serde_json::Value = serde_json::from_slice(&old.render(1, Some("device-0001"))).unwrap();
        assert_eq!(v["convergenceEnabled"], true);
        assert!(v.get("convergenceRate").is_none(), "{v}");

        let with =
            doc(&SEED.replace(r#""configVersion": 1,"#, r#""configVersion": 1, "convergenceRate": 0.2,"#));
        // Switch buckets (docs/config-center.md): device-0001 1077 < 2000, device-0002 3703.
        assert!(with.convergence_enabled("device-0001"));
        assert!(!with.convergence_enabled("device-0002"));
        let body = String::from_utf8(with.render(4, Some("device-0002"))).unwrap();
        assert!(body.ends_with(r#""convergenceRate":0.2,"convergenceEnabled":false}"#), "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        // Outside the switch every entry is off, whatever its own rate (image is at rate 1).
        assert_eq!(v["mergeHostConfigs"][0]["enabled"], false);
        assert_eq!(v["hostListConfig"][0]["enabled"], false);
        let inside: serde_json::Value = serde_json::from_slice(&with.render(4, Some("device-0001"))).unwrap();
        assert_eq!(inside["mergeHostConfigs"][0]["enabled"], true, "inside the switch: the rate decides");
        assert!(String::from_utf8(with.render(4, None)).unwrap().ends_with(r#""convergenceRate":0.2}"#));
        for bad in ["1.5", "-0.1", "\"x\"", "null"] {
            let json = SEED.replace(
                r#""configVersion": 1,"#,
                &format!(r#""configVersion": 1, "convergenceRate": {bad},"#),
            );
            assert!(serde_json::from_str::<ConfigDocument>(&json).is_err() || bad == "null", "{bad}");
        }
    }

    #[test]
    fn validation_names_the_field() {
        let mut d = doc(SEED);
        d.host_list_config.clear();
        assert_eq!(d.validate().unwrap_err().field, "hostListConfig");

        let mut d = doc(SEED);
        d.host_list_config.push(d.host_list_config[0].clone());
        assert_eq!(d.validate().unwrap_err().field, "hostListConfig[3].host");

        for bad in ["image", "/", "/a/", "/a//b", "/a/../b", "/a?x", "/a b", "/%2e"] {
            let mut d = doc(SEED);
            d.merge_host_configs[1].path_prefix = bad.into();
            assert_eq!(d.validate().unwrap_err().field, "mergeHostConfigs[1].pathPrefix", "{bad}");
        }
        let mut d = doc(SEED);
        d.merge_host_configs[2].path_prefix = "/image".into();
        assert_eq!(d.validate().unwrap_err().field, "mergeHostConfigs[2].pathPrefix");

        let mut d = doc(SEED);
        d.config_request_interval = 1000;
        assert_eq!(d.validate().unwrap_err().field, "configRequestInterval");
        let mut d = doc(SEED);
        d.revive_probe_interval = 86_400_001;
        assert_eq!(d.validate().unwrap_err().field, "reviveProbeInterval");
    }

    #[test]
    fn serde_refuses_bad_shapes() {
        for bad in [
            SEED.replace(r#""rate": 0.5"#, r#""rate": 1.5"#),
            SEED.replace(r#""rate": 0.5"#, r#""rate": -0.1"#),
            SEED.replace(r#""223.5.5.5""#, r#""223.5.5""#),
            SEED.replace(r#""cdn-ss.xxx.com""#, r#""cdn ss""#),
            SEED.replace(r#""configVersion": 1,"#, r#""configVersion": 1, "extra": 2,"#),
        ] {
            assert!(serde_json::from_str::<ConfigDocument>(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates_render_as_written() {
        let d = doc(SEED);
        let body = String::from_utf8(d.render(1, None)).unwrap();
        assert!(
            body.contains(r#""rate":1}"#)
                && body.contains(r#""rate":0.5}"#)
                && body.contains(r#""rate":0.1}"#)
        );
    }
}
