//! The fleet view of client events, from every replica's rows in the store:
//! `GET /admin/v1/events/summary?window=5m[&event=]` and `GET /admin/v1/localdns/map?window=1h`.
//!
//! The window covers whole minutes up to the current one (`5m`: this minute and the four
//! before). This replica writes its own minutes first, so what it received is in the answer;
//! the others' are at most one flush interval behind.

use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use httpdns_store::events::{EventCounts, EventKey};
use serde_json::{json, Value};

use crate::admin::state::AdminState;
use crate::error::ApiError;
use crate::query::{pairs as query_pairs, window as parse_window};
use httpdns_events::fleet::{self, rate, round, Figures};
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

/// A place's or side's figures with the fields that name it.
fn figures_with(f: &Figures, name: &[(&str, &str)]) -> Value {
    let mut v = serde_json::to_value(f).unwrap_or_default();
    if let Value::Object(m) = &mut v {
        for (k, n) in name {
            m.insert((*k).into(), json!(n));
        }
    }
    v
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

    let events: Vec<Value> = rows
        .iter()
        .map(|(k, c, _)| {
            json!({
                "event": k.event, "isp": k.isp, "region": k.region, "reason": k.reason,
                "host": if k.host.is_empty() { Value::Null } else { Value::from(k.host.as_str()) },
                "convergence": k.group, "count": round(c.count),
                "mean_duration_ms": if c.duration_count > 0.0 { json!(round(c.duration_ms_sum / c.duration_count)) } else { Value::Null },
            })
        })
        .collect();
    let fleet::Summary { places, sides } = fleet::summarize(&rows, settings);
    let rates: Vec<Value> = places
        .iter()
        .map(|((isp, region), f)| figures_with(f, &[("isp", isp), ("region", region)]))
        .collect();
    let sides: Vec<Value> = sides.iter().map(|(side, f)| figures_with(f, &[("convergence", side)])).collect();
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
    let map: Vec<Value> = fleet::localdns_places(&rows)
        .into_iter()
        .map(|((isp, region), verdicts)| {
            let mut m = serde_json::Map::new();
            m.insert("isp".into(), json!(isp));
            m.insert("region".into(), json!(region));
            m.insert("reports".into(), json!(round(verdicts.reports)));
            for v in Verdict::ALL {
                let n = verdicts.count(v);
                m.insert(v.as_str().into(), json!(round(n)));
                if v != Verdict::Consistent {
                    m.insert(format!("{}_rate", v.as_str()), json!(rate(n, verdicts.reports)));
                }
            }
            Value::Object(m)
        })
        .collect();
    Ok(axum::Json(json!({
        "window": window, "from": from * 60, "to": to * 60 + 59, "replicas": replicas,
        "verdicts": Verdict::ALL.map(Verdict::as_str), "map": map,
    }))
    .into_response())
}
