//! The admin console at `/console` (docs/console.md): one page and its script and styles,
//! embedded in the binary (nothing is loaded from elsewhere, so it works air-gapped), over the
//! admin API it calls with a session cookie instead of the bearer token.
//!
//! * `POST /console/session` `{"token": "<admin token>"}` signs in: an `HttpOnly`,
//!   `SameSite=Strict` cookie (`Secure` over TLS) with an 8-hour expiry ([`session`]).
//! * `GET /console/session` says who is signed in and gives the CSRF token, which every
//!   change (any method but GET and HEAD) through the cookie must carry as `X-CSRF-Token`
//!   ([`authorize`], used by the admin API's guard).
//! * `DELETE /console/session` signs out (this replica also refuses the cookie from then on).
//!
//! Every console response carries a strict Content-Security-Policy: scripts, styles and
//! fetches from this origin only, no inline script, no framing.

pub mod session;

use std::collections::HashMap;
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;

use parking_lot::Mutex;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use httpdns_core::cidr::CidrTable;
use httpdns_store::Store;

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::peer::{PeerAddr, TrustsProxies};
use httpdns_guard::RateLimiter;
use session::{Holder, Role, Session, Sessions};

/// The session cookie's name.
pub const COOKIE: &str = "httpdns_console";
/// How long a session lasts (a working day).
pub const LIFETIME_S: u64 = 8 * 3600;
/// The device cookie of a browser that signed in ([`Sessions::device`]).
pub const DEVICE_COOKIE: &str = "httpdns_console_device";
/// How long a browser keeps its device cookie.
const DEVICE_LIFETIME_S: u64 = 365 * 24 * 3600;
/// Revoked sessions remembered at most (older ones expire anyway).
const MAX_REVOKED: usize = 10_000;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const POLICY_SCRIPT: &str = include_str!("assets/policy.js");
const STYLE: &str = include_str!("assets/app.css");

/// Only this origin's script, styles and fetches; nothing inline, nothing framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's state: how sessions are signed, which were signed out, and sign-in attempts.
#[derive(Debug)]
pub struct Console {
    sessions: Sessions,
    /// Signed-out nonces until their expiry (this replica; others honour the expiry).
    revoked: Mutex<HashMap<String, u64>>,
    /// Sign-in attempts per client address: guessing the token is slow.
    attempts: RateLimiter<IpAddr>,
    /// Failed sign-ins per device cookie, for browsers that signed in before: their own
    /// budget, which failures of others at the same address do not spend.
    device_attempts: RateLimiter<String>,
}

impl Console {
    pub fn new(admin_token: &str) -> Self {
        Self {
            sessions: Sessions::new(admin_token),
            revoked: Mutex::new(HashMap::new()),
            attempts: RateLimiter::new(0.5, 10.0),
            device_attempts: RateLimiter::new(0.5, 10.0),
        }
    }

    /// The valid, not signed-out session of a request's cookies (every cookie of that name is
    /// tried: another port of the same host may have set one too).
    pub fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let now = httpdns_core::clock::unix_s();
        let revoked = self.revoked.lock();
        cookies(headers, COOKIE)
            .filter_map(|v| self.sessions.verify(v, now))
            .find(|s| !revoked.contains_key(&s.nonce))
    }

    fn revoke(&self, s: &Session) {
        let now = httpdns_core::clock::unix_s();
        let mut revoked = self.revoked.lock();
        revoked.retain(|_, expires| *expires > now);
        if revoked.len() >= MAX_REVOKED {
            // Full of live sessions: the one ending soonest goes (it is closest to harmless).
            if let Some(k) = revoked.iter().min_by_key(|(_, e)| **e).map(|(k, _)| k.clone()) {
                revoked.remove(&k);
            }
        }
        revoked.insert(s.nonce.clone(), s.expires);
    }

    /// Takes one attempt of `peer`'s budget of failed authentications (sign-ins and wrong
    /// bearer tokens alike); false when it is spent. IPv6 clients count per /64.
    pub fn failed_attempt(&self, peer: IpAddr) -> bool {
        self.attempts.allow(attempt_key(peer))
    }

    /// Whether `peer` still has attempts left, without spending one.
    fn may_attempt(&self, peer: IpAddr) -> bool {
        self.attempts.peek(&attempt_key(peer))
    }
}

