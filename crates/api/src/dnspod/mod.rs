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

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use httpdns_core::snapshot::{client_seed, Resolution};
use httpdns_core::{ClientView, DomainName, Family};

use crate::catalog::Published;
use crate::error::ApiError;
use crate::metrics::{Endpoint, Outcome};
use crate::state::{AppState, PeerAddr};
use format::{NameAnswer, Part};
use params::{DRequest, QType};

/// Header naming the outcome of each name.
pub const STATUS_HEADER: &str = "x-httpdns-status";

/// Collects the parameters of a `/d` request: the query string, and for `POST` a
/// form-encoded body (the query string's values win).
pub(crate) fn pairs<'a>(
    query: Option<&'a str>,
    body: &'a [u8],
) -> Vec<(std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>)> {
    let mut pairs: Vec<_> = form_urlencoded::parse(query.unwrap_or("").as_bytes()).collect();
    pairs.extend(form_urlencoded::parse(body));
    pairs
}

/// Largest form body accepted on `POST /d` (eight 253-character names fit many times over).
const MAX_FORM_BODY: usize = 16 * 1024;

// The handler takes the raw request instead of extractors so that a GET, the hot path, copies
// neither the headers nor the query string.
pub(crate) async fn handle(
    State(app): State<AppState>,
    PeerAddr(peer): PeerAddr,
    request: Request,
) -> Response {
    let started = Instant::now();
    let resp = answer(&app, peer, request, started).await;
    app.metrics.http_answer_request(crate::metrics::Route::D, resp.status());
    resp
}

async fn answer(app: &AppState, peer: IpAddr, request: Request, started: Instant) -> Response {
    let method = request.method().clone();
    if method != Method::GET && method != Method::POST && method != Method::HEAD {
        // DNSPod answers other methods with 501.
        return ApiError::new(StatusCode::NOT_IMPLEMENTED, "MethodNotAllowed", "use GET or POST")
            .into_response();
    }
    let (parts, body) = request.into_parts();
    let form: Bytes = if method == Method::POST && is_form(&parts.headers) {
        match axum::body::to_bytes(body, MAX_FORM_BODY).await {
            Ok(b) => b,
            Err(_) => {
                return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "InvalidArgument", "form body too large")
                    .into_response()
            }
        }
    } else {
        Bytes::new()
    };
    let mut pairs = pairs(parts.uri.query(), &form);
    // An enterprise request (`id=`) carries `dn` and `ip` encrypted with the account's key.
    let key = match decrypt_params(app, &mut pairs) {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    if key.is_none() && !crate::resolve::allow_client(app, peer) {
        return crate::resolve::client_throttled().into_response();
    }
    let req = match params::parse(pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))) {
        Ok(r) => r,
        Err(e) => return ApiError::bad_request(e.code(), e.field(), e.to_string()).into_response(),
    };

    let client = req.ip.unwrap_or(peer);
    let snapshot = app.catalog.snapshot();
    let view = httpdns_geo::classify(&snapshot, &app.geo, client);
    app.metrics.client_answer(&view);
    let (mut answers, mut outcomes) = answer_all(&snapshot, &req, &view, client);
    drop(snapshot);
    upstream_all(app, &req, client, &mut answers, &mut outcomes).await;
    let mut body = format::format(&req, &answers, client, app.settings.dnspod);
    if let Some((alg, secret)) = key {
        match httpdns_auth::encrypt(alg, &secret, body.as_bytes()) {
            Ok(hex) => body = hex,
            Err(_) => return ApiError::internal(&"cannot encrypt with the account key").into_response(),
        }
    }

    for o in &outcomes {
        app.metrics.answer(Endpoint::D, *o);
    }
    app.metrics.answer_time(Endpoint::D, started.elapsed());

    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    // The answer depends on the client's address: no shared cache may keep it.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    h.insert(STATUS_HEADER, status_header(&outcomes));
    if req.ip_invalid {
        h.insert(
            "x-httpdns-ip-ignored",
            HeaderValue::from_static("invalid ip parameter; the connection address was used"),
        );
    }
    resp
}

type Pairs<'a> = Vec<(std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>)>;

