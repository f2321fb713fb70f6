//! The config center's answers as HTTP: the module parameter, the headers every answer
//! carries (ETag, signature, version, the long-poll offer), `304` and `404`. Shared by the
//! plain GET and POST (`app`) and the long poll (`push`).

use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use httpdns_center::device::BadField;
use httpdns_center::Published;

use crate::error::ApiError;

/// On every config GET answer: this server holds `wait=` requests, up to this many seconds.
/// Clients use the long poll only where it is offered and poll otherwise.
pub(crate) const OFFER_HEADER: &str = "x-config-long-poll";

pub(crate) fn offer() -> HeaderValue {
    HeaderValue::from_static("60")
}

/// Header carrying the base64 Ed25519 signature of the exact response body.
pub(crate) const SIGNATURE_HEADER: &str = "x-config-signature";
/// Header carrying the served `configVersion`, so a client can compare without parsing.
pub(crate) const VERSION_HEADER: &str = "x-config-version";

/// The `module` a request names, or the 400 naming it.
pub(crate) fn module_param(module: Option<&str>) -> Result<&str, ApiError> {
    httpdns_center::device::module(module).map_err(bad_field)
}

/// A field the center refused, as this layer's 400.
pub(crate) fn bad_field(e: BadField) -> ApiError {
    ApiError::bad_request(e.code, e.field, e.message)
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
    h.insert(OFFER_HEADER, offer());
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
    h.insert(OFFER_HEADER, offer());
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
