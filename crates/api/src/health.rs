//! `/healthz`, `/readyz` and `/metrics`.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::ops::state::OpsState;

/// Alive: the process answers HTTP.
pub(crate) async fn healthz() -> Response {
    let mut resp = r#"{"status":"ok"}"#.into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

#[derive(Serialize)]
struct Readiness {
    /// `ready`, `degraded` (answering from the last snapshot, store unreachable) or
    /// `starting` (no snapshot loaded yet).
    status: &'static str,
    store: &'static str,
    backend: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    store_error: Option<String>,
    snapshot_revision: i64,
    snapshot_age_seconds: f64,
    domains: usize,
    nodes: usize,
    usable_nodes: usize,
    networks: usize,
    geoip_city: bool,
    geoip_asn: bool,
}

/// Ready to answer: a snapshot is loaded. A store outage after that is reported as
/// `degraded` with 200, since answers keep flowing from the last snapshot and a load balancer
/// must not take the replica out for it.
pub(crate) async fn readyz(State(app): State<OpsState>) -> Response {
    let status = app.catalog.status();
    let snap = app.catalog.snapshot();
    let stats = snap.stats();
    let geo = app.geo.status();
    let (word, code) = match (status.loaded, status.store_ok) {
        (false, _) => ("starting", StatusCode::SERVICE_UNAVAILABLE),
        (true, true) => ("ready", StatusCode::OK),
        (true, false) => ("degraded", StatusCode::OK),
    };
    let body = Readiness {
        status: word,
        store: if status.store_ok { "ok" } else { "unreachable" },
        backend: app.catalog.store().backend_name(),
        store_error: status.last_error,
        snapshot_revision: snap.revision(),
        snapshot_age_seconds: httpdns_core::clock::now()
            .duration_since(status.built_at)
            .map_or(0.0, |d| d.as_secs_f64()),
        domains: stats.domains,
        nodes: stats.nodes,
        usable_nodes: stats.usable_nodes,
        networks: stats.networks,
        geoip_city: geo.city_loaded,
        geoip_asn: geo.asn_loaded,
    };
    let mut resp = (code, serde_json::to_vec(&body).unwrap_or_default()).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub(crate) async fn metrics(State(app): State<OpsState>) -> Response {
    let geo = app.geo.status();
    app.metrics.geoip_loaded.with_label_values(&["city"]).set(i64::from(geo.city_loaded));
    app.metrics.geoip_loaded.with_label_values(&["asn"]).set(i64::from(geo.asn_loaded));
    let age = httpdns_core::clock::now()
        .duration_since(app.catalog.status().built_at)
        .map_or(0.0, |d| d.as_secs_f64());
    app.catalog.metrics().snapshot_age.set(age);
    let (up, down) = app.catalog.registry().counts();
    app.metrics.nodes_by_health.with_label_values(&["up"]).set(up as i64);
    app.metrics.nodes_by_health.with_label_values(&["down"]).set(down as i64);
    app.metrics.sync_upstream(&app.upstream.cache_counts());
    let mut resp = app.metrics.render().into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    resp
}
