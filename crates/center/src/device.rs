//! The per-device `POST /app/config-center/module-config`: what a device says of itself, and
//! the document rendered for it (the HTTP handler wraps it in headers). This is the one place the per-device answer is put together:
//! the gray-release flags and the global switch (`ConfigDocument::render`), the target that
//! matches the device (`"target": i`), and whatever later decisions join them.

use std::collections::BTreeMap;

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderValue;
use httpdns_config::policy::{Device as PolicyDevice, Place};
use httpdns_config::target::Device;
use httpdns_core::snapshot::ClientView;
use serde_json::Value;

use crate::cache::{ConfigCache, Published};

/// Longest accepted device id.
const MAX_DEVICE_ID: usize = 256;
/// Longest platform, app version, segment, label key or value.
const MAX_TEXT: usize = 64;
/// Labels a device may send.
const MAX_LABELS: usize = 16;

/// A refused request: the error code, the field at fault and what is wrong with it (the
/// edge answers it as a 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadField {
    pub code: &'static str,
    pub field: String,
    pub message: String,
}

impl BadField {
    fn new(code: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code, field: field.into(), message: message.into() }
    }
}

/// The `module` a request names: present, not empty, a valid module name.
pub fn module(module: Option<&str>) -> Result<&str, BadField> {
    let m = module
        .filter(|m| !m.is_empty())
        .ok_or_else(|| BadField::new("MissingArgument", "module", "missing module"))?;
    httpdns_config::validate_module(m).map_err(|e| BadField::new("InvalidArgument", "module", e.message))?;
    Ok(m)
}

/// A device's request, parsed: unknown fields are ignored (apps send more than this reads), but
/// a known field of the wrong shape is refused by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRequest {
    pub module: String,
    pub device_id: Option<String>,
    /// The version the device runs (0: none yet).
    pub config_version: i64,
    pub platform: Option<String>,
    pub app_version: Option<String>,
    pub segment: Option<String>,
    pub labels: BTreeMap<String, String>,
}

fn text(
    obj: &serde_json::Map<String, Value>,
    field: &'static str,
    max: usize,
) -> Result<Option<String>, BadField> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= max => Ok(Some(s.clone())),
        Some(_) => Err(BadField::new(
            "InvalidArgument",
            field,
            format!("{field} must be a string of 1 to {max} bytes"),
        )),
    }
}

pub fn parse(body: &[u8]) -> Result<DeviceRequest, BadField> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| BadField::new("InvalidBody", "body", format!("not JSON: {e}")))?;
    let obj =
        v.as_object().ok_or_else(|| BadField::new("InvalidBody", "body", "a JSON object is required"))?;
    let module = match obj.get("module") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(BadField::new("InvalidArgument", "module", "module must be a string")),
    };
    let module = self::module(module)?.to_owned();
    let config_version = match obj.get("configVersion") {
        None | Some(Value::Null) => 0,
        Some(n) => n.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
            BadField::new("InvalidArgument", "configVersion", "configVersion must be an integer >= 0")
        })?,
    };
    let mut labels = BTreeMap::new();
    match obj.get("labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) if m.len() <= MAX_LABELS => {
            for (k, v) in m {
                match v {
                    Value::String(s) if !k.is_empty() && k.len() <= MAX_TEXT && s.len() <= MAX_TEXT => {
                        labels.insert(k.clone(), s.clone());
                    }
                    _ => {
                        return Err(BadField::new(
                            "InvalidArgument",
                            format!("labels.{k}"),
                            format!(
                            "labels are strings of at most {MAX_TEXT} bytes under keys of 1 to {MAX_TEXT}"
                        ),
                        ))
                    }
                }
            }
        }
        Some(_) => {
            return Err(BadField::new(
                "InvalidArgument",
                "labels",
                format!("labels must be an object of at most {MAX_LABELS} strings"),
            ))
        }
    }
    Ok(DeviceRequest {
        module,
        device_id: text(obj, "deviceId", MAX_DEVICE_ID)?,
        config_version,
        platform: text(obj, "platform", MAX_TEXT)?,
        app_version: text(obj, "appVersion", MAX_TEXT)?,
        segment: match text(obj, "segment", MAX_TEXT)? {
            // Matched against the policy's segment tokens: one spelling, refused otherwise.
            Some(s) => Some(
                httpdns_core::Token::parse(&s)
                    .map_err(|e| BadField::new("InvalidArgument", "segment", format!("segment {e}")))?,
            )
            .map(|t| t.as_str().to_owned()),
            None => None,
        },
        labels,
    })
}

