//! The mirror listener: `GET`/`HEAD /<path_prefix>/<key>`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::StreamExt;
use httpdns_image::ImageProcess;
use object_store::path::Path;

use crate::conditional::{decide, Decision, Preconditions};
use crate::copy_headers::{value, CopyHeaders};
use crate::error::Failure;
use crate::fill::{self, FillError, FillHead, FillState};
use crate::key::ObjectKey;
use crate::metrics::Outcome;
use crate::objects::{store_path, Found, StoredMeta};
use crate::origin::{Ask, FetchError, Validators};
use crate::upstream::PassedHeaders;
use crate::{Mirror, RuleRuntime};

/// What the mirror listeners serve: [`router`] behind [`HotHits`].
pub fn app(mirror: Arc<Mirror>) -> httpdns_net::http::App {
    httpdns_net::http::App { router: router(mirror.clone()), shortcut: Some(Arc::new(HotHits(mirror))) }
}

/// The mirror listener's router: every path goes to the gateway.
pub fn router(mirror: Arc<Mirror>) -> Router {
    Router::new().fallback(handle).with_state(mirror)
}

/// A request after routing and validation.
pub(crate) struct Request {
    pub(crate) runtime: Arc<RuleRuntime>,
    /// Prefix and key segments: the store namespace of this URL.
    pub(crate) segments: Vec<String>,
    /// The origin path with forwarded query, encoded, no leading `/`.
    pub(crate) origin_path: String,
    /// Canonical forwarded query, when the rule lets the query select the object.
    pub(crate) query_key: Option<String>,
    process: Option<ImageProcess>,
    /// The answer depends on `Accept` (`format,auto`): sent with `Vary: Accept`.
    vary_accept: bool,
    pub(crate) head_only: bool,
    /// The connection's handle: a body streamed from a file or the store holds a unit on it.
    pub(crate) conn: Option<httpdns_net::ConnHandle>,
}

async fn handle(State(mirror): State<Arc<Mirror>>, request: axum::extract::Request) -> Response {
    let resp = serve_request(&mirror, request).await;
    // Every failure, whatever path produced it, is counted here by its side.
    if let Some(side) = resp.extensions().get::<crate::error::Side>() {
        mirror.metrics.error(*side);
    }
    resp
}

// The whole request, taken apart: the `Uri` and `HeaderMap` extractors would clone both.
async fn serve_request(mirror: &Arc<Mirror>, request: axum::extract::Request) -> Response {
    let (mut parts, _) = request.into_parts();
    let conn = parts.extensions.remove::<httpdns_net::ConnHandle>();
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    let head_only = match method {
        Method::GET => false,
        Method::HEAD => true,
        _ => {
            let mut r = error(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                None,
                "the mirror serves GET and HEAD",
            );
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
    };
    let req = match parse(mirror, &uri, head_only, headers.get(header::ACCEPT)) {
        Ok(r) => Request { conn, ..r },
        Err(resp) => return *resp,
    };
    let (outcome, mut resp) = match &req.process {
        Some(ops) => crate::variant::serve(mirror, &req, ops, &headers).await,
        None if !req.runtime.rule.spec.store => crate::proxy::serve(mirror, &req, &headers).await,
        None => original(mirror, &req, &headers).await,
    };
    req.runtime.series.request(outcome);
    if req.vary_accept {
        resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
    }
    resp
}

/// [`parse`] of a path given to the admin API (prefetch): why it is not one the gateway serves.
pub(crate) fn parse_path(mirror: &Mirror, uri: &Uri) -> Result<Request, String> {
    parse(mirror, uri, false, None).map_err(|resp| match resp.status() {
        StatusCode::NOT_FOUND => "no mirror rule matches this path".to_owned(),
        _ => "not a valid mirror path (or query)".to_owned(),
    })
}

fn parse(
    mirror: &Mirror,
    uri: &Uri,
    head_only: bool,
    accept: Option<&HeaderValue>,
) -> Result<Request, Box<Response>> {
    let bad = |field: &str, msg: String| {
        Box::new(error(StatusCode::BAD_REQUEST, "InvalidArgument", Some(field), &msg))
    };
    let Some((runtime, rest)) = mirror.route(uri.path()) else {
        return Err(Box::new(error(
            StatusCode::NOT_FOUND,
            "NoSuchRule",
            None,
            "no mirror rule matches this path",
        )));
    };
    let key = ObjectKey::parse(&rest).map_err(|e| bad("path", e.0.to_owned()))?;
    let rule = &runtime.rule;
    let mut process = None;
    let mut vary_accept = false;
    let mut forwarded: Vec<(String, String)> = Vec::new();
    for (k, v) in form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        if k == "x-oss-process" {
            if process.is_some() {
                return Err(bad("x-oss-process", "given more than once".into()));
            }
            if rule.spec.image_process && !rule.spec.store {
                return Err(bad(
                    "x-oss-process",
                    "this rule proxies without keeping copies; variants need one".into(),
                ));
            }
            if rule.spec.image_process {
                let webp = accept.and_then(|a| a.to_str().ok()).is_some_and(crate::negotiate::accepts_webp);
                let resolved = crate::negotiate::resolve(&v, webp);
                vary_accept |= resolved.is_some();
                match resolved.as_deref() {
                    // `image/format,auto` for a client without WebP: the original as it is.
                    Some(chain) if chain.eq_ignore_ascii_case("image") => {}
                    chain => {
                        let ops = mirror
                            .images
                            .process(chain.unwrap_or(&v))
                            .map_err(|e| bad(&e.param, e.to_string()))?;
                        process = Some(ops);
                    }
                }
            }
        } else if rule.spec.pass_query
            && (rule.query_params.is_empty() || rule.query_params.contains(k.as_ref()))
        {
            forwarded.push((k.into_owned(), v.into_owned()));
        }
    }
    forwarded.sort();
    let query_key = (!forwarded.is_empty())
        .then(|| form_urlencoded::Serializer::new(String::new()).extend_pairs(forwarded.iter()).finish());
    let segments: Vec<String> = rule.prefix.iter().chain(key.segments()).cloned().collect();
    let mut origin_path = String::new();
    for seg in &rule.replace_prefix {
        origin_path.push_str(seg);
        origin_path.push('/');
    }
    origin_path.push_str(&key.encoded());
    if let Some(q) = &query_key {
        origin_path.push('?');
        origin_path.push_str(q);
    }
    Ok(Request { runtime, segments, origin_path, query_key, process, vary_accept, head_only, conn: None })
}

