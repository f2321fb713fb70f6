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

use crate::error::ApiError;
use crate::httpdns::state::HttpdnsState;
use crate::httpdns::status::{status_header, STATUS_HEADER};
use crate::peer::PeerAddr;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use format::{NameAnswer, Part};
use httpdns_answer::{Answers, Endpoint, FamilyAnswer, Outcome, Question};
use httpdns_guard::d::{Auth, Credentials, Sealed, SealedFields};
use params::QType;

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
    State(app): State<HttpdnsState>,
    PeerAddr(peer): PeerAddr,
    request: Request,
) -> Response {
    let started = Instant::now();
    let resp = answer(&app, peer, request, started).await;
    app.metrics.http_answer_request(crate::metrics::Route::D, resp.status());
    resp.map(axum::body::Body::from)
}

async fn answer(app: &HttpdnsState, peer: IpAddr, request: Request, started: Instant) -> Whole {
    let method = request.method().clone();
    if method != Method::GET && method != Method::POST && method != Method::HEAD {
        // DNSPod answers other methods with 501.
        return ApiError::new(StatusCode::NOT_IMPLEMENTED, "MethodNotAllowed", "use GET or POST")
            .into_whole();
    }
    let secure = crate::peer::is_secure(app, &request);
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

/// Reads a `/d` request (its query string and form body), then guards it: authentication,
/// the account's or the address's limit, the expiry of an encrypted `dn`.
pub(crate) fn prepare(
    app: &HttpdnsState,
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
    if matches!(auth, Auth::None) {
        app.guard.charge_client(peer)?;
    }
    let req = params::parse_fields(&fields)
        .map_err(|e| ApiError::bad_request(e.code(), e.field(), e.to_string()))?;
    if let Some(expiry) = req.expiry {
        // The SDK sets it ten minutes ahead; a device clock a little slow is forgiven.
        if expiry + EXPIRY_SKEW_S < httpdns_core::clock::unix_s() {
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
    pub(crate) fn answer_now(self, app: &HttpdnsState, started: Instant) -> Now {
        match app.engine.answer_local(&self.published, self.question()) {
            Some(found) => Now::Answered(self.respond(app, &found, started)),
            None => Now::Upstream(self),
        }
    }

    pub(crate) async fn answer_later(self, app: &HttpdnsState, started: Instant) -> Whole {
        let found = app.engine.answer(self.published.clone(), self.question()).await;
        self.respond(app, &found, started)
    }

    /// Formats the engine's answers as DNSPod's text (encrypted back when the request was).
    fn respond(&self, app: &HttpdnsState, found: &Answers, started: Instant) -> Whole {
        let req = &self.req;
        fn part(f: Option<&FamilyAnswer>, domain_ttl: Option<u32>) -> Part<'_> {
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
        let mut body = format::format(req, &answers, self.client, app.dnspod);
        if let Auth::Encrypted(alg, secret) = &self.auth {
            match httpdns_auth::encrypt(*alg, secret, &body) {
                Ok(hex) => body = hex.into_bytes(),
                Err(_) => return ApiError::internal(&"cannot encrypt with the account key").into_whole(),
            }
        }
        app.engine.count(found, Endpoint::D, &req.names, started);

        let mut resp = Whole::new(Bytes::from(body));
        let h = resp.headers_mut();
        match found.names.as_slice() {
            [one] => *h = ONE_NAME[one.outcome.rank()].clone(),
            _ => *h = headers(status_header(&found.outcomes())),
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

/// The guard of `/d` (and `/conf`) on `fields`: see [`httpdns_guard::Guard::authenticate_d`].
/// An encrypted `dn` must decrypt to names `/d` parses, an encrypted `ip` to an address.
pub(crate) fn authenticate(
    app: &HttpdnsState,
    snapshot: &httpdns_catalog::Published,
    fields: &mut params::Fields<'_>,
    secure: bool,
    peer: IpAddr,
) -> Result<Auth, ApiError> {
    let params::Fields { token, id, alg, dn, ip, .. } = fields;
    let creds = Credentials { token: token.as_deref(), id: id.as_deref(), alg: alg.as_deref() };
    let valid = |sealed: Sealed, text: &str| match sealed {
        Sealed::Dn => {
            params::parse_fields(&params::Fields { dn: Some(text.into()), ..Default::default() }).is_ok()
        }
        Sealed::Ip => params::parse_ip(text).is_some(),
    };
    Ok(app.guard.authenticate_d(snapshot, peer, secure, creds, SealedFields { dn, ip }, valid)?)
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|ct| ct.starts_with("application/x-www-form-urlencoded"))
}
