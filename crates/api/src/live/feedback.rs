//! `POST /feedback`: apps report how connections to answered addresses went.
//!
//! ```json
//! [{"ip": "1.1.1.1", "domain": "www.example.com", "ok": true, "connect_ms": 23, "network": "wifi"}]
//! ```
//!
//! (or `{"reports": [...]}`). The reporting client is the TCP peer, classified like a `/d`
//! client; a report is attributed to the nodes of the domain's pool with that address. Reports
//! from clients whose ISP or region is unknown, or about addresses that are not nodes of the
//! domain, are counted as ignored. Rate limited per client address.
//!
//! Signed: `POST /feedback?account=<id>&t=<expiry>&s=<signature>`, the signature Alibaba's
//! (`md5(content-secret-t)`) with the body's SHA-256 (lowercase hex) as the content. Signed
//! reports are weighed per account (`httpdns_live::feedback`), and count against the
//! account's rate limit. With `HTTPDNS_AUTH_REQUIRED` only signed feedback is taken.

use std::net::IpAddr;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use httpdns_core::DomainName;
use httpdns_live::feedback::{Key, Reporter, MAX_CONNECT_MS};
use serde::Deserialize;
use sha2::Digest as _;

use crate::apps::state::AppsState;
use crate::error::ApiError;
use crate::peer::PeerAddr;

#[derive(Debug, Deserialize)]
struct Item {
    ip: serde_json::Value,
    domain: serde_json::Value,
    ok: serde_json::Value,
    #[serde(default)]
    connect_ms: serde_json::Value,
    #[serde(default)]
    network: serde_json::Value,
}

struct Valid {
    ip: IpAddr,
    domain: DomainName,
    ok: bool,
    connect_ms: Option<f64>,
}

fn bad(field: String, message: &str) -> ApiError {
    ApiError::bad_request("InvalidArgument", field, message)
}

fn validate(i: usize, item: &Item) -> Result<Valid, ApiError> {
    let f = |name: &str| format!("reports[{i}].{name}");
    let ip = item
        .ip
        .as_str()
        .and_then(|s| s.parse::<IpAddr>().ok())
        .ok_or_else(|| bad(f("ip"), "must be an IP address"))?
        .to_canonical();
    let domain = item
        .domain
        .as_str()
        .and_then(|s| DomainName::parse(s).ok())
        .ok_or_else(|| bad(f("domain"), "must be a domain name"))?;
    let ok = item.ok.as_bool().ok_or_else(|| bad(f("ok"), "must be true or false"))?;
    let connect_ms = match &item.connect_ms {
        serde_json::Value::Null => None,
        v => Some(
            v.as_f64()
                .filter(|x| x.is_finite() && (0.0..=MAX_CONNECT_MS).contains(x))
                .ok_or_else(|| bad(f("connect_ms"), "must be a number of milliseconds from 0 to 60000"))?,
        ),
    };
    if ok && connect_ms.is_none() {
        return Err(bad(f("connect_ms"), "required when ok is true"));
    }
    match &item.network {
        serde_json::Value::Null => {}
        serde_json::Value::String(n) if n == "wifi" || n == "cellular" => {}
        _ => return Err(bad(f("network"), "must be \"wifi\" or \"cellular\"")),
    }
    Ok(Valid { ip, domain, ok, connect_ms })
}