impl Request {
    /// One more unit on the connection for a body streamed from a file or the store, which
    /// holds a descriptor for as long as the client takes (none outside an HTTP listener, as in
    /// tests of the router alone).
    fn hold(&self) -> Result<Option<httpdns_net::Held>, httpdns_net::Refused> {
        self.conn.as_ref().map(httpdns_net::ConnHandle::hold_descriptor).transpose()
    }

    pub(crate) fn original_location(&self) -> Path {
        let segs = self.segments.iter().map(String::as_str);
        match &self.query_key {
            Some(q) => store_path("q", segs.chain(std::iter::once(q.as_str()))),
            None => store_path("o", segs),
        }
    }
}

/// Serves an original: the stored copy, or a fill.
async fn original(mirror: &Arc<Mirror>, req: &Request, headers: &HeaderMap) -> (Outcome, Response) {
    let location = req.original_location();
    let rule = &req.runtime.rule;
    let found = match mirror.objects.find(&location).await {
        Ok(f) => f,
        Err(e) => return Failure::store(e).served(),
    };
    if let Some(found) = found {
        if let Some(ttl) = rule.spec.ttl_s {
            let age_ms =
                httpdns_core::clock::unix_ms().saturating_sub(mirror.validated_at(&location, &found.meta));
            if age_ms > ttl * 1000 {
                let validators = Validators {
                    etag: found.meta.origin_etag.clone(),
                    last_modified: found.meta.origin_last_modified.clone(),
                };
                let ask = Ask {
                    validators: Some(validators),
                    passed: rule.spec.headers.passed(headers),
                    ..Ask::default()
                };
                let started =
                    fill::join_or_start(mirror, &req.runtime, &location, req.origin_path.clone(), ask);
                if age_ms <= (ttl + rule.spec.stale_if_error_s) * 1000 {
                    // RFC 5861: serve the stale copy while the revalidation runs.
                    let mut resp = serve_found(mirror, &found, req, headers, "HIT").await;
                    resp.headers_mut().insert("x-cache-stale", HeaderValue::from_static("1"));
                    return (Outcome::Stale, resp);
                }
                // Too old to serve without asking: wait for the origin.
                let fill = match started {
                    Ok((f, _)) => f,
                    Err(e) => return Failure::from(&e).served(),
                };
                return match fill.finished().await {
                    FillState::NotModified => {
                        (Outcome::Hit, serve_found(mirror, &found, req, headers, "HIT").await)
                    }
                    FillState::Done { head, meta } => {
                        (Outcome::Miss, serve_fill(&fill, &head, Some(&meta), req, headers, "MISS"))
                    }
                    FillState::Failed(e) => Failure::from(&e).served(),
                    _ => Failure::from(&FillError::Ended).served(),
                };
            }
        }
        return (Outcome::Hit, serve_found(mirror, &found, req, headers, "HIT").await);
    }
    if mirror.known_missing(&location) {
        return Failure::from(&FillError::Fetch(FetchError::NotFound)).served();
    }
    if rule.spec.slice_bytes.is_some() {
        return crate::slice::serve(mirror, req, headers, &location).await;
    }
    let ask = Ask { passed: rule.spec.headers.passed(headers), ..Ask::default() };
    let (fill, started) =
        match fill::join_or_start(mirror, &req.runtime, &location, req.origin_path.clone(), ask) {
            Ok(f) => f,
            Err(e) => return Failure::from(&e).served(),
        };
    let outcome = if started { Outcome::Miss } else { Outcome::Coalesced };
    let mut resp = match fill.head().await {
        FillState::Streaming { head, .. } => serve_fill(&fill, &head, None, req, headers, "MISS"),
        FillState::Done { head, meta } => serve_fill(&fill, &head, Some(&meta), req, headers, "MISS"),
        FillState::Failed(e) => return Failure::from(&e).served(),
        FillState::Starting | FillState::NotModified => return Failure::from(&FillError::Ended).served(),
    };
    if !started {
        resp.headers_mut().insert("x-cache-coalesced", HeaderValue::from_static("1"));
    }
    (outcome, resp)
}

