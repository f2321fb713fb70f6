//! `GET /admin/v1/policy/places`: every place the policy controller knows, its state, the
//! share of `httpdnsRate` in force, the figures that decided it and its recent steps
//! (docs/policy.md).

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::Json;
use httpdns_config::policy::{Control, Place, PlaceState};
use serde_json::{json, Value};

use crate::admin::state::AdminState;
use crate::error::ApiError;

/// Steps listed per place.
const STEPS_PER_PLACE: i64 = 20;

pub(crate) async fn places(
    State(app): State<AdminState>,
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

/// `GET /admin/v1/policy/series?isp=&region=&window=1h`: one place's per-minute figures by
/// cohort (requests and failure rate: the console's chart of the ramped side against the
/// held-back one), its threshold, and the shares it held over the window (from its steps).
pub(crate) async fn series(
    State(app): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let token = |field: &'static str| -> Result<String, ApiError> {
        let v = get(field)
            .ok_or_else(|| ApiError::bad_request("MissingArgument", field, format!("{field} is required")))?;
        httpdns_core::Token::parse(v)
            .map(|t| t.as_str().to_owned())
            .map_err(|e| ApiError::bad_request("InvalidArgument", field, format!("{field} {e}")))
    };
    let (isp, region) = (token("isp")?, token("region")?);
    let (window, minutes) = crate::query::window(get("window"), "1h", app.events.settings().retention)?;
    let store = app.catalog.store();
    crate::events::admin::flush_own(&app, "policy series").await?;
    let to = httpdns_events::now_minute();
    let from = to - minutes + 1;
    // At most 120 buckets: a day is charted in 12-minute buckets.
    let step = (minutes + 119) / 120;
    let buckets = ((to - from) / step + 1) as usize;
    let rows =
        store.policy_place_minutes(&isp, &region, from, to).await.map_err(|e| ApiError::unavailable(&e))?;
    let mut sums: BTreeMap<&str, Vec<httpdns_store::events::PolicyCounts>> = BTreeMap::new();
    for cohort in ["on", "off", "unknown"] {
        sums.insert(cohort, vec![Default::default(); buckets]);
    }
    for r in &rows {
        let b = ((r.minute - from) / step) as usize;
        if let Some(slot) = sums.get_mut(r.cohort.as_str()).and_then(|v| v.get_mut(b)) {
            slot.add(&r.counts);
        }
    }
    let side = |cohort: &str| {
        let v = &sums[cohort];
        json!({
            "requests": v.iter().map(|c| (c.requests * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
            "failure_rate": v.iter().map(|c| (c.requests > 0.0).then(|| ((c.errors + c.fallbacks) / c.requests).min(1.0))).collect::<Vec<_>>(),
        })
    };
    let place = store
        .policy_places()
        .await
        .map_err(|e| ApiError::unavailable(&e))?
        .into_iter()
        .find(|p| p.isp == isp && p.region == region);
    let steps =
        store.policy_steps(Some((&isp, &region)), 500).await.map_err(|e| ApiError::unavailable(&e))?;
    // The share at the window's start (the last step before it), then every change inside it.
    let start_ms = from * 60_000;
    let before = steps.iter().find(|s| s.at < start_ms).map_or(1.0, |s| s.to_share);
    let mut shares = vec![json!({"at_s": from * 60, "share": before})];
    shares.extend(
        steps
            .iter()
            .rev()
            .filter(|s| s.at >= start_ms)
            .map(|s| json!({"at_s": s.at / 1000, "share": s.to_share, "state": s.to_state})),
    );
    Ok(Json(json!({
        "isp": isp, "region": region, "window": window, "step_s": step * 60,
        "t": (0..buckets as i64).map(|b| (from + b * step) * 60).collect::<Vec<_>>(),
        "on": side("on"), "off": side("off"), "unknown": side("unknown"),
        "threshold": place.as_ref().map(|p| p.threshold),
        "state": place.as_ref().map(|p| p.state.clone()),
        "shares": shares,
    })))
}
