use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// Lets a request through only with `Authorization: Bearer <admin token>`, or with a console
/// session cookie (and, for a change, its CSRF token: `crate::console::authorize`). Both carry
/// the same authority today; a session's role is where a read-only one would be checked.
/// Wrong bearer tokens spend the same per-address budget as the console's failed sign-ins.
pub async fn require_token(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let mut resp = guarded(&app, req, next).await;
    // Admin answers (secrets, documents) are never for a browser's or a proxy's cache.
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn guarded(app: &AppState, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match presented {
        // Compared without an early exit, so timing does not reveal how much of a guess was right.
        Some(token)
            if httpdns_auth::constant_time_eq(token.as_bytes(), app.settings.admin_token.as_bytes()) =>
        {
            next.run(req).await
        }
        Some(_) => {
            let peer =
                req.extensions().get::<ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip().to_canonical());
            if peer.is_some_and(|p| !app.console.failed_attempt(p)) {
                return ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Throttled",
                    "too many failed attempts from this address; wait",
                )
                .into_response();
            }
            ApiError::unauthorized().into_response()
        }
        None => match crate::console::authorize(app, &req) {
            Ok(crate::console::session::Role::Admin) => next.run(req).await,
            Err(e) => e.into_response(),
        },
    }
}
