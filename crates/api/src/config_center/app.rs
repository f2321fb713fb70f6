//! What apps call: `POST|GET /app/config-center/module-config` and the public key.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::cache::Published;
use crate::error::ApiError;
use crate::metrics::ConfigMethod;
use crate::state::{AppState, PeerAddr};

/// Header carrying the base64 Ed25519 signature of the exact response body.
pub const SIGNATURE_HEADER: &str = "x-config-signature";
/// Header carrying the served `configVersion`, so a client can compare without parsing.
pub const VERSION_HEADER: &str = "x-config-version";

/// A CDN may keep a GET answer this long; past it, it revalidates with the ETag, so a new
/// version reaches apps behind a CDN within seconds.
const GET_CACHE_CONTROL: &str = "public, max-age=10, must-revalidate";

pub(crate) fn module_param(module: Option<&str>) -> Result<&str, ApiError> {
    let m = module
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("MissingArgument", "module", "missing module"))?;
    httpdns_config::validate_module(m)
        .map_err(|e| ApiError::bad_request("InvalidArgument", "module", e.message))?;
    Ok(m)
}

pub(crate) fn not_found(module: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "ModuleNotFound", format!("no config module {module:?}"))
        .with_field("module")
}

/// A response as one buffer.
pub(crate) type Whole = Response<Bytes>;

pub(crate) fn respond(
    p: &Published,
    body: Bytes,
    signature: HeaderValue,
    cache_control: &'static str,
) -> Whole {
    let mut resp = Whole::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::ETAG, p.etag.clone());
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache_control));
    h.insert(SIGNATURE_HEADER, signature);
    h.insert(VERSION_HEADER, HeaderValue::from(p.version));
    h.insert(super::push::OFFER_HEADER, super::push::offer());
    resp
}

/// `304 Not Modified` for the served version `p`.
pub(crate) fn not_modified(p: &Published, cache_control: &'static str) -> Whole {
    let mut resp = Whole::new(Bytes::new());
    *resp.status_mut() = StatusCode::NOT_MODIFIED;
    let h = resp.headers_mut();
    h.insert(header::ETAG, p.etag.clone());
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache_control));
    h.insert(VERSION_HEADER, HeaderValue::from(p.version));
    h.insert(super::push::OFFER_HEADER, super::push::offer());
    resp
}

/// Weak comparison of `If-None-Match` against a strong ETag (RFC 9110 §13.1.2).
pub(crate) fn none_match(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let want = etag.as_bytes();
    headers.get_all(header::IF_NONE_MATCH).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .map(str::trim)
                .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t).as_bytes() == want)
        })
    })
}

// Takes the raw request: the conditional GET is the hot path, and extractors would copy the
// headers and the query. The listener's shortcut (`crate::shortcut`) answers a GET through
// [`answer_get`] before the router; this handler serves HEAD, and GET without the shortcut.
pub(crate) async fn get(State(app): State<AppState>, request: Request) -> Response {
    let resp = match super::push::answer(&app, request.uri().query(), request.headers()) {
        httpdns_net::http::Answer::Ready(r) => r,
        httpdns_net::http::Answer::Later(wait) => wait.await,
    };
    resp.map(axum::body::Body::from)
}

/// The answer to `GET /app/config-center/module-config?module=...`, counted.
pub(crate) fn answer_get(app: &AppState, query: Option<&str>, headers: &HeaderMap) -> Whole {
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

pub(crate) async fn post(State(app): State<AppState>, PeerAddr(peer): PeerAddr, body: Bytes) -> Response {
    let resp = match post_inner(&app, peer, &body).await {
        Ok(r) => r,
        Err(e) => e.into_whole(),
    };
    app.metrics.config_request(ConfigMethod::Post, resp.status());
    resp.map(axum::body::Body::from)
}

async fn post_inner(app: &AppState, peer: std::net::IpAddr, body: &[u8]) -> Result<Whole, ApiError> {
    let req = super::device::parse(body)?;
    let p =
        app.config.at_least(&req.module, req.config_version).await.ok_or_else(|| not_found(&req.module))?;
    Ok(super::device::answer(app, &p, &req, peer))
}

pub(crate) async fn public_key(State(app): State<AppState>) -> Response {
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
