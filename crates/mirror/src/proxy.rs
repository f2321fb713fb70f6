//! Rules with `store: false`: every request goes to the origin and its answer is streamed back,
//! never kept (OSS's `MirrorProxyPass`). The client's `Range` and conditionals go with it, so
//! the origin answers `206`, `304`, `412` or `416` itself, with its own validators.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;

use crate::error::Failure;
use crate::fill::{FillError, STORED_HEADERS};
use crate::metrics::Outcome;
use crate::origin::{Ask, FetchError};
use crate::serve::Request;
use crate::upstream::PassedHeaders;
use crate::Mirror;

/// Client headers a proxy passes besides the rule's `headers`.
const PASSED: [HeaderName; 6] = [
    header::RANGE,
    header::IF_RANGE,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
];

/// Origin response headers a proxy passes back, besides those a copy keeps.
const ANSWERED: [HeaderName; 7] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_RANGE,
    header::ETAG,
    header::LAST_MODIFIED,
    header::ACCEPT_RANGES,
    header::VARY,
];

pub(crate) async fn serve(mirror: &Arc<Mirror>, req: &Request, headers: &HeaderMap) -> (Outcome, Response) {
    let rule = &req.runtime.rule;
    let mut passed = rule.spec.headers.passed(headers);
    for name in PASSED {
        for v in headers.get_all(&name) {
            passed.append(name.clone(), v.clone());
        }
    }
    let metrics = &mirror.metrics;
    metrics.origin_fetch(rule);
    let ask = Ask { passed, proxy: true, head: req.head_only, ..Ask::default() };
    let response = match req.runtime.client.fetch(rule, &req.origin_path, &ask).await {
        Ok(f) => f.response,
        Err(e) => {
            metrics.origin_status(rule, e.class());
            return Failure::from(&FillError::Fetch(e)).served();
        }
    };
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    metrics.origin_status(
        rule,
        if status.is_redirection() {
            "3xx"
        } else if status.is_success() {
            "2xx"
        } else {
            "4xx"
        },
    );
    let mut out = HeaderMap::new();
    for name in ANSWERED.iter().chain(
        STORED_HEADERS
            .iter()
            .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok())
            .collect::<Vec<_>>()
            .iter(),
    ) {
        if let Some(v) =
            response.headers().get(name.as_str()).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
        {
            out.insert(name.clone(), v);
        }
    }
    out.insert("x-cache", HeaderValue::from_static("MISS"));
    let body =
        if req.head_only || matches!(status, StatusCode::NOT_MODIFIED | StatusCode::PRECONDITION_FAILED) {
            Body::empty()
        } else {
            let idle = rule.idle_timeout();
            let series = req.runtime.series.clone();
            let rule_c = rule.clone();
            let metrics = metrics.clone();
            let stream = futures_util::stream::unfold(Some(response), move |state| async move {
                let mut response = state?;
                match tokio::time::timeout(idle, response.chunk()).await {
                    Ok(Ok(Some(chunk))) => Some((Ok(chunk), Some(response))),
                    Ok(Ok(None)) => None,
                    Ok(Err(e)) => Some((Err(std::io::Error::other(e)), None)),
                    Err(_) => Some((Err(std::io::Error::other(FetchError::Timeout)), None)),
                }
            })
            .inspect(move |chunk| {
                if let Ok(c) = chunk {
                    series.served(c.len() as u64);
                    metrics.origin_bytes(&rule_c, c.len() as u64);
                }
            });
            Body::from_stream(stream)
        };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = out;
    (Outcome::Miss, resp)
}
