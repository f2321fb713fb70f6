//! The API listener's [`Shortcut`]: `GET /d` and the config center's `GET`, answered before
//! the router through the same functions as their routed handlers (which still serve `POST`,
//! `HEAD` and any listener without the shortcut), so both give the same bytes.

use std::time::Instant;

use axum::http::Method;
use httpdns_net::http::{Answer, Head, Shortcut};

use crate::apps::state::AppsState;
use crate::dnspod::Now;
use crate::httpdns::state::HttpdnsState;
use crate::metrics::Route;

/// See the module documentation: the `/d` answer over the httpdns product's state, the config
/// GET over the app routes'.
#[derive(Debug, Clone)]
pub struct HotRoutes {
    pub answers: HttpdnsState,
    pub apps: AppsState,
}

impl Shortcut for HotRoutes {
    fn answer(&self, head: &Head<'_>) -> Option<Answer> {
        // HEAD goes to the router, which strips the body and keeps its length.
        if head.method != Method::GET {
            return None;
        }
        match head.uri.path() {
            "/d" => Some(d(&self.answers, head)),
            crate::config_center::MODULE_CONFIG_PATH => {
                Some(crate::config_center::push::answer(&self.apps, head.uri.query(), head.headers))
            }
            _ => None,
        }
    }
}

fn d(app: &HttpdnsState, head: &Head<'_>) -> Answer {
    let started = Instant::now();
    let peer = app.guard.client(head.peer.ip().to_canonical(), head.headers);
    let secure = app.guard.secure(head.secure.is_some(), Some(head.peer), head.headers);
    let counted = |app: &HttpdnsState, resp: crate::dnspod::Whole| {
        app.metrics.http_answer_request(Route::D, resp.status());
        resp
    };
    match crate::dnspod::prepare(app, peer, secure, head.uri.query(), &[]) {
        Err(e) => Answer::Ready(counted(app, e.into_whole())),
        Ok(p) => match p.answer_now(app, started) {
            Now::Answered(resp) => Answer::Ready(counted(app, resp)),
            Now::Upstream(p) => {
                let app = app.clone();
                Answer::Later(Box::pin(async move {
                    let resp = p.answer_later(&app, started).await;
                    counted(&app, resp)
                }))
            }
        },
    }
}
