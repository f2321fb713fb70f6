//! `GET|POST /d`: the DNSPod-compatible text API.
//!
//! Always `200` with a `Content-Length` body for a well-formed request, as DNSPod does and
//! its SDKs require. Because the text format cannot say *why* a name has no answer, the
//! `X-Httpdns-Status` header carries one outcome per requested name, comma-separated in
//! request order: `ok`, `fail-open`, `no-record`, `no-healthy-node` or `not-managed`.

pub mod format;
pub mod params;

use std::net::IpAddr;
use std::time::Instant;

use crate::answer::Question;
use crate::error::ApiError;
use crate::metrics::{Endpoint, Outcome};
use crate::state::{AppState, PeerAddr};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use format::{NameAnswer, Part};
use params::QType;

/// Header naming the outcome of each name (a constant: a name given as text is parsed and
/// looked up in the standard-header table on every insert).
pub const STATUS_HEADER: HeaderName = HeaderName::from_static("x-httpdns-status");

/// Reads the parameters of a `/d` request: the query string, and for `POST` a form-encoded
/// body (the query string's values win).
pub(crate) fn fields<'a>(query: Option<&'a str>, body: &'a [u8]) -> params::Fields<'a> {
    let mut fields = params::Fields::read(crate::form::query(query));
    if !body.is_empty() {
        fields.extend(crate::form::parse(body));
    }
    fields
}

/// Largest form body accepted on `POST /d` (eight 253-character names fit many times over).
const MAX_FORM_BODY: usize = 16 * 1024;

// The handler takes the raw request instead of extractors so that a GET copies neither the
// headers nor the query string. A GET reaches it only when the listener's shortcut is off
// (`crate::shortcut`, which answers it through [`prepare`] and [`Prepared::answer_now`] too).
pub(crate) async fn handle(
    State(app): State<AppState>,
    PeerAddr(peer): PeerAddr,
    request: Request,
) -> Response {
    let started = Instant::now();
    let resp = answer(&app, peer, request, started).await;
    app.metrics.http_answer_request(crate::metrics::Route::D, resp.status());
    resp.map(axum::body::Body::from)
}

async fn answer(app: &AppState, peer: IpAddr, request: Request, started: Instant) -> Whole {
    let method = request.method().clone();
    if method != Method::GET && method != Method::POST && method != Method::HEAD {
        // DNSPod answers other methods with 501.
        return ApiError::new(StatusCode::NOT_IMPLEMENTED, "MethodNotAllowed", "use GET or POST")
            .into_whole();
    }
    let secure = is_secure(app, &request);
    let (parts, body) = request.into_parts();
    let form: Bytes = if method == Method::POST && is_form(&parts.headers) {
        match axum::body::to_bytes(body, MAX_FORM_BODY).await {
            Ok(b) => b,
            Err(_) => {
                return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "InvalidArgument", "form body too large")
                    .into_whole()
            }
        }
    } else {
        Bytes::new()
    };
    match prepare(app, peer, secure, parts.uri.query(), &form) {
        Err(e) => e.into_whole(),
        Ok(p) => match p.answer_now(app, started) {
            Now::Answered(resp) => resp,
            Now::Upstream(p) => p.answer_later(app, started).await,
        },
    }
}

/// A response as one buffer.
pub(crate) type Whole = Response<Bytes>;

/// What [`Prepared::answer_now`] could do.
pub(crate) enum Now {
    Answered(Whole),
    /// A name is to be asked upstream: [`Prepared::answer_later`].
    Upstream(Prepared),
}

/// A `/d` request checked and parsed, with the snapshot it is answered from.
pub(crate) struct Prepared {
    req: params::DRequest,
    auth: Auth,
    published: std::sync::Arc<httpdns_catalog::Published>,
    client: IpAddr,
}

/// Authenticates, rate-limits and parses a `/d` request (its query string and form body).
pub(crate) fn prepare(
    app: &AppState,
    peer: IpAddr,
    secure: bool,
    query: Option<&str>,
    form: &[u8],
) -> Result<Prepared, ApiError> {
    let mut fields = fields(query, form);
    // An enterprise request carries `id=` with `dn` encrypted by the account's key, or (HTTPS)
    // the account's `token=` with everything in plain text.
    // One snapshot for the whole request: the account checked and the answer agree.
    let published = app.catalog.snapshot_full();
    let auth = authenticate(app, &published, &mut fields, secure, peer)?;
    if matches!(auth, Auth::None) && !crate::resolve::allow_client(app, peer) {
        return Err(crate::resolve::client_throttled());
    }
    let req = params::parse_fields(&fields)
        .map_err(|e| ApiError::bad_request(e.code(), e.field(), e.to_string()))?;
    if let Some(expiry) = req.expiry {
        let now = httpdns_core::clock::unix_s();
        // The SDK sets it ten minutes ahead; a device clock a little slow is forgiven.
        if expiry + EXPIRY_SKEW_S < now {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "SignatureExpired",
                "the request's dn has expired",
            )
            .with_field("dn"));
        }
    }
    let client = req.ip.unwrap_or(peer);
    Ok(Prepared { req, auth, published, client })
}

