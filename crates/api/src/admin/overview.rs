//! `GET /admin/v1/overview`: the server's own counters as JSON, for the console's overview
//! (which turns two readings into rates). Totals since start: answers by front-end, DNS
//! queries by transport, answers by the client's carrier and region, upstream cache results,
//! mirror requests and hits, node health.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use httpdns_core::snapshot::NodeHealth as _;
use serde_json::json;

use crate::admin::state::AdminState;

/// Sums of a counter family by one label (or by two, joined with `/`).
fn by_labels(
    families: &[prometheus::proto::MetricFamily],
    name: &str,
    labels: &[&str],
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for f in families.iter().filter(|f| f.name() == name) {
        for m in f.get_metric() {
            let key: Vec<&str> = labels
                .iter()
                .map(|l| m.get_label().iter().find(|p| p.name() == *l).map_or("", |p| p.value()))
                .collect();
            let v = m.get_counter().get_value() + m.get_gauge().get_value();
            *out.entry(key.join("/")).or_default() += v;
        }
    }
    out
}

pub(crate) async fn handle(State(app): State<AdminState>) -> Response {
    let families = app.metrics.registry.gather();
    let published = app.catalog.snapshot();
    let nodes = published.nodes();
    let up = nodes.iter().enumerate().filter(|(i, n)| n.usable && published.health.is_up(*i as u32)).count();
    let enabled = nodes.iter().filter(|n| n.spec.enabled).count();
    let mirror = app.mirror.report();
    let (requests, hits, back_to_source, bytes_served) =
        mirror.iter().fold((0u64, 0u64, 0u64, 0u64), |a, r| {
            (a.0 + r.requests, a.1 + r.hits, a.2 + r.back_to_source, a.3 + r.bytes_served)
        });
    let upstream: BTreeMap<&str, u64> = app.upstream.cache_counts().into_iter().collect();
    let at_ms = httpdns_core::clock::unix_ms();
    axum::Json(json!({
        "at_ms": at_ms,
        "answers": by_labels(&families, "httpdns_answers_total", &["endpoint"]),
        "dns_queries": by_labels(&families, "httpdns_dns_queries_total", &["frontend"]),
        "answers_by_client": by_labels(&families, "httpdns_answers_by_client_total", &["isp", "region"]),
        "upstream": upstream,
        "mirror": {"requests": requests, "hits": hits, "back_to_source": back_to_source, "bytes_served": bytes_served},
        "nodes": {"total": nodes.len(), "enabled": enabled, "up": up, "down": enabled.saturating_sub(up)},
        "snapshot_revision": published.revision(),
    }))
    .into_response()
}