/// What one device is served: the version it gets, the body rendered for it and the body's
/// signature.
#[derive(Debug)]
pub struct Rendered {
    pub published: Arc<Published>,
    pub body: Bytes,
    pub signature: HeaderValue,
}

/// The answer for one device: without a device id the document as stored (no per-device part
/// can be decided); with one, its flags, its target and its resolution, rendered and signed for
/// it. `classify` gives the client's place, asked only when a target or the resolution policy
/// needs it.
pub fn render(
    cache: &ConfigCache,
    p: &Arc<Published>,
    req: &DeviceRequest,
    classify: impl FnOnce() -> ClientView,
) -> Rendered {
    let Some(device_id) = req.device_id.as_deref() else {
        return Rendered { published: p.clone(), body: p.body.clone(), signature: p.signature.clone() };
    };
    // Inside a guarded rollout's share, the newest version; else what everyone gets.
    let p = cache.for_device(p, device_id);
    let newest = cache.canary(&req.module).map_or(p.version, |c| c.published.version.max(p.version));
    // Only versions that exist are counted: a made-up number must not take a sketch.
    if (1..=newest).contains(&req.config_version) {
        cache.adoption().note(&req.module, req.config_version, device_id);
    }
    // Classified only when a target or the resolution policy needs the place.
    let needs_place = !p.document.targets.is_empty() || p.document.resolution_policy.is_some();
    let view = needs_place.then(classify);
    let resolution = p.document.resolution_policy.as_ref().zip(view.as_ref()).map(|(policy, view)| {
        let name = |t: &Option<httpdns_core::Token>| t.as_ref().map_or("unknown", |t| t.as_str()).to_owned();
        let place = Place { isp: name(&view.isp), region: name(&view.region) };
        let control = cache.policy().control(&place.isp, &place.region);
        policy.decide(PolicyDevice { id: device_id, place: &place, segment: req.segment.as_deref() }, control)
    });
    let body = match &view {
        Some(view) if !p.document.targets.is_empty() => {
            let device = Device {
                platform: req.platform.as_deref(),
                app_version: req.app_version.as_deref(),
                isp: view.isp.as_ref().map(|t| t.as_str()),
                region: view.region.as_ref().map(|t| t.as_str()),
                labels: Some(&req.labels),
            };
            p.document.render_for(p.version as u64, device_id, &device, resolution.as_ref()).0
        }
        _ => p.document.render_with(p.version as u64, Some(device_id), resolution.as_ref()),
    };
    let body = Bytes::from(body);
    let signature = HeaderValue::from_str(&cache.signer().sign(&body)).expect("base64 is header-safe");
    Rendered { published: p, body, signature }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_request_names_the_field_at_fault() {
        let ok = parse(
            br#"{"module": "cdn", "deviceId": "d1", "configVersion": 3, "platform": "android",
            "appVersion": "5.2.1", "segment": "premium", "labels": {"channel": "beta"}, "other": [1]}"#,
        )
        .unwrap();
        assert_eq!((ok.module.as_str(), ok.config_version), ("cdn", 3));
        assert_eq!(ok.labels.get("channel").map(String::as_str), Some("beta"));
        for (body, field) in [
            (r#"{"module": "cdn", "platform": 7}"#, "platform"),
            (r#"{"module": "cdn", "appVersion": ""}"#, "appVersion"),
            (r#"{"module": "cdn", "labels": ["a"]}"#, "labels"),
            (r#"{"module": "cdn", "labels": {"a": 1}}"#, "labels.a"),
            (r#"{"module": "cdn", "deviceId": ""}"#, "deviceId"),
            (r#"{"module": "cdn", "configVersion": -1}"#, "configVersion"),
            (r#"{"deviceId": "d"}"#, "module"),
        ] {
            assert_eq!(parse(body.as_bytes()).unwrap_err().field, field, "{body}");
        }
    }
}