impl Prepared {
    fn question(&self) -> Question<'_> {
        Question {
            names: &self.req.names,
            v4: matches!(self.req.qtype, QType::A | QType::Addrs),
            v6: matches!(self.req.qtype, QType::Aaaa | QType::Addrs),
            client: self.client,
            // DNSPod's `/d` has no app attributes; rules match it by carrier and region.
            attrs: &httpdns_core::schedule::NO_ATTRS,
        }
    }

    /// The answer, when the snapshot holds all of it; else the request back, for
    /// [`Prepared::answer_later`] (a name that is not managed here, asked upstream).
    pub(crate) fn answer_now(self, app: &AppState, started: Instant) -> Now {
        match crate::answer::answer_local(app, &self.published, self.question()) {
            Some(found) => Now::Answered(self.respond(app, &found, started)),
            None => Now::Upstream(self),
        }
    }

    pub(crate) async fn answer_later(self, app: &AppState, started: Instant) -> Whole {
        let found = crate::answer::answer(app, self.published.clone(), self.question()).await;
        self.respond(app, &found, started)
    }

    fn respond(&self, app: &AppState, found: &crate::answer::Answers, started: Instant) -> Whole {
        let req = &self.req;
        fn part(f: Option<&crate::answer::FamilyAnswer>, domain_ttl: Option<u32>) -> Part<'_> {
            match f {
                Some(f) => Part {
                    ips: f.ips.as_slice().into(),
                    ttl: if f.ips.is_empty() { domain_ttl.unwrap_or(f.ttl) } else { f.ttl },
                },
                None => Part::default(),
            }
        }
        let answers: Vec<NameAnswer<'_>> = found
            .names
            .iter()
            .enumerate()
            .map(|(i, a)| NameAnswer {
                name: req.echo(i),
                v4: part(a.v4.as_ref(), a.domain_ttl),
                v6: part(a.v6.as_ref(), a.domain_ttl),
            })
            .collect();
        let mut body = format::format(req, &answers, self.client, app.settings.dnspod);
        if let Auth::Encrypted(alg, secret) = &self.auth {
            match httpdns_auth::encrypt(*alg, secret, &body) {
                Ok(hex) => body = hex.into_bytes(),
                Err(_) => return ApiError::internal(&"cannot encrypt with the account key").into_whole(),
            }
        }
        found.count(app, Endpoint::D, &req.names, started);

        let mut resp = Whole::new(Bytes::from(body));
        let h = resp.headers_mut();
        match found.names.as_slice() {
            [one] => *h = ONE_NAME[one.outcome.rank()].clone(),
            _ => *h = headers(found.status_header()),
        }
        if req.ip_invalid {
            h.insert(
                "x-httpdns-ip-ignored",
                HeaderValue::from_static("invalid ip parameter; the connection address was used"),
            );
        }
        resp
    }
}

/// The headers of an answer whose `X-Httpdns-Status` is `status`.
fn headers(status: HeaderValue) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(4);
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    // The answer depends on the client's address: no shared cache may keep it.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    h.insert(STATUS_HEADER, status);
    h
}

/// [`headers`] of a one-name answer, by the outcome's [`Outcome::rank`], built once: a clone
/// costs less than the three inserts, each of which hashes its name.
static ONE_NAME: std::sync::LazyLock<Vec<HeaderMap>> = std::sync::LazyLock::new(|| {
    Outcome::ALL.iter().map(|o| headers(HeaderValue::from_static(o.as_str()))).collect()
});

/// How far past the expiry in `dn` (`;<seconds>`) a request is still answered.
const EXPIRY_SKEW_S: u64 = 600;

/// Whether the request reached us over TLS: on a TLS listener, or from a trusted proxy that
/// says it terminated TLS (`X-Forwarded-Proto: https`).
pub(crate) fn is_secure(app: &AppState, request: &Request) -> bool {
    let tls = request.extensions().get::<httpdns_net::http::Secure>();
    let peer = request.extensions().get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0);
    secure_from(app, tls, peer, request.headers())
}

