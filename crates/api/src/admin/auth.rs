use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::access::{self, Principal};
use crate::admin::state::AdminState;
use crate::error::ApiError;

/// Lets a request through with `Authorization: Bearer <token>` (the bootstrap admin token or a
/// named one) or with a console session cookie (and, for a change, its CSRF token:
/// `crate::console::authorize`), if the principal's role allows the route
/// ([`access::may`]); every change answered with success is then written to the audit log
/// ([`super::audit::record`]). Wrong bearer tokens spend the same per-address budget as the
/// console's failed sign-ins.
pub async fn require_token(State(app): State<AdminState>, req: Request, next: Next) -> Response {
    let mut resp = match guarded(&app, req, next).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    // Admin answers (secrets, documents) are never for a browser's or a proxy's cache.
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn guarded(app: &AdminState, mut req: Request, next: Next) -> Result<Response, ApiError> {
    let presented = credentials(app, &req);
    let principal = identify(app, presented).await?;
    if !access::may(principal.role, req.method(), req.uri().path()) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "the {} role of {:?} may not {} {}",
                principal.role.as_str(),
                principal.name,
                req.method(),
                req.uri().path()
            ),
        )
        .with_field("role"));
    }
    req.extensions_mut().insert(principal.clone());
    if !access::is_audited(req.method(), req.uri().path()) {
        return Ok(next.run(req).await);
    }
    Ok(super::audit::record(app, &principal, req, next).await)
}

/// What a request presents, read before any wait (a request is not `Sync`, so it cannot be
/// held across one).
enum Credentials {
    Bootstrap,
    Bearer { token: String, peer: Option<std::net::IpAddr> },
    Session(Result<crate::console::session::Session, ApiError>),
}

fn credentials(app: &AdminState, req: &Request) -> Credentials {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    match presented {
        // Compared without an early exit, so timing does not reveal how much of a guess was right.
        Some(token) if httpdns_auth::constant_time_eq(token.as_bytes(), app.admin_token.as_bytes()) => {
            Credentials::Bootstrap
        }
        Some(token) => Credentials::Bearer {
            token: token.to_owned(),
            peer: req
                .extensions()
                .get::<ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip().to_canonical()),
        },
        None => Credentials::Session(crate::console::authorize(&app.console, req)),
    }
}

async fn identify(app: &AdminState, presented: Credentials) -> Result<Principal, ApiError> {
    match presented {
        Credentials::Bootstrap => Ok(Principal::bootstrap(false)),
        Credentials::Bearer { token, peer } => {
            if let Some(p) = access::named_token(app.catalog.store(), &token).await? {
                return Ok(p);
            }
            if peer.is_some_and(|p| !app.console.failed_attempt(p)) {
                return Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "Throttled",
                    "too many failed attempts from this address; wait",
                ));
            }
            Err(ApiError::unauthorized())
        }
        Credentials::Session(session) => {
            let session = session?;
            access::session_holder(app.catalog.store(), &session).await?.ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "Unauthorized",
                    "the token this session signed in with was revoked or replaced; sign in again",
                )
            })
        }
    }
}
