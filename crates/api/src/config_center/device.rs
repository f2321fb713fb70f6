//! The per-device `POST /app/config-center/module-config`: what a device says of itself, and
//! the answer rendered for it. This is the one place the per-device answer is put together:
//! the gray-release flags and the global switch (`ConfigDocument::render`), the target that
//! matches the device (`"target": i`), and whatever later decisions join them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::http::HeaderValue;
use bytes::Bytes;
use httpdns_config::policy::{Device as PolicyDevice, Place};
use httpdns_config::target::Device;
use serde_json::Value;

use super::app::{module_param, respond, Whole};
use super::cache::Published;
use crate::error::ApiError;
use crate::state::AppState;

/// Longest accepted device id.
const MAX_DEVICE_ID: usize = 256;
/// Longest platform, app version, segment, label key or value.
const MAX_TEXT: usize = 64;
/// Labels a device may send.
const MAX_LABELS: usize = 16;

/// A device's request, parsed: unknown fields are ignored (apps send more than this reads), but
/// a known field of the wrong shape is refused by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceRequest {
    pub(crate) module: String,
    pub(crate) device_id: Option<String>,
    /// The version the device runs (0: none yet).
    pub(crate) config_version: i64,
    pub(crate) platform: Option<String>,
    pub(crate) app_version: Option<String>,
    pub(crate) segment: Option<String>,
    pub(crate) labels: BTreeMap<String, String>,
}

fn text(
    obj: &serde_json::Map<String, Value>,
    field: &'static str,
    max: usize,
) -> Result<Option<String>, ApiError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= max => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::bad_request(
            "InvalidArgument",
            field,
            format!("{field} must be a string of 1 to {max} bytes"),
        )),
    }
}

pub(crate) fn parse(body: &[u8]) -> Result<DeviceRequest, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("InvalidBody", "body", format!("not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::bad_request("InvalidBody", "body", "a JSON object is required"))?;
    let module = match obj.get("module") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(ApiError::bad_request("InvalidArgument", "module", "module must be a string")),
    };
    let module = module_param(module)?.to_owned();
    let config_version = match obj.get("configVersion") {
        None | Some(Value::Null) => 0,
        Some(n) => n.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::bad_request("InvalidArgument", "configVersion", "configVersion must be an integer >= 0")
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
                        return Err(ApiError::bad_request(
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
            return Err(ApiError::bad_request(
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
            Some(s) => {
                Some(httpdns_core::Token::parse(&s).map_err(|e| {
                    ApiError::bad_request("InvalidArgument", "segment", format!("segment {e}"))
                })?)
                .map(|t| t.as_str().to_owned())
            }
            None => None,
        },
        labels,
    })
}

/// The answer for one device of the client at `peer`: without a device id the document as
/// stored (no per-device part can be decided); with one, its flags and its target, rendered and
/// signed for it. Either way personal: `no-store`.
pub(crate) fn answer(
    app: &AppState,
    p: &std::sync::Arc<Published>,
    req: &DeviceRequest,
    peer: IpAddr,
) -> Whole {
    let Some(device_id) = req.device_id.as_deref() else {
        return respond(p, p.body.clone(), p.signature.clone(), "no-store");
    };
    // Inside a guarded rollout's share, the newest version; else what everyone gets.
    let p = &app.config.for_device(p, device_id);
    let newest = app.config.canary(&req.module).map_or(p.version, |c| c.published.version.max(p.version));
    // Only versions that exist are counted: a made-up number must not take a sketch.
    if (1..=newest).contains(&req.config_version) {
        app.config.adoption().note(&req.module, req.config_version, device_id);
    }
    // Classified only when a target or the resolution policy needs the place.
    let needs_place = !p.document.targets.is_empty() || p.document.resolution_policy.is_some();
    let view = needs_place.then(|| httpdns_geo::classify(&app.catalog.snapshot(), &app.geo, peer));
    let resolution = p.document.resolution_policy.as_ref().zip(view.as_ref()).map(|(policy, view)| {
        let name = |t: &Option<httpdns_core::Token>| t.as_ref().map_or("unknown", |t| t.as_str()).to_owned();
        let place = Place { isp: name(&view.isp), region: name(&view.region) };
        let control = app.config.policy().control(&place.isp, &place.region);
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
    let sig = HeaderValue::from_str(&app.config.signer().sign(&body)).expect("base64 is header-safe");
    respond(p, body, sig, "no-store")
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
            assert_eq!(parse(body.as_bytes()).unwrap_err().field.as_deref(), Some(field), "{body}");
        }
    }
}