/// [`is_secure`] from the parts of a request.
pub(crate) fn secure_from(
    app: &AppState,
    tls: Option<&httpdns_net::http::Secure>,
    peer: Option<std::net::SocketAddr>,
    headers: &HeaderMap,
) -> bool {
    if tls.is_some() {
        return true;
    }
    let peer = peer.map(|c| c.ip().to_canonical());
    let trusted = peer.is_some_and(|p| {
        !app.settings.trusted_proxies.is_empty() && app.settings.trusted_proxies.lookup(p).is_some()
    });
    trusted
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// How a `/d` request authenticated.
pub(crate) enum Auth {
    None,
    /// `id=`: `dn` came encrypted, the answer goes back encrypted the same way.
    Encrypted(httpdns_auth::Alg, String),
    /// `token=` over HTTPS: plain text both ways.
    Token,
}

/// For a request with `id=`: checks the account and replaces `dn` (and `ip`, when it is
/// encrypted: the SDKs send it in plain text) by their decrypted values, returning the cipher
/// and key to encrypt the answer with. With `token=` (HTTPS only): checks the account. Without
/// either, passes when unauthenticated requests are allowed.
pub(crate) fn authenticate(
    app: &AppState,
    snapshot: &httpdns_catalog::Published,
    fields: &mut params::Fields<'_>,
    secure: bool,
    peer: IpAddr,
) -> Result<Auth, ApiError> {
    if let Some(token) = fields.token.as_deref().filter(|t| !t.is_empty()) {
        if !secure {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "HttpsRequired",
                "token= is accepted over HTTPS only (it is a secret sent in the clear)",
            )
            .with_field("token"));
        }
        // An address out of wrong tries is refused before its token is read: otherwise a
        // guesser would still learn which guess is right.
        if !app.token_misses.peek(peer) {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "Throttled",
                "too many wrong tokens from this address; try again in a minute",
            )
            .with_field("token"));
        }
        let (id, account) = snapshot.account_by_token(token).filter(|(_, a)| a.enabled).ok_or_else(|| {
            app.token_misses.allow(peer);
            ApiError::new(StatusCode::UNAUTHORIZED, "InvalidAccount", "no such token").with_field("token")
        })?;
        if !crate::resolve::allow_account(app, id, account.rate_limit_qps) {
            return Err(crate::resolve::throttled());
        }
        return Ok(Auth::Token);
    }
    let Some(id) = fields.id.as_deref() else {
        if app.settings.auth_required {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "this server answers authenticated requests only: send id= with dn encrypted, or token= over HTTPS",
            ));
        }
        return Ok(Auth::None);
    };
    let invalid =
        || ApiError::new(StatusCode::UNAUTHORIZED, "InvalidAccount", "no such account").with_field("id");
    let id = httpdns_core::model::parse_account_id(id).map_err(|_| invalid())?;
    let account = snapshot.account(id).filter(|a| a.enabled).ok_or_else(invalid)?;
    let alg = match fields.alg.as_deref() {
        None | Some("") => httpdns_auth::Alg::Des,
        Some(a) if a.eq_ignore_ascii_case("des") => httpdns_auth::Alg::Des,
        Some(a) if a.eq_ignore_ascii_case("aes") => httpdns_auth::Alg::Aes,
        Some(_) => return Err(ApiError::bad_request("InvalidArgument", "alg", "alg must be des or aes")),
    };
    let secret = account.secret.clone();
    for (field, slot) in [("dn", &mut fields.dn), ("ip", &mut fields.ip)] {
        let Some(v) = slot.as_deref().filter(|v| !v.is_empty()) else { continue };
        // The official SDKs send `ip` in plain text although the document says it is encrypted:
        // an address as it is stays as it is.
        if field == "ip" && v.parse::<IpAddr>().is_ok() {
            continue;
        }
        // Decrypted and checked as one step with one failure: a padding error answered apart
        // from a bad name would be a padding oracle on AES-CBC (docs/api.md).
        let accept = |text: &str| -> Option<String> {
            let valid = match field {
                "dn" => params::parse_fields(&params::Fields { dn: Some(text.into()), ..Default::default() })
                    .is_ok(),
                _ => params::parse_ip(text).is_some(),
            };
            valid.then(|| text.to_owned())
        };
        let plain = httpdns_auth::decrypt_with(alg, &secret, v, accept).map_err(|_| {
            ApiError::bad_request(
                "InvalidArgument",
                field,
                format!("{field} does not decrypt with the account's key to a valid value"),
            )
        })?;
        *slot = Some(std::borrow::Cow::Owned(plain));
    }
    // Charged once the parameters decrypted with the account's key: requests that merely
    // name a public account id must not spend the app's quota.
    if !crate::resolve::allow_account(app, id, account.rate_limit_qps) {
        return Err(crate::resolve::throttled());
    }
    Ok(Auth::Encrypted(alg, secret))
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|ct| ct.starts_with("application/x-www-form-urlencoded"))
}

/// The `X-Httpdns-Status` value: one outcome per name, comma-separated.
pub(crate) fn status_header(outcomes: &[Outcome]) -> HeaderValue {
    match outcomes {
        [one] => HeaderValue::from_static(one.as_str()),
        many => {
            let joined = many.iter().map(|o| o.as_str()).collect::<Vec<_>>().join(",");
            HeaderValue::from_str(&joined).expect("outcome words are valid header text")
        }
    }
}
