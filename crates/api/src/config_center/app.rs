//! What apps call: `POST|GET /app/config-center/module-config` and the public key.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::reply::{
    bad_field, module_param, none_match, not_found, not_modified, respond, Whole, SIGNATURE_HEADER,
};
use crate::apps::state::AppsState;
use crate::error::ApiError;
use crate::metrics::ConfigMethod;
use crate::peer::PeerAddr;

/// A CDN may keep a GET answer this long; past it, it revalidates with the ETag, so a new
/// version reaches apps behind a CDN within seconds.
const GET_CACHE_CONTROL: &str = "public, max-age=10, must-revalidate";

/// The answer to `GET /app/config-center/module-config?module=...`, counted.
pub(crate) fn answer_get(app: &AppsState, query: Option<&str>, headers: &HeaderMap) -> Whole {
    let module = crate::form::query(query).find(|(k, _)| k == "module").map(|(_, v)| v);
    let resp = match module_param(module.as_deref()) {
        Err(e) => e.into_whole(),
        Ok(module) => match app.config.get(module) {
            None => not_found(module).into_whole(),
            Some(p) if none_match(headers, &p.etag) => not_modified(&p, GET_CACHE_CONTROL),
            Some(p) => respond(&p, p.body.clone(), p.signature.clone(), GET_CACHE_CONTROL),
        },
    };
    app.metrics.config_request(ConfigMethod::Get, resp.status());
    resp
}

pub(crate) async fn post(State(app): State<AppsState>, PeerAddr(peer): PeerAddr, body: Bytes) -> Response {
    let resp = match post_inner(&app, peer, &body).await {
        Ok(r) => r,
        Err(e) => e.into_whole(),
    };
    app.metrics.config_request(ConfigMethod::Post, resp.status());
    resp.map(axum::body::Body::from)
}

async fn post_inner(app: &AppsState, peer: std::net::IpAddr, body: &[u8]) -> Result<Whole, ApiError> {
    let req = httpdns_center::device::parse(body).map_err(bad_field)?;
    let p =
        app.config.at_least(&req.module, req.config_version).await.ok_or_else(|| not_found(&req.module))?;
    let r = httpdns_center::device::render(&app.config, &p, &req, || {
        httpdns_geo::classify(&app.catalog.snapshot(), &app.geo, peer)
    });
    // Personal: never kept by a cache in between.
    Ok(respond(&r.published, r.body, r.signature, "no-store"))
}

pub(crate) async fn public_key(State(app): State<AppsState>) -> Response {
    let body = serde_json::json!({
        "algorithm": "ed25519",
        "encoding": "base64",
        "public_key": app.config.signer().public_key_base64(),
        "signature_header": SIGNATURE_HEADER,
    });
    let mut resp = axum::Json(body).into_response();
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600"));
    resp
}
