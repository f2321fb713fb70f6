//! `GET /admin/v1/events/series?window=1h[&step=][&top=]`: the fleet's requests, errors,
//! fallbacks and host switches per carrier and region over time, in buckets of whole minutes,
//! for the console's chart (docs/observability.md).
//!
//! Bounded: at most [`MAX_BUCKETS`] buckets (the step is chosen to fit when not given) and the
//! [`MAX_TOP`] places with the most events; the rest are summed into `others`.

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::admin::state::AdminState;
use crate::error::ApiError;
use crate::query::{pairs as query_pairs, window as parse_window};
use httpdns_events::fleet::{self, round, Series, SERIES_FIELDS};
use httpdns_events::now_minute;
use httpdns_events::schema::EventType;

/// Buckets in one answer, at most.
pub(crate) const MAX_BUCKETS: i64 = 360;
/// Buckets the step chosen by default stays within.
const DEFAULT_BUCKETS: i64 = 120;
/// Steps chosen by default, in minutes: the first that fits the window in [`DEFAULT_BUCKETS`].
const STEPS: [i64; 7] = [1, 5, 15, 60, 180, 360, 1440];
/// Places drawn on their own, at most (`top`), and by default.
pub(crate) const MAX_TOP: usize = 20;
const DEFAULT_TOP: usize = 5;

/// A place's (or the others') totals and series, into `m`.
fn series_json(s: &Series, m: &mut serde_json::Map<String, Value>) {
    for (f, name) in SERIES_FIELDS.iter().enumerate() {
        m.insert((*name).into(), json!(round(s.totals[f])));
    }
    let series: serde_json::Map<String, Value> = SERIES_FIELDS
        .iter()
        .enumerate()
        .map(|(f, name)| ((*name).to_owned(), s.buckets.iter().map(|b| json!(round(b[f]))).collect()))
        .collect();
    m.insert("series".into(), Value::Object(series));
}

fn step_error() -> ApiError {
    ApiError::bad_request(
        "InvalidArgument",
        "step",
        format!("must be a number of minutes, hours or days (1m, 15m, 1h), at most the window, and give at most {MAX_BUCKETS} buckets"),
    )
}

pub(crate) async fn series(
    State(app): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref());
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
    let settings = app.events.settings();
    let (window, minutes) = parse_window(get("window"), "1h", settings.retention)?;
    let step = match get("step") {
        Some(s) => {
            let (_, step) = parse_window(Some(s), "1m", settings.retention).map_err(|_| step_error())?;
            if step > minutes || (minutes + step - 1) / step > MAX_BUCKETS {
                return Err(step_error());
            }
            step
        }
        None => STEPS
            .into_iter()
            .find(|s| (minutes + s - 1) / s <= DEFAULT_BUCKETS)
            .unwrap_or((minutes + MAX_BUCKETS - 1) / MAX_BUCKETS),
    };
    let top = match get("top") {
        None => DEFAULT_TOP,
        Some(t) => t.parse::<usize>().ok().filter(|t| (1..=MAX_TOP).contains(t)).ok_or_else(|| {
            ApiError::bad_request("InvalidArgument", "top", format!("must be 1 to {MAX_TOP}"))
        })?,
    };
    let n = ((minutes + step - 1) / step) as usize;

    // This replica's own minutes first, as the summary does (admin::rows).
    let store = app.catalog.store();
    super::admin::flush_own(&app, "series").await?;
    // Whole buckets ending with the current minute: the first may reach before the window.
    let to = now_minute();
    let from = to - (n as i64) * step + 1;
    let rows = store
        .event_buckets(
            from,
            to,
            step,
            [EventType::Request.as_str(), EventType::DnsFallback.as_str(), EventType::HostSwitch.as_str()],
        )
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    let fleet::Chart { shown, others } = fleet::series(&rows, n, top);
    let shown: Vec<Value> = shown
        .iter()
        .map(|((isp, region), s)| {
            let mut m = serde_json::Map::new();
            m.insert("isp".into(), json!(isp));
            m.insert("region".into(), json!(region));
            series_json(s, &mut m);
            Value::Object(m)
        })
        .collect();
    let others = others.map_or(Value::Null, |(places, sum)| {
        let mut m = serde_json::Map::new();
        m.insert("places".into(), json!(places));
        series_json(&sum, &mut m);
        Value::Object(m)
    });
    let t: Vec<i64> = (0..n as i64).map(|b| (from + b * step) * 60).collect();
    Ok(axum::Json(json!({
        "window": window,
        "step_s": step * 60,
        "from": from * 60,
        "to": to * 60 + 59,
        "t": t,
        "alert_rate": settings.alert_rate,
        "alert_min_requests": settings.alert_min_requests,
        "places": shown,
        "others": others,
    }))
    .into_response())
}
