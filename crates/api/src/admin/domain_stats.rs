//! `GET /admin/v1/domains/{name}/stats?window=1h`: this replica's address questions for one
//! domain resource over the window (at most an hour, by minute): the total, by front-end
//! (`d`, `resolve`, `v2`, `udp`, `tcp`, `dot`, `doh`), by the client's carrier and region, and
//! per minute for a chart. Counted in memory by `httpdns_answer::tally`; a wildcard's figures
//! are those of every name it answered.

use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use httpdns_answer::tally::WINDOW_MINUTES;
use httpdns_catalog::kinds::Domains;
use httpdns_catalog::ResourceKind;
use serde_json::json;

use crate::admin::state::AdminState;
use crate::error::ApiError;

pub(crate) async fn stats(
    State(app): State<AdminState>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let name =
        Domains::canonical_name(&raw).map_err(|e| ApiError::bad_request("InvalidName", "name", e.message))?;
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()).into_owned().collect();
    let window = pairs.iter().find(|(k, _)| k == "window").map(|(_, v)| v.as_str());
    let (window, minutes) = crate::query::window(window, "1h", Duration::from_secs(WINDOW_MINUTES * 60))?;
    let published = app.catalog.snapshot();
    if published.snapshot.domain_entry(&name).is_none_or(|(key, _)| key != name) {
        return Err(ApiError::not_found(format!("domain {name}")));
    }
    let now = httpdns_core::clock::unix_s() / 60;
    let s = app.metrics.dns.domains.stats(&name, minutes as u64, now);
    let mut places: Vec<_> = s.by_place.into_iter().collect();
    places.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let body = json!({
        "name": name,
        "window": window,
        "scope": "replica",
        "total": s.total,
        "by_frontend": s.by_frontend,
        "by_place": places
            .into_iter()
            .map(|((isp, region), n)| json!({"isp": isp, "region": region, "queries": n}))
            .collect::<Vec<_>>(),
        "series": s.per_minute.iter().map(|(m, n)| json!({"at": m * 60, "queries": n})).collect::<Vec<_>>(),
    });
    Ok(axum::Json(body).into_response())
}
