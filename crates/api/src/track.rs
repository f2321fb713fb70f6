//! The `track` layer of the admin, console, ops and app telemetry routes: each request counted
//! by route (a fixed set, never the raw path) and status class, inside its `request` span with
//! an `X-Request-Id`. The answer routes and the config center's count their own requests: a
//! generic middleware boxes and clones the inner service per request, a cost the hot paths do
//! not pay.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;

use crate::metrics::{Metrics, Route};

/// `router` with every route (and its fallback) tracked.
pub(crate) fn layer<S: Clone + Send + Sync + 'static>(router: Router<S>, metrics: Arc<Metrics>) -> Router<S> {
    router.layer(middleware::from_fn_with_state(metrics, track))
}

async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = Route::of_path(req.uri().path());
    let resp = crate::request_id::run(req, next).await;
    metrics.http_request(route, resp.status(), started.elapsed());
    resp
}