/// For a request with `id=`: checks the account and replaces `dn` and `ip` by their decrypted
/// values, returning the cipher and key to encrypt the answer with. Without `id=`, passes when
/// unauthenticated requests are allowed.
fn decrypt_params(
    app: &AppState,
    pairs: &mut Pairs<'_>,
) -> Result<Option<(httpdns_auth::Alg, String)>, ApiError> {
    let first = |pairs: &Pairs<'_>, k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.to_string());
    let Some(id) = first(pairs, "id") else {
        if app.settings.auth_required {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "this server answers authenticated requests only: send id= with dn and ip encrypted",
            ));
        }
        return Ok(None);
    };
    let invalid =
        || ApiError::new(StatusCode::UNAUTHORIZED, "InvalidAccount", "no such account").with_field("id");
    let id = httpdns_core::model::parse_account_id(&id).map_err(|_| invalid())?;
    let snapshot = app.catalog.snapshot();
    let account = snapshot.account(id).filter(|a| a.enabled).ok_or_else(invalid)?;
    if !crate::resolve::allow_account(app, id, account.rate_limit_qps) {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Throttled",
            "the account's rate limit is reached",
        ));
    }
    let alg = match first(pairs, "alg").as_deref() {
        None | Some("") => httpdns_auth::Alg::Des,
        Some(a) if a.eq_ignore_ascii_case("des") => httpdns_auth::Alg::Des,
        Some(a) if a.eq_ignore_ascii_case("aes") => httpdns_auth::Alg::Aes,
        Some(_) => return Err(ApiError::bad_request("InvalidArgument", "alg", "alg must be des or aes")),
    };
    let secret = account.secret.clone();
    let mut seen = (false, false);
    for (k, v) in pairs.iter_mut() {
        let field = match k.as_ref() {
            "dn" if !seen.0 => {
                seen.0 = true;
                "dn"
            }
            "ip" if !seen.1 => {
                seen.1 = true;
                "ip"
            }
            _ => continue,
        };
        if v.is_empty() {
            continue;
        }
        let plain = httpdns_auth::decrypt(alg, &secret, v).map_err(|_| {
            ApiError::bad_request(
                "InvalidArgument",
                field,
                format!("{field} does not decrypt with the account's key"),
            )
        })?;
        *v = std::borrow::Cow::Owned(plain);
    }
    Ok(Some((alg, secret)))
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

/// Answers every requested name for one client.
pub(crate) fn answer_all<'r>(
    snapshot: &Published,
    req: &'r DRequest,
    view: &ClientView,
    client: IpAddr,
) -> (Vec<NameAnswer<'r>>, Vec<Outcome>) {
    let seed = client_seed(client);
    let mut answers = Vec::with_capacity(req.names.len());
    let mut outcomes = Vec::with_capacity(req.names.len());
    for name in &req.names {
        let (v4, o4) = match req.qtype {
            QType::A | QType::Addrs => family(snapshot, name, Family::V4, view, seed),
            QType::Aaaa => (Part::default(), None),
        };
        let (v6, o6) = match req.qtype {
            QType::Aaaa | QType::Addrs => family(snapshot, name, Family::V6, view, seed),
            QType::A => (Part::default(), None),
        };
        outcomes.push(combine(o4, o6));
        answers.push(NameAnswer { name, v4, v6 });
    }
    (answers, outcomes)
}

/// Resolves the names that are not managed here through the upstream resolver.
async fn upstream_all(
    app: &AppState,
    req: &DRequest,
    client: IpAddr,
    answers: &mut [NameAnswer<'_>],
    outcomes: &mut [Outcome],
) {
    if !app.upstream.is_configured() {
        return;
    }
    for (a, o) in answers.iter_mut().zip(outcomes.iter_mut()) {
        if *o != Outcome::NotManaged {
            continue;
        }
        let (mut o4, mut o6) = (None, None);
        if matches!(req.qtype, QType::A | QType::Addrs) {
            let (part, out) = upstream_part(app, a.name, Family::V4, client).await;
            a.v4 = part;
            o4 = Some(out);
        }
        if matches!(req.qtype, QType::Aaaa | QType::Addrs) {
            let (part, out) = upstream_part(app, a.name, Family::V6, client).await;
            a.v6 = part;
            o6 = Some(out);
        }
        *o = combine(o4, o6);
    }
}

/// One family of a name that is not managed here, from the upstream resolver.
pub(crate) async fn upstream_part(
    app: &AppState,
    name: &DomainName,
    fam: Family,
    client: IpAddr,
) -> (Part, Outcome) {
    let qtype = match fam {
        Family::V4 => hickory_proto::rr::RecordType::A,
        Family::V6 => hickory_proto::rr::RecordType::AAAA,
    };
    match app.upstream.lookup(name, qtype, client).await {
        Ok(l) => {
            let outcome = if l.stale { Outcome::UpstreamStale } else { Outcome::Upstream };
            (Part { ips: l.ips, ttl: l.ttl }, outcome)
        }
        Err(_) => (Part::default(), Outcome::UpstreamError),
    }
}

/// One outcome for a name asked in one or two families: the better of the two.
fn combine(a: Option<Outcome>, b: Option<Outcome>) -> Outcome {
    let rank = |o: Outcome| Outcome::ALL.iter().position(|x| *x == o).unwrap_or(usize::MAX);
    match (a, b) {
        (Some(x), Some(y)) => {
            if rank(x) <= rank(y) {
                x
            } else {
                y
            }
        }
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => Outcome::NotManaged,
    }
}

pub(crate) fn family(
    snapshot: &Published,
    name: &DomainName,
    fam: Family,
    view: &ClientView,
    seed: u64,
) -> (Part, Option<Outcome>) {
    match snapshot.snapshot.resolve(name, fam, view, seed, &snapshot.health) {
        Resolution::NotManaged => (Part::default(), Some(Outcome::NotManaged)),
        Resolution::Managed(a) => (Part { ips: a.ips, ttl: a.ttl }, Some(Outcome::from_status(a.status))),
    }
}
