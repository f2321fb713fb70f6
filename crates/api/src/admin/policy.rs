//! `GET /admin/v1/policy/places`: every place the policy controller knows, its state, the
//! share of `httpdnsRate` in force, the figures that decided it and its recent steps
//! (docs/policy.md).

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::Json;
use httpdns_config::policy::{Control, Place, PlaceState};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::AppState;

/// Steps listed per place.
const STEPS_PER_PLACE: i64 = 20;

pub(crate) async fn places(
    State(app): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let (isp, region) = (get("isp"), get("region"));
    let store = app.catalog.store();
    let rows = store.policy_places().await.map_err(|e| ApiError::unavailable(&e))?;
    let view = app.config.policy();
    let settings = view.settings();
    // The documents that carry a policy: each decides its own rate; pins are per module.
    let modules: BTreeMap<String, httpdns_config::policy::ResolutionPolicy> = app
        .config
        .modules()
        .into_iter()
        .filter_map(|p| Some((p.module.clone(), p.document.resolution_policy.clone()?)))
        .collect();
    let mut places = Vec::new();
    for r in rows.iter().filter(|r| isp.is_none_or(|i| i == r.isp) && region.is_none_or(|g| g == r.region)) {
        let state = PlaceState::parse(&r.state).unwrap_or_default();
        let control = (state != PlaceState::Healthy).then_some(Control { state, share: r.share });
        let place = Place { isp: r.isp.clone(), region: r.region.clone() };
        let mut rates = serde_json::Map::new();
        let mut pinned = Vec::new();
        for (module, policy) in &modules {
            if policy.pinned(&r.isp, &r.region).is_some() {
                pinned.push(Value::from(module.as_str()));
            }
            // The rate a device without a segment is bucketed against here.
            let d = policy.decide(
                httpdns_config::policy::Device { id: "", place: &place, segment: None },
                if settings.auto { control } else { None },
            );
            rates.insert(module.clone(), json!(d.httpdns_rate));
        }
        let steps = store
            .policy_steps(Some((&r.isp, &r.region)), STEPS_PER_PLACE)
            .await
            .map_err(|e| ApiError::unavailable(&e))?;
        places.push(json!({
            "isp": r.isp,
            "region": r.region,
            "state": r.state,
            "step": r.step,
            "share": r.share,
            "httpdns_rate": rates,
            "pinned_in": pinned,
            "threshold": r.threshold,
            "rates": serde_json::from_str::<Value>(&r.rates).unwrap_or(Value::Null),
            "since_ms": r.since,
            "updated_ms": r.updated_at,
            "steps": steps.iter().map(|s| json!({
                "at_ms": s.at, "from": s.from_state, "to": s.to_state,
                "from_share": s.from_share, "to_share": s.to_share,
                "why": s.reason,
                "versions": s.versions.split(',').filter(|v| !v.is_empty()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }));
    }
    Ok(Json(json!({
        "auto": settings.auto,
        "ramp": settings.ramp,
        "step_seconds": settings.step.as_secs_f64(),
        "min_requests": settings.min_requests,
        "tick_ms": settings.tick.as_millis() as u64,
        "places": places,
    })))
}
