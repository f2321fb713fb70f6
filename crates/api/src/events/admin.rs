//! The fleet view of client events, from every replica's rows in the store:
//! `GET /admin/v1/events/summary?window=5m[&event=]` and `GET /admin/v1/localdns/map?window=1h`.
//!
//! The window covers whole minutes up to the current one (`5m`: this minute and the four
//! before). This replica writes its own minutes first, so what it received is in the answer;
//! the others' are at most one flush interval behind.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use httpdns_store::events::{EventCounts, EventKey};
use serde_json::{json, Value};

use crate::admin::state::AdminState;
use crate::error::ApiError;
use crate::query::{pairs as query_pairs, window as parse_window};
use httpdns_events::now_minute;
use httpdns_events::schema::{EventType, FallbackReason};
use httpdns_events::verdict::Verdict;

/// How long a summary waits for this replica's own flush before reading without it.
const OWN_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Writes this replica's own minutes before a read of the store (`what` names the reader in
/// the log). On a task of its own: a flush is shared work that must not be cut off half-way by
/// this request's bound or its client hanging up (taken minutes would be lost); past the bound
/// the read answers from the rows stored.
pub(crate) async fn flush_own(app: &AdminState, what: &str) -> Result<(), ApiError> {
    let (hub, store) = (app.events.clone(), app.catalog.store().clone());
    let flush = tokio::spawn(async move { hub.flush(&store).await });
    match tokio::time::timeout(OWN_FLUSH_WAIT, flush).await {
        Ok(Ok(Ok(_))) => Ok(()),
        Ok(Ok(Err(e))) => Err(ApiError::unavailable(&e)),
        Ok(Err(e)) => Err(ApiError::internal(&e)),
        Err(_) => {
            tracing::warn!(what, "This replica's own flush timed out; answering from the rows stored.");
            Ok(())
        }
    }
}

/// Rows of the window, every replica summed, after this replica's own flush.
async fn rows(
    app: &AdminState,
    minutes: i64,
    event: Option<&str>,
) -> Result<(Vec<(EventKey, EventCounts, f64)>, i64, i64, i64), ApiError> {
    let store = app.catalog.store();
    flush_own(app, "summary").await?;
    let to = now_minute();
    let from = to - minutes + 1;
    let (rows, replicas) =
        store.reported_event_totals(from, to, event).await.map_err(|e| ApiError::unavailable(&e))?;
    Ok((rows, replicas, from, to))
}

pub(super) fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn rate(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        round(part / whole)
    } else {
        0.0
    }
}

#[derive(Default)]
struct Rates {
    requests: f64,
    /// Request and fallback events as received (unweighted).
    reports: f64,
    errors: f64,
    fallbacks: f64,
    errors_by: BTreeMap<String, f64>,
    fallbacks_by: BTreeMap<String, f64>,
}

impl Rates {
    fn add(&mut self, k: &EventKey, c: &EventCounts, reports: f64) {
        if k.event == EventType::Request.as_str() || k.event == EventType::DnsFallback.as_str() {
            self.reports += reports;
        }
        if k.event == EventType::Request.as_str() {
            self.requests += c.count;
            // A 4xx is the app asking for what is not there, not the delivery failing.
            if k.reason != "ok" && k.reason != "4xx" {
                self.errors += c.count;
                *self.errors_by.entry(k.reason.clone()).or_default() += c.count;
            }
        } else if k.event == EventType::DnsFallback.as_str() {
            self.fallbacks += c.count;
            *self.fallbacks_by.entry(k.reason.clone()).or_default() += c.count;
        }
    }

    fn top(by: &BTreeMap<String, f64>) -> Value {
        by.iter().max_by(|a, b| a.1.total_cmp(b.1)).map_or(Value::Null, |(r, _)| Value::from(r.as_str()))
    }

    fn json(&self, settings: &httpdns_events::EventSettings) -> serde_json::Map<String, Value> {
        let (error_rate, fallback_rate) =
            (rate(self.errors, self.requests), rate(self.fallbacks, self.requests));
        // As the shipped rules judge: each reason's own share of the requests, unrounded.
        // Weighted requests and real reports both: one event claiming to stand for a million
        // is one report.
        let judged =
            self.requests >= settings.alert_min_requests && self.reports >= settings.alert_min_reports;
        let over = |by: &BTreeMap<String, f64>| -> Vec<Value> {
            by.iter()
                .filter(|(_, n)| judged && **n / self.requests > settings.alert_rate)
                .map(|(r, _)| Value::from(r.as_str()))
                .collect()
        };
        let (errors_over, fallbacks_over) = (over(&self.errors_by), over(&self.fallbacks_by));
        let mut m = serde_json::Map::new();
        m.insert("requests".into(), json!(round(self.requests)));
        m.insert("reports".into(), json!(round(self.reports)));
        m.insert("errors".into(), json!(round(self.errors)));
        m.insert("error_rate".into(), json!(error_rate));
        m.insert("top_error".into(), Self::top(&self.errors_by));
        m.insert("fallbacks".into(), json!(round(self.fallbacks)));
        m.insert("fallback_rate".into(), json!(fallback_rate));
        m.insert("top_fallback_reason".into(), Self::top(&self.fallbacks_by));
        m.insert("alert".into(), json!(!errors_over.is_empty() || !fallbacks_over.is_empty()));
        m.insert("alert_errors".into(), Value::Array(errors_over));
        m.insert("alert_fallback_reasons".into(), Value::Array(fallbacks_over));
        m
    }
}