/// The response for a stored copy, honouring conditionals and ranges.
pub(crate) async fn serve_found(
    mirror: &Arc<Mirror>,
    found: &Found,
    req: &Request,
    headers: &HeaderMap,
    cache: &'static str,
) -> Response {
    let meta = &found.meta;
    let decision = decide(&Preconditions::of(headers), &meta.etag, meta.last_modified(), meta.length);
    let (status, start, end) = match decision {
        Decision::NotModified => {
            let mut r = StatusCode::NOT_MODIFIED.into_response();
            found.headers.validators(r.headers_mut(), cache);
            return r;
        }
        Decision::Unsatisfiable => {
            let mut r = unsatisfiable(meta.length);
            found.headers.validators(r.headers_mut(), cache);
            return r;
        }
        Decision::Full => (StatusCode::OK, 0, meta.length),
        Decision::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, start, end + 1),
    };
    let body = if req.head_only || start == end {
        Body::empty()
    } else if let Some(small) = mirror.objects.read_small(found, start, end).await {
        match small {
            Ok(bytes) => {
                req.runtime.series.served(bytes.len() as u64);
                Body::from(bytes)
            }
            Err(e) => return Failure::store(e).response(),
        }
    } else {
        // A body in memory holds nothing of the connection's; one read from a file or the
        // store holds that descriptor for as long as the client takes.
        let held = match found.memory_slice(0, 0) {
            Some(_) => None,
            None => match req.hold() {
                Ok(h) => h,
                Err(why) => return Failure::too_many(why).response(),
            },
        };
        counted_body(&req.runtime.series, mirror.objects.read(found, start, end), held)
    };
    found_response(found, status, start, end, cache, body)
}

/// A stored copy's `200` or `206` with `body` (bytes `start..end` of it).
fn found_response<B>(
    found: &Found,
    status: StatusCode,
    start: u64,
    end: u64,
    cache: &'static str,
    body: B,
) -> Response<B> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let hm = r.headers_mut();
    if status == StatusCode::PARTIAL_CONTENT {
        hm.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
        hm.insert(
            header::CONTENT_RANGE,
            value(&format!("bytes {}-{}/{}", start, end - 1, found.meta.length)),
        );
    } else {
        hm.insert(header::CONTENT_LENGTH, found.headers.full_length());
    }
    found.headers.content(hm);
    found.headers.validators(hm, cache);
    r
}

/// The listener's [`Shortcut`](httpdns_net::http::Shortcut): a `GET` of an original whose body
/// is in memory and current (one `stat`, as [`Objects::find`](crate::objects::Objects::find)
/// makes), answered before the router. Everything else (a miss, a copy past its TTL, a body
/// not in memory, an image variant, `HEAD`, a bad path, a range that cannot be met) goes to
/// the router, which answers it as it always did.
#[derive(Debug)]
pub struct HotHits(pub Arc<Mirror>);