pub(crate) async fn handle(
    State(app): State<AppsState>,
    PeerAddr(peer): PeerAddr,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    // Counted by the router's `track` layer (route `/feedback`), once.
    match signer(
        &app,
        query.as_deref(),
        &body,
        "this server takes signed feedback only: /feedback?account=&t=&s=",
    )
    .and_then(|account| accept(&app, peer, account, &body))
    {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The account that signed the request (`?account=&t=&s=` over the body's SHA-256), if it
/// is signed; an error when it is signed badly, when the account's rate limit is reached, or
/// when only signed requests are taken and it is not (`unsigned` says how to sign).
pub(crate) fn signer(
    app: &AppsState,
    query: Option<&str>,
    body: &[u8],
    unsigned: &'static str,
) -> Result<Option<u32>, ApiError> {
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.unwrap_or("").as_bytes()).into_owned().collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let Some(account) = get("account") else {
        if app.auth_required {
            return Err(ApiError::forbidden("UnsignedInterfaceDisabled", unsigned));
        }
        return Ok(None);
    };
    let id = httpdns_core::model::parse_account_id(account)
        .map_err(|_| ApiError::forbidden("InvalidAccount", "no such account"))?;
    let snapshot = app.catalog.snapshot();
    let spec = snapshot
        .account(id)
        .filter(|a| a.enabled)
        .ok_or_else(|| ApiError::forbidden("InvalidAccount", "no such account"))?;
    let digest = httpdns_auth::hex(&sha2::Sha256::digest(body));
    httpdns_guard::signature::verify(&spec.secret, &digest, get("t"), get("s"))?;
    if !app.guard.allow_account(id, spec.rate_limit_qps) {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Throttled",
            "the account's rate limit is reached",
        ));
    }
    Ok(Some(id))
}

fn accept(app: &AppsState, peer: IpAddr, account: Option<u32>, body: &[u8]) -> Result<Response, ApiError> {
    if !app.feedback_limits.allow(peer) {
        app.metrics.feedback_reports.with_label_values(&["rate_limited"]).inc();
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Throttled",
            "too many feedback requests; slow down",
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("InvalidBody", "body", format!("not JSON: {e}")))?;
    let list = match value {
        serde_json::Value::Array(a) => a,
        serde_json::Value::Object(mut o) => match o.remove("reports") {
            Some(serde_json::Value::Array(a)) => a,
            _ => {
                return Err(ApiError::bad_request(
                    "InvalidBody",
                    "reports",
                    "expected {\"reports\": [...]} or an array",
                ))
            }
        },
        _ => return Err(ApiError::bad_request("InvalidBody", "body", "expected an array of reports")),
    };
    let max = app.live.settings().feedback_max_batch;
    if list.is_empty() || list.len() > max {
        return Err(ApiError::bad_request(
            "InvalidArgument",
            "reports",
            format!("1 to {max} reports per request"),
        ));
    }
    // Validate everything first: a bad report refuses the batch and nothing is recorded.
    let mut valid = Vec::with_capacity(list.len());
    for (i, raw) in list.into_iter().enumerate() {
        let item: Item = serde_json::from_value(raw)
            .map_err(|e| ApiError::bad_request("InvalidBody", format!("reports[{i}]"), e.to_string()))?;
        valid.push(validate(i, &item)?);
    }

    let published = app.catalog.snapshot();
    let view = httpdns_geo::classify(&published, &app.geo, peer);
    let (mut accepted, mut ignored) = (0usize, 0usize);
    for v in valid {
        let (Some(isp), Some(region)) = (view.isp.clone(), view.region.clone()) else {
            ignored += 1;
            continue;
        };
        let Some(domain) = published.domain(&v.domain) else {
            ignored += 1;
            continue;
        };
        let nodes: Vec<&str> = published
            .nodes()
            .iter()
            .filter(|n| n.spec.ip == v.ip && domain.pools().any(|p| *p == n.spec.pool))
            .map(|n| &*n.id)
            .collect();
        if nodes.is_empty() {
            ignored += 1;
            continue;
        }
        for node in nodes {
            let key = Key { node: node.to_owned(), isp: isp.clone(), region: region.clone() };
            app.live.record(key, Reporter { account, ip: peer }, v.ok, v.connect_ms);
        }
        accepted += 1;
    }
    app.metrics.feedback_reports.with_label_values(&["accepted"]).inc_by(accepted as u64);
    app.metrics.feedback_reports.with_label_values(&["ignored"]).inc_by(ignored as u64);
    Ok((StatusCode::ACCEPTED, axum::Json(serde_json::json!({ "accepted": accepted, "ignored": ignored })))
        .into_response())
}
