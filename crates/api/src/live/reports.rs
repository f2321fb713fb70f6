//! Node agents push their load, bandwidth and (optionally) latency.
//!
//! `POST /admin/v1/nodes/{id}/metrics` takes one report, `POST /admin/v1/metrics` a batch
//! `{"reports": [{"node": "id", ...}]}`. Reports are stored (so every replica uses them) and
//! folded into scores at the next live refresh; they fade back to the operator's figures once
//! older than the configured age.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use httpdns_core::model::{FieldError, MAX_BANDWIDTH_MBPS, MAX_LATENCY_MS};
use httpdns_store::live::NodeReport;
use httpdns_store::Kind;
use serde::Deserialize;

use crate::admin::body::parse as parse_body;
use crate::admin::state::AdminState;
use crate::error::ApiError;

/// Reports in one batch.
const MAX_BATCH: usize = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Report {
    #[serde(default)]
    load_pct: Option<f64>,
    #[serde(default)]
    bandwidth_mbps: Option<f64>,
    #[serde(default)]
    latency_ms: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchItem {
    node: String,
    #[serde(flatten)]
    report: Report,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Batch {
    reports: Vec<BatchItem>,
}

impl Report {
    fn validate(&self, prefix: &str) -> Result<NodeReport, FieldError> {
        let check = |field: &str, v: Option<f64>, max: f64| match v {
            Some(x) if !(x.is_finite() && (0.0..=max).contains(&x)) => {
                Err(FieldError::new(format!("{prefix}{field}"), format!("must be a number from 0 to {max}")))
            }
            _ => Ok(()),
        };
        check("load_pct", self.load_pct, 100.0)?;
        check("bandwidth_mbps", self.bandwidth_mbps, MAX_BANDWIDTH_MBPS)?;
        check("latency_ms", self.latency_ms, MAX_LATENCY_MS)?;
        if self.load_pct.is_none() && self.bandwidth_mbps.is_none() && self.latency_ms.is_none() {
            return Err(FieldError::new(
                format!("{prefix}load_pct"),
                "a report needs at least one of load_pct, bandwidth_mbps, latency_ms",
            ));
        }
        Ok(NodeReport {
            load_pct: self.load_pct,
            bandwidth_mbps: self.bandwidth_mbps,
            latency_ms: self.latency_ms,
            reported_at: httpdns_core::clock::unix_ms() as i64,
        })
    }
}

async fn node_exists(app: &AdminState, id: &str) -> Result<bool, ApiError> {
    Ok(app.catalog.store().get(Kind::Node, id).await.map_err(|e| ApiError::unavailable(&e))?.is_some())
}

fn accepted(n: usize) -> Response {
    (StatusCode::ACCEPTED, axum::Json(serde_json::json!({ "accepted": n }))).into_response()
}

pub(crate) async fn one(
    State(app): State<AdminState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let report: Report = parse_body(&body)?;
    let report = report.validate("").map_err(ApiError::invalid)?;
    if !node_exists(&app, &id).await? {
        return Err(ApiError::not_found(format!("no node {id:?}")));
    }
    app.catalog.store().put_reports(&[(id, report)]).await.map_err(|e| ApiError::unavailable(&e))?;
    app.metrics.node_reports.inc();
    Ok(accepted(1))
}

pub(crate) async fn batch(State(app): State<AdminState>, body: Bytes) -> Result<Response, ApiError> {
    let batch: Batch = parse_body(&body)?;
    if batch.reports.is_empty() || batch.reports.len() > MAX_BATCH {
        return Err(ApiError::bad_request("InvalidArgument", "reports", format!("1 to {MAX_BATCH} reports")));
    }
    let mut rows = Vec::with_capacity(batch.reports.len());
    for (i, item) in batch.reports.into_iter().enumerate() {
        let report = item.report.validate(&format!("reports[{i}].")).map_err(ApiError::invalid)?;
        if !node_exists(&app, &item.node).await? {
            return Err(ApiError::bad_request(
                "InvalidArgument",
                format!("reports[{i}].node"),
                format!("no node {:?}", item.node),
            ));
        }
        rows.push((item.node, report));
    }
    app.catalog.store().put_reports(&rows).await.map_err(|e| ApiError::unavailable(&e))?;
    app.metrics.node_reports.inc_by(rows.len() as u64);
    Ok(accepted(rows.len()))
}