impl httpdns_net::http::Shortcut for HotHits {
    fn answer(&self, head: &httpdns_net::http::Head<'_>) -> Option<httpdns_net::http::Answer> {
        if head.method != Method::GET {
            return None;
        }
        let mirror = &self.0;
        let req = parse(mirror, head.uri, false, None).ok()?;
        // A proxy rule never answers from the store, even a copy kept before it was one.
        if req.process.is_some() || req.vary_accept || !req.runtime.rule.spec.store {
            return None;
        }
        let location = req.original_location();
        let found = mirror.objects.find_in_memory(&location)?;
        if let Some(ttl) = req.runtime.rule.spec.ttl_s {
            let age_ms =
                httpdns_core::clock::unix_ms().saturating_sub(mirror.validated_at(&location, &found.meta));
            if age_ms > ttl * 1000 {
                return None;
            }
        }
        let meta = &found.meta;
        let resp =
            match decide(&Preconditions::of(head.headers), &meta.etag, meta.last_modified(), meta.length) {
                Decision::NotModified => {
                    let mut r = Response::new(bytes::Bytes::new());
                    *r.status_mut() = StatusCode::NOT_MODIFIED;
                    found.headers.validators(r.headers_mut(), "HIT");
                    r
                }
                Decision::Unsatisfiable => return None,
                Decision::Full => {
                    let body = found.memory_slice(0, meta.length)?;
                    req.runtime.series.served(body.len() as u64);
                    found_response(&found, StatusCode::OK, 0, meta.length, "HIT", body)
                }
                Decision::Partial { start, end } => {
                    let body = found.memory_slice(start, end + 1)?;
                    req.runtime.series.served(body.len() as u64);
                    found_response(&found, StatusCode::PARTIAL_CONTENT, start, end + 1, "HIT", body)
                }
            };
        req.runtime.series.request(Outcome::Hit);
        Some(httpdns_net::http::Answer::Ready(resp))
    }
}

/// The response of a client attached to a fill, streaming as the body arrives.
fn serve_fill(
    fill: &fill::Fill,
    head: &FillHead,
    done: Option<&StoredMeta>,
    req: &Request,
    headers: &HeaderMap,
    cache: &'static str,
) -> Response {
    let length = done.map(|m| m.length).or(head.content_length);
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    // A range is answered from the fill only when the length is known; otherwise the whole
    // object (RFC 9110 lets a server ignore Range).
    let decision = match (range, length) {
        (Some(r), Some(len)) if headers.get(header::IF_RANGE).is_none() => {
            crate::conditional::parse_range(r, len)
        }
        _ => Decision::Full,
    };
    let (status, start, end) = match decision {
        Decision::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, start, Some(end + 1)),
        Decision::Unsatisfiable => return unsatisfiable(length.unwrap_or(0)),
        _ => (StatusCode::OK, 0, length),
    };
    let body = if req.head_only {
        Body::empty()
    } else {
        // Every reader of a fill reads its one staging file: no descriptor of its own.
        counted_body(&req.runtime.series, fill.stream(start, end), None)
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let hm = r.headers_mut();
    if let Some(end) = end {
        hm.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    }
    if let (StatusCode::PARTIAL_CONTENT, Some(end), Some(len)) = (status, end, length) {
        hm.insert(header::CONTENT_RANGE, value(&format!("bytes {}-{}/{}", start, end - 1, len)));
    }
    hm.insert(header::CONTENT_TYPE, value(&head.content_type));
    replay(hm, &head.headers);
    if let Some(lm) = &head.origin_last_modified {
        if let Ok(v) = HeaderValue::from_str(lm) {
            hm.insert(header::LAST_MODIFIED, v);
        }
    }
    if let Some(meta) = done {
        hm.insert(header::ETAG, value(&meta.etag));
    }
    hm.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    hm.insert("x-cache", HeaderValue::from_static(cache));
    r
}

pub(crate) fn full_response(
    meta: &StoredMeta,
    head_only: bool,
    body: bytes::Bytes,
    cache: &'static str,
) -> Response {
    let mut r = Response::new(if head_only { Body::empty() } else { Body::from(body) });
    let hm = r.headers_mut();
    let copy = CopyHeaders::new(meta);
    hm.insert(header::CONTENT_LENGTH, copy.full_length());
    copy.content(hm);
    copy.validators(hm, cache);
    r
}

/// The origin headers kept with a copy, as the origin sent them.
fn replay(hm: &mut HeaderMap, headers: &[(String, String)]) {
    for (k, v) in crate::copy_headers::replayed(headers) {
        hm.insert(k, v);
    }
}

/// 416 with `Content-Range: bytes */len`.
fn unsatisfiable(len: u64) -> Response {
    let mut r = error(
        StatusCode::RANGE_NOT_SATISFIABLE,
        "InvalidRange",
        Some("range"),
        "the range is outside the object",
    );
    r.headers_mut().insert(header::CONTENT_RANGE, value(&format!("bytes */{len}")));
    r
}

/// A streamed body whose bytes are counted per rule as they leave.
fn counted_body(
    series: &crate::metrics::RuleSeries,
    stream: futures_util::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>,
    held: Option<httpdns_net::Held>,
) -> Body {
    let series = series.clone();
    Body::from_stream(stream.inspect(move |chunk| {
        // The unit lives as long as the stream: it counts the file or socket the stream reads.
        let _ = &held;
        if let Ok(c) = chunk {
            series.served(c.len() as u64);
        }
    }))
}

/// A client error response (see [`Failure`] for the rest).
pub(crate) fn error(status: StatusCode, code: &'static str, field: Option<&str>, message: &str) -> Response {
    Failure::client(status, code, field, message.to_owned()).response()
}