/// An address as attempts are counted: IPv6 by its /64 (one host can hold all of it).
fn attempt_key(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// The values of cookie `name` in the request's `Cookie` headers.
fn cookies<'h>(headers: &'h HeaderMap, name: &'h str) -> impl Iterator<Item = &'h str> + 'h {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// How the admin API's guard judges a request that has no bearer token: the session when its
/// cookie is valid and, for a change, its CSRF token matches (the guard then checks the
/// session's token still exists and what its role allows).
pub fn authorize(console: &Console, req: &Request) -> Result<Session, ApiError> {
    let session = console.session(req.headers()).ok_or_else(ApiError::unauthorized)?;
    let safe = matches!(*req.method(), Method::GET | Method::HEAD);
    if !safe {
        let presented = req.headers().get("x-csrf-token").and_then(|v| v.to_str().ok()).unwrap_or("");
        if !console.sessions.csrf_ok(&session, presented) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "CsrfTokenInvalid",
                "a change through the console session needs its X-CSRF-Token (GET /console/session)",
            )
            .with_field("X-CSRF-Token"));
        }
    }
    Ok(session)
}

/// The console routes' slice of state.
#[derive(Debug, Clone)]
pub struct ConsoleState(Arc<ConsoleParts>);

/// What [`ConsoleState`] points at.
#[derive(Debug)]
pub struct ConsoleParts {
    /// Sessions and sign-in budgets.
    pub console: Arc<Console>,
    /// Named tokens a sign-in may present.
    pub store: Store,
    /// The bootstrap admin token.
    pub admin_token: String,
    /// Proxies whose forwarded addresses are believed (sign-in budgets go by address).
    pub trusted_proxies: CidrTable<()>,
    /// Requests counted by the `track` layer.
    pub metrics: Arc<Metrics>,
}

impl ConsoleState {
    pub fn new(parts: ConsoleParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl Deref for ConsoleState {
    type Target = ConsoleParts;
    fn deref(&self) -> &ConsoleParts {
        &self.0
    }
}

impl TrustsProxies for ConsoleState {
    fn trusted_proxies(&self) -> &CidrTable<()> {
        &self.trusted_proxies
    }
}

/// The console's routes (public: the page itself signs in), tracked.
pub fn router(state: ConsoleState) -> Router {
    let router = Router::new()
        .route("/console", get(page))
        .route("/console/", get(page))
        .route("/console/app.js", get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }))
        .route("/console/policy.js", get(|| async { asset(POLICY_SCRIPT, "text/javascript; charset=utf-8") }))
        .route("/console/app.css", get(|| async { asset(STYLE, "text/css; charset=utf-8") }))
        .route("/console/session", get(whoami).post(sign_in).delete(sign_out));
    crate::track::layer(router, state.metrics.clone()).with_state(state)
}

fn secure_headers(resp: &mut Response) {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    secure_headers(&mut resp);
    resp
}

async fn page() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

/// What the page learns of its session: who, with which role (the page hides what the role
/// cannot do; the admin API refuses it anyway), and the CSRF token.
fn session_body(app: &ConsoleState, s: &Session, role: Role) -> serde_json::Value {
    serde_json::json!({
        "name": s.name,
        "role": role.as_str(),
        "expires": s.expires,
        "csrf": app.console.sessions.csrf(s),
    })
}

async fn whoami(State(app): State<ConsoleState>, headers: HeaderMap) -> Response {
    let not_in = || ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", "not signed in").into_response();
    let mut resp = match app.console.session(&headers) {
        // The token's current role (it may have changed, or the token gone, since sign-in).
        Some(s) => match crate::admin::access::session_holder(&app.store, &s).await {
            Ok(Some(p)) => axum::Json(session_body(&app, &s, p.role)).into_response(),
            Ok(None) => not_in(),
            Err(e) => e.into_response(),
        },
        None => not_in(),
    };
    secure_headers(&mut resp);
    resp
}

fn set_cookie(value: &str, max_age: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    ))
    .expect("cookie characters")
}

