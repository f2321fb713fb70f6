//! `POST /app/events`: batches of client events (docs/observability.md).
//!
//! Unsigned batches are rate limited per client address and counted under the server's
//! classification of that address. Signed batches (`?account=&t=&s=`, Alibaba's signature over
//! the SHA-256 of the JSON body, as for `/feedback`) count against the account's rate limit and
//! may say their own `isp` and `region`; an unsigned event stands for at most
//! [`MAX_UNSIGNED_WEIGHT`] events whatever its `sample_rate`. With `HTTPDNS_AUTH_REQUIRED` only signed batches are
//! taken. `Content-Encoding: gzip` is accepted; sizes are bounded before and after
//! decompression. A batch is taken whole or refused whole.

use std::io::Read as _;
use std::net::IpAddr;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use httpdns_store::events::{EventCounts, EventKey};

use crate::apps::state::AppsState;
use crate::error::ApiError;
use crate::live::feedback::signer;
use crate::peer::PeerAddr;
use httpdns_events::schema::{self, Detail, Event};
use httpdns_events::verdict::{self, Context};
use httpdns_events::{Counted, MAX_UNSIGNED_WEIGHT};

const UNSIGNED: &str = "this server takes signed events only: /app/events?account=&t=&s=";

pub(crate) async fn handle(
    State(app): State<AppsState>,
    PeerAddr(peer): PeerAddr,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Counted by the router's `track` layer (route `/app/events`).
    match accept(&app, peer, query.as_deref(), &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn accept(
    app: &AppsState,
    peer: IpAddr,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let hub = &app.events;
    let settings = hub.settings();
    let rejected = |why: &str| hub.metrics.rejected.with_label_values(&[why]).inc();
    let max = settings.max_body_bytes;
    let raw = axum::body::to_bytes(body, max).await.map_err(|_| {
        rejected("too_large");
        too_large(max)
    })?;
    let json = decode(headers, &raw, max).inspect_err(|e| {
        rejected(if e.status == StatusCode::PAYLOAD_TOO_LARGE { "too_large" } else { "invalid" });
    })?;
    let account = signer(app, query, &json, UNSIGNED).inspect_err(|e| {
        rejected(if e.status == StatusCode::TOO_MANY_REQUESTS { "rate_limited" } else { "unauthenticated" });
    })?;
    if account.is_none() && !app.event_limits.allow(peer) {
        rejected("rate_limited");
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Throttled",
            "too many event batches; slow down",
        ));
    }
    let now = httpdns_core::clock::unix_s() as i64;
    let events = schema::parse_batch(&json, now, settings.max_batch).map_err(|e| {
        rejected("invalid");
        ApiError::bad_request("InvalidArgument", e.field, e.message)
    })?;

    let published = app.catalog.snapshot();
    let view = httpdns_geo::classify(&published, &app.geo, peer);
    let oldest = now - settings.max_age.as_secs() as i64;
    let mut batch = Vec::with_capacity(events.len());
    let mut stale = 0u64;
    let mut by_version = Vec::new();
    for e in &events {
        if e.timestamp < oldest {
            stale += 1;
            continue;
        }
        // Only a signed batch says where the device is; anyone else is where its address is.
        let claimed = |own: &Option<httpdns_core::Token>, seen: &Option<httpdns_core::Token>| {
            let t = if account.is_some() { own.as_ref().or(seen.as_ref()) } else { seen.as_ref() };
            t.map_or("unknown", |t| t.as_str()).to_owned()
        };
        let (isp, region) = (claimed(&e.isp, &view.isp), claimed(&e.region, &view.region));
        let client_isp =
            if account.is_some() { e.isp.as_ref().or(view.isp.as_ref()) } else { view.isp.as_ref() };
        let (reason, host, duration) = describe(app, e, client_isp, peer, &published);
        // Only a signed batch's sample_rate is believed whole: an unsigned event stands for
        // at most MAX_UNSIGNED_WEIGHT (one event "sampled at 1e-6" is not a million).
        let w = if account.is_none() && e.weight > MAX_UNSIGNED_WEIGHT {
            hub.metrics.weight_capped.inc();
            MAX_UNSIGNED_WEIGHT
        } else {
            e.weight
        };
        if let Some(v) = httpdns_events::sides::of_event(e, &isp, &region, reason, w) {
            by_version.push(v);
        }
        batch.push(Counted {
            key: EventKey {
                event: e.detail.kind().as_str().to_owned(),
                isp,
                region,
                reason: reason.to_owned(),
                host,
                group: e.side.as_str().to_owned(),
                cohort: match e.httpdns_enabled {
                    Some(true) => "on",
                    Some(false) => "off",
                    None => "unknown",
                }
                .to_owned(),
            },
            counts: EventCounts {
                count: w,
                duration_ms_sum: duration.map_or(0.0, |d| d as f64 * w),
                duration_count: if duration.is_some() { w } else { 0.0 },
            },
        });
    }
    let accepted = batch.len();
    hub.note_unknown(events.iter().flat_map(|e| &e.unknown));
    hub.record(batch);
    app.config.sides().record(&by_version);
    if stale > 0 {
        hub.metrics.rejected.with_label_values(&["stale"]).inc_by(stale);
    }
    Ok((StatusCode::ACCEPTED, axum::Json(serde_json::json!({ "accepted": accepted, "stale": stale })))
        .into_response())
}