pub(crate) async fn summary(
    State(app): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref());
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let settings = app.events.settings();
    let (window, minutes) = parse_window(get("window"), "5m", settings.retention)?;
    let event = match get("event").filter(|s| !s.is_empty()) {
        None => None,
        Some(e) => Some(EventType::ALL.into_iter().find(|t| t.as_str() == e).ok_or_else(|| {
            ApiError::bad_request("InvalidArgument", "event", format!("unknown event type {e:?}"))
        })?),
    };
    let (rows, replicas, from, to) = rows(&app, minutes, event.map(EventType::as_str)).await?;

    let mut by_place: BTreeMap<(String, String), Rates> = BTreeMap::new();
    let mut by_side: BTreeMap<String, Rates> = BTreeMap::new();
    let events: Vec<Value> = rows
        .iter()
        .map(|(k, c, reports)| {
            by_place.entry((k.isp.clone(), k.region.clone())).or_default().add(k, c, *reports);
            by_side.entry(k.group.clone()).or_default().add(k, c, *reports);
            json!({
                "event": k.event, "isp": k.isp, "region": k.region, "reason": k.reason,
                "host": if k.host.is_empty() { Value::Null } else { Value::from(k.host.as_str()) },
                "convergence": k.group, "count": round(c.count),
                "mean_duration_ms": if c.duration_count > 0.0 { json!(round(c.duration_ms_sum / c.duration_count)) } else { Value::Null },
            })
        })
        .collect();
    let mut rates: Vec<Value> = by_place
        .iter()
        .map(|((isp, region), r)| {
            let mut m = r.json(settings);
            m.insert("isp".into(), json!(isp));
            m.insert("region".into(), json!(region));
            Value::Object(m)
        })
        .collect();
    // The worst places first: what an operator reads first.
    let worst =
        |v: &Value| v["error_rate"].as_f64().unwrap_or(0.0).max(v["fallback_rate"].as_f64().unwrap_or(0.0));
    rates.sort_by(|a, b| worst(b).total_cmp(&worst(a)));
    let sides: Vec<Value> = by_side
        .iter()
        .map(|(side, r)| {
            let mut m = r.json(settings);
            m.insert("convergence".into(), json!(side));
            Value::Object(m)
        })
        .collect();
    let reasons: Vec<&str> = FallbackReason::ALL.iter().map(|r| r.as_str()).collect();
    Ok(axum::Json(json!({
        "window": window,
        "from": from * 60,
        "to": to * 60 + 59,
        "replicas": replicas,
        "alert_rate": settings.alert_rate,
        "alert_min_requests": settings.alert_min_requests,
        "alert_min_reports": settings.alert_min_reports,
        "fallback_reasons": reasons,
        "rates": rates,
        "convergence": sides,
        "events": events,
        // This replica's sample of values it did not know (counted under `other`).
        "unknown_values": app.events.unknown_values(),
    }))
    .into_response())
}

pub(crate) async fn localdns_map(
    State(app): State<AdminState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref());
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let (window, minutes) = parse_window(get("window"), "1h", app.events.settings().retention)?;
    let (rows, replicas, from, to) = rows(&app, minutes, Some(EventType::LocalDnsCompare.as_str())).await?;
    let mut places: BTreeMap<(String, String), BTreeMap<&'static str, f64>> = BTreeMap::new();
    for (k, c, _) in &rows {
        let Some(v) = Verdict::ALL.into_iter().find(|v| v.as_str() == k.reason) else { continue };
        *places.entry((k.isp.clone(), k.region.clone())).or_default().entry(v.as_str()).or_default() +=
            c.count;
    }
    let mut map: Vec<Value> = places
        .into_iter()
        .map(|((isp, region), counts)| {
            let reports: f64 = counts.values().sum();
            let mut m = serde_json::Map::new();
            m.insert("isp".into(), json!(isp));
            m.insert("region".into(), json!(region));
            m.insert("reports".into(), json!(round(reports)));
            for v in Verdict::ALL {
                let n = counts.get(v.as_str()).copied().unwrap_or(0.0);
                m.insert(v.as_str().into(), json!(round(n)));
                if v != Verdict::Consistent {
                    m.insert(format!("{}_rate", v.as_str()), json!(rate(n, reports)));
                }
            }
            Value::Object(m)
        })
        .collect();
    let bad =
        |v: &Value| 1.0 - rate(v["consistent"].as_f64().unwrap_or(0.0), v["reports"].as_f64().unwrap_or(0.0));
    map.sort_by(|a, b| bad(b).total_cmp(&bad(a)));
    Ok(axum::Json(json!({
        "window": window, "from": from * 60, "to": to * 60 + 59, "replicas": replicas,
        "verdicts": Verdict::ALL.map(Verdict::as_str), "map": map,
    }))
    .into_response())
}