async fn sign_in(State(app): State<ConsoleState>, PeerAddr(peer): PeerAddr, req: Request) -> Response {
    // Over TLS, or behind a trusted proxy that terminated it (`X-Forwarded-Proto: https`).
    let secure = crate::peer::is_secure(&app, &req);
    let device = cookies(req.headers(), DEVICE_COOKIE).find_map(|v| app.console.sessions.verify_device(v));
    let body = axum::body::to_bytes(req.into_body(), 4096).await.unwrap_or_default();
    let mut resp = match check_token(&app, peer, device.as_deref(), &body).await {
        Ok((who, token_id)) => {
            let mut nonce = [0u8; 16];
            if getrandom::fill(&mut nonce).is_err() {
                return ApiError::internal(&"no randomness for a session").into_response();
            }
            let holder = Holder { role: who.role, name: &who.name, token_id: &token_id };
            let now = httpdns_core::clock::unix_s();
            let Some(value) = app.console.sessions.issue(&holder, now, LIFETIME_S, &nonce) else {
                return ApiError::internal(&"a token name that does not fit a cookie").into_response();
            };
            let session = app.console.sessions.verify(&value, now).expect("just issued");
            tracing::info!(%peer, name = %who.name, role = who.role.as_str(), "Console sign-in.");
            let mut resp = axum::Json(session_body(&app, &session, who.role)).into_response();
            resp.headers_mut().insert(header::SET_COOKIE, set_cookie(&value, LIFETIME_S, secure));
            if device.is_none() {
                let mut id = [0u8; 16];
                if getrandom::fill(&mut id).is_ok() {
                    let device = app.console.sessions.device(&id);
                    let cookie = HeaderValue::from_str(&format!(
                        "{DEVICE_COOKIE}={device}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={DEVICE_LIFETIME_S}{}",
                        if secure { "; Secure" } else { "" }
                    ))
                    .expect("cookie characters");
                    resp.headers_mut().append(header::SET_COOKIE, cookie);
                }
            }
            resp
        }
        Err(e) => e.into_response(),
    };
    secure_headers(&mut resp);
    resp
}

fn throttled() -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "Throttled",
        "too many failed attempts from this address; wait",
    )
}

/// The principal a sign-in's token names (the bootstrap admin token or a named one) and, for a
/// named token, the id its session keeps ([`crate::admin::access::TOKEN_ID_LEN`]).
async fn check_token(
    app: &ConsoleState,
    peer: IpAddr,
    device: Option<&str>,
    body: &Bytes,
) -> Result<(crate::admin::access::Principal, String), ApiError> {
    // Only failures spend the budget, so signing in often never locks anyone out. A browser
    // that signed in before spends its own budget: others failing at its address (a shared
    // NAT, an attacker) cannot lock it out.
    let console = &app.console;
    let may = match device {
        Some(d) => console.device_attempts.peek(&d.to_owned()),
        None => console.may_attempt(peer),
    };
    if !may {
        return Err(throttled());
    }
    let token = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("token").and_then(|t| t.as_str()).map(str::to_owned))
        .ok_or_else(|| {
            ApiError::bad_request("InvalidBody", "token", "send {\"token\": \"<admin or named token>\"}")
        })?;
    let token = token.trim();
    if httpdns_auth::constant_time_eq(token.as_bytes(), app.admin_token.as_bytes()) {
        return Ok((crate::admin::access::Principal::bootstrap(true), String::new()));
    }
    if let Some(who) = crate::admin::access::named_token(&app.store, token).await? {
        let id = crate::admin::access::token_hash(token)[..crate::admin::access::TOKEN_ID_LEN].to_owned();
        Ok((who, id))
    } else {
        tracing::warn!(%peer, "Console sign-in with a wrong token.");
        match device {
            Some(d) => {
                console.device_attempts.allow(d.to_owned());
            }
            None => {
                console.failed_attempt(peer);
            }
        }
        Err(ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", "wrong admin token").with_field("token"))
    }
}

async fn sign_out(State(app): State<ConsoleState>, req: Request) -> Response {
    let secure = crate::peer::is_secure(&app, &req);
    let mut resp = match authorize(&app.console, &req) {
        Ok(_) => {
            if let Some(s) = app.console.session(req.headers()) {
                app.console.revoke(&s);
            }
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => e.into_response(),
    };
    // Cleared in the browser whatever happened: a sign-out never leaves a cookie behind.
    resp.headers_mut().insert(header::SET_COOKIE, set_cookie("", 0, secure));
    secure_headers(&mut resp);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, "a=1; httpdns_console=v1.x ; b=2".parse().unwrap());
        h.append(header::COOKIE, "httpdns_console=v1.y".parse().unwrap());
        assert_eq!(cookies(&h, COOKIE).collect::<Vec<_>>(), ["v1.x", "v1.y"]);
        assert_eq!(cookies(&h, "c").count(), 0);
        let v6: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        assert_eq!(attempt_key(v6), "2001:db8:1:2::".parse::<IpAddr>().unwrap(), "per /64");
    }
}