/// The reason label, the unified host label, and the duration an event adds.
fn describe(
    app: &AppsState,
    e: &Event,
    client_isp: Option<&httpdns_core::Token>,
    peer: IpAddr,
    published: &httpdns_catalog::Published,
) -> (&'static str, String, Option<u64>) {
    let host = |h: &httpdns_config::Host| {
        if app.config.is_unified_host(h) {
            h.to_string()
        } else {
            httpdns_events::aggregate::OTHER.to_owned()
        }
    };
    match &e.detail {
        Detail::DnsFallback { reason, duration_ms, .. } => {
            (reason.as_str(), String::new(), Some(*duration_ms))
        }
        Detail::HostSwitch { from, reason, duration_ms, .. } => (reason.as_str(), host(from), *duration_ms),
        Detail::HostRevive { host: h, down_ms } => ("revived", host(h), *down_ms),
        Detail::Request { host: h, outcome, latency_ms } => (outcome.as_str(), host(h), Some(*latency_ms)),
        Detail::LocalDnsCompare { host: name, localdns, httpdns } => {
            let upstream = app.upstream.peek(name, peer);
            let cx = Context {
                client_isp,
                httpdns,
                upstream: &upstream,
                allow_private: app.allow_private_node_ips,
            };
            let v = verdict::judge(published, name, localdns, &cx, |ip| {
                httpdns_geo::classify(published, &app.geo, ip).isp
            });
            (v.as_str(), String::new(), None)
        }
    }
}

fn too_large(max: usize) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "TooLarge", format!("an event batch is at most {max} bytes"))
        .with_field("body")
}

/// The JSON body: as sent, or gunzipped (bounded: a small bomb must not expand unchecked).
fn decode(headers: &HeaderMap, raw: &[u8], max: usize) -> Result<Vec<u8>, ApiError> {
    let encoding =
        headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    match encoding.as_deref() {
        None | Some("identity") => Ok(raw.to_vec()),
        Some("gzip" | "x-gzip") => {
            let mut out = Vec::with_capacity(raw.len() * 4);
            flate2::read::GzDecoder::new(raw)
                .take(max as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| ApiError::bad_request("InvalidBody", "body", format!("not gzip: {e}")))?;
            if out.len() > max {
                return Err(too_large(max));
            }
            Ok(out)
        }
        Some(other) => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedEncoding",
            format!("Content-Encoding {other:?}: send gzip or nothing"),
        )
        .with_field("Content-Encoding")),
    }
}
