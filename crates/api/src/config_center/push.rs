//! The push: `GET /app/config-center/module-config?module=&wait=N` with `If-None-Match` is a
//! long poll. It is answered as soon as this replica serves a version newer than every one the
//! request names, else `304` after `N` seconds (at most [`MAX_WAIT_S`]). The wait itself is
//! `httpdns_center::push`'s (the cache's one `watch` channel); this is its HTTP side, and the
//! routed GET, plain or held.
//!
//! Unlike a plain conditional GET (which answers `200` whenever the tag differs), a long poll
//! holds while the request names a version *at least* as new as the served one.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use httpdns_center::push::{poll, Poll, MAX_WAIT_S};
use httpdns_net::http::Answer;

use super::reply::{module_param, not_found, not_modified, respond, Whole};
use crate::apps::state::AppsState;
use crate::error::ApiError;
use crate::metrics::ConfigMethod;

/// Answers to a long poll must not be kept by a cache in between: each is one device's wait.
const WAIT_CACHE_CONTROL: &str = "no-store";

// Takes the raw request: the conditional GET is the hot path, and extractors would copy the
// headers and the query. The listener's shortcut (`crate::shortcut`) answers a GET through
// [`super::app::answer_get`] before the router; this handler serves HEAD, and GET without the shortcut.
pub(crate) async fn get(State(app): State<AppsState>, request: Request) -> Response {
    let resp = match answer(&app, request.uri().query(), request.headers()) {
        Answer::Ready(r) => r,
        Answer::Later(wait) => wait.await,
    };
    resp.map(axum::body::Body::from)
}

/// `wait=` in seconds: absent or `0` is a plain conditional GET.
fn wait_param(raw: Option<&str>) -> Result<u64, ApiError> {
    match raw {
        None | Some("") => Ok(0),
        Some(s) => s.parse::<u64>().ok().filter(|n| *n <= MAX_WAIT_S).ok_or_else(|| {
            ApiError::bad_request(
                "InvalidArgument",
                "wait",
                format!("wait must be 0 to {MAX_WAIT_S} seconds"),
            )
        }),
    }
}

/// The newest version `If-None-Match` names (strong or weak tags of digits); `None` when it
/// names none (absent, `*`, or other tags): then there is nothing to wait past.
fn held_version(headers: &HeaderMap) -> Option<i64> {
    headers
        .get_all(http::header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|t| {
            let t = t.trim();
            let t = t.strip_prefix("W/").unwrap_or(t);
            t.strip_prefix('"')?.strip_suffix('"')?.parse::<i64>().ok()
        })
        .max()
}

/// Counts a held request for as long as it is held, however it ends (a client hanging up
/// drops the future).
struct Held(AppsState);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.metrics.config_waiters.dec();
    }
}

/// The answer to a config GET: at once (no `wait=`, nothing to wait for, or already newer), or
/// later. Counted either way.
pub(crate) fn answer(app: &AppsState, query: Option<&str>, headers: &HeaderMap) -> Answer {
    // The hot conditional GET (no `wait`) goes straight on, without a second parse of its query.
    if !query.is_some_and(|q| q.contains("wait")) {
        return Answer::Ready(super::app::answer_get(app, query, headers));
    }
    let mut module = None;
    let mut wait = None;
    for (k, v) in crate::form::query(query) {
        match &*k {
            "module" if module.is_none() => module = Some(v),
            "wait" if wait.is_none() => wait = Some(v),
            _ => {}
        }
    }
    let wait = match wait_param(wait.as_deref()) {
        Ok(w) => w,
        Err(e) => return Answer::Ready(counted(app, e.into_whole())),
    };
    let held = held_version(headers);
    let (Some(held), true) = (held, wait > 0) else {
        return Answer::Ready(super::app::answer_get(app, query, headers));
    };
    let module = match module_param(module.as_deref()) {
        Ok(m) => m.to_owned(),
        Err(e) => return Answer::Ready(counted(app, e.into_whole())),
    };
    let waiter = match poll(&app.config, &module, held) {
        Poll::Missing => return Answer::Ready(counted(app, not_found(&module).into_whole())),
        Poll::Newer(p) => {
            return Answer::Ready(counted(
                app,
                respond(&p, p.body.clone(), p.signature.clone(), WAIT_CACHE_CONTROL),
            ))
        }
        Poll::Closing(p) => return Answer::Ready(counted(app, not_modified(&p, WAIT_CACHE_CONTROL))),
        Poll::Wait(waiter) => waiter,
    };
    app.metrics.config_waiters.inc();
    let held_guard = Held(app.clone());
    let app = app.clone();
    Answer::Later(Box::pin(async move {
        let _held = held_guard;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
        if let Some(p) = waiter.newer(deadline).await {
            let resp = respond(&p, p.body.clone(), p.signature.clone(), WAIT_CACHE_CONTROL);
            return counted(&app, resp);
        }
        let resp = match app.config.get(&module) {
            Some(p) => not_modified(&p, WAIT_CACHE_CONTROL),
            None => not_found(&module).into_whole(),
        };
        counted(&app, resp)
    }))
}

fn counted(app: &AppsState, resp: Whole) -> Whole {
    app.metrics.config_request(ConfigMethod::Get, resp.status());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, StatusCode};

    #[test]
    fn the_held_version_is_the_newest_tag_named() {
        let mut h = HeaderMap::new();
        assert_eq!(held_version(&h), None);
        h.append(http::header::IF_NONE_MATCH, HeaderValue::from_static("\"3\", W/\"7\""));
        h.append(http::header::IF_NONE_MATCH, HeaderValue::from_static("\"5\", *, \"x\""));
        assert_eq!(held_version(&h), Some(7));
        assert_eq!(wait_param(Some("60")).unwrap(), 60);
        assert_eq!(wait_param(None).unwrap(), 0);
        let e = wait_param(Some("61")).unwrap_err();
        assert_eq!((e.status, e.field.as_deref()), (StatusCode::BAD_REQUEST, Some("wait")));
        assert!(wait_param(Some("-1")).is_err());
    }
}
