//! `GET /resolve`: the Alibaba-shaped JSON API.
//!
//! ```json
//! {"dns":[{"host":"www.example.com","client_ip":"1.2.3.4","ips":["1.1.1.1"],
//!          "ipsv6":["2400:3200::1"],"ttl":60,"origin_ttl":60}]}
//! ```
//!
//! `ips` is present when `query` includes 4 (the default), `ipsv6` when it includes 6. Errors
//! are `{"code":"InvalidHost", ...}` with 400, 405 or 500, as Alibaba's codes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use httpdns_core::{DomainName, Family};
use serde::Serialize;

use crate::answer::Question;
use crate::dnspod::{status_header, STATUS_HEADER};
use crate::error::ApiError;
use crate::metrics::{Endpoint, Outcome};
use crate::state::{AppState, PeerAddr};

/// At most this many hosts per request, as Alibaba's `/resolve`.
pub const MAX_HOSTS: usize = 5;

/// TTL given to an empty answer, so clients ask again soon but not in a loop.
pub const EMPTY_TTL: u32 = 30;

#[derive(Debug, Clone, PartialEq, Eq)]
struct ResolveRequest {
    hosts: Vec<DomainName>,
    v4: bool,
    v6: bool,
    ip: Option<IpAddr>,
    /// `labels=1`: add `client_isp` and `ip_isp` (an extension; off keeps Alibaba's shape).
    labels: bool,
}

/// A comma-separated list of at most [`MAX_HOSTS`] names in parameter `field` (`host` of
/// `/resolve`, `dn` of `/v2/d`): each as sent (answers echo it) and parsed.
pub(crate) fn name_list<'a>(
    value: Option<&'a str>,
    field: &'static str,
) -> Result<Vec<(&'a str, DomainName)>, ApiError> {
    let value = value.filter(|v| !v.is_empty()).ok_or_else(|| {
        ApiError::bad_request(
            "MissingArgument",
            field,
            format!("missing {field}: the domain names to resolve"),
        )
    })?;
    let parts: Vec<&str> = value.split(',').collect();
    if parts.len() > MAX_HOSTS {
        return Err(ApiError::bad_request(
            "TooManyHosts",
            field,
            format!("at most {MAX_HOSTS} names per request"),
        ));
    }
    parts
        .into_iter()
        .map(|h| {
            DomainName::parse(h)
                .map(|name| (h, name))
                .map_err(|e| ApiError::bad_request("InvalidHost", field, format!("{h:.80?}: {e}")))
        })
        .collect()
}

/// The address families asked for in parameter `field` (`query` of `/resolve`, `q` of
/// `/v2/d`): `4` (also when absent or empty), `6`, or both. Returns (v4, v6).
pub(crate) fn families(value: Option<&str>, field: &'static str) -> Result<(bool, bool), ApiError> {
    match value.unwrap_or("4") {
        "" | "4" => Ok((true, false)),
        "6" => Ok((false, true)),
        "4,6" | "6,4" => Ok((true, true)),
        _ => Err(ApiError::bad_request("InvalidArgument", field, format!("{field} must be 4, 6 or 4,6"))),
    }
}

fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<ResolveRequest, ApiError> {
    let (mut host, mut query, mut ip, mut labels) = (None, None, None, None);
    for (k, v) in pairs {
        let slot = match k {
            "host" => &mut host,
            "query" => &mut query,
            "ip" => &mut ip,
            "labels" => &mut labels,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v);
        }
    }
    let hosts = name_list(host, "host")?.into_iter().map(|(_, name)| name).collect::<Vec<_>>();
    let (v4, v6) = families(query, "query")?;
    // As on /d: an unusable `ip=` falls back to the connection's address.
    let ip = ip.and_then(|s| s.parse::<IpAddr>().ok()).map(|a| a.to_canonical());
    let labels = matches!(labels, Some("1" | "true"));
    Ok(ResolveRequest { hosts, v4, v6, ip, labels })
}

#[derive(Serialize)]
struct Entry {
    host: String,
    client_ip: String,
    /// Alibaba's batch answers one element per (host, type) when both families are asked:
    /// `1` (A) or `28` (AAAA), the addresses in `ips` either way.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    rtype: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ips: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ipsv6: Option<Vec<String>>,
    ttl: u32,
    origin_ttl: u32,
    /// With `labels=1`: the client's carrier as classified here, when known (an extension of
    /// Alibaba's format: clients drop nodes labelled with another carrier).
    #[serde(skip_serializing_if = "Option::is_none")]
    client_isp: Option<String>,
    /// With `labels=1`: the carrier of each managed node answered.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    ip_isp: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Body {
    dns: Vec<Entry>,
}

pub(crate) async fn handle(
    State(app): State<AppState>,
    PeerAddr(peer): PeerAddr,
    method: Method,
    uri: Uri,
) -> Response {
    let started = Instant::now();
    // Google's JSON API lives at /resolve too: `name=` without `host=`.
    let pairs: Vec<_> = crate::form::query(uri.query()).collect();
    let has = |k: &str| pairs.iter().any(|(n, _)| n == k);
    if has("name") && !has("host") {
        return crate::doh::google_json(&app, peer, uri.query().unwrap_or("")).await;
    }
    let resp = answer(&app, peer, &method, &pairs, started).await;
    app.metrics.http_answer_request(crate::metrics::Route::Resolve, resp.status());
    resp
}

async fn answer(
    app: &AppState,
    peer: IpAddr,
    method: &Method,
    pairs: &[(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)],
    started: Instant,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "use GET").into_response();
    }
    if app.settings.auth_required {
        return forbidden(
            "UnsignedInterfaceDisabled",
            "this server answers signed requests only: use /{account}/sign_resolve",
        )
        .into_response();
    }
    if !allow_client(app, peer) {
        return client_throttled().into_response();
    }
    match entries(app, app.catalog.snapshot_full(), peer, pairs, started, Shape::Batch).await {
        Ok((_, outcomes)) if outcomes.contains(&Outcome::UpstreamError) => upstream_failed(&outcomes),
        Ok((dns, outcomes)) => json(&Body { dns }, &outcomes),
        Err(e) => e.into_response(),
    }
}

/// The answer's shape: one object (`/d`, `sign_d`), or the `dns` list (`/resolve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Single,
    Batch,
}

/// Resolves the `host` list of a request for one client.
async fn entries(
    app: &AppState,
    published: std::sync::Arc<httpdns_catalog::Published>,
    peer: IpAddr,
    pairs: &[(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)],
    started: Instant,
    shape: Shape,
) -> Result<(Vec<Entry>, Vec<Outcome>), ApiError> {
    let req = parse(pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))?;
    if shape == Shape::Single && req.hosts.len() > 1 {
        return Err(ApiError::bad_request(
            "TooManyHosts",
            "host",
            "d answers one host; use resolve for several",
        ));
    }
    let client = req.ip.unwrap_or(peer);
    // `app_version` and `tag` (comma-separated, repeatable) for the domains' rules.
    let value = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_ref());
    let tags = pairs.iter().filter(|(n, _)| n == "tag").map(|(_, v)| v.as_ref());
    let attrs = crate::answer::client_attrs(value("app_version"), tags);
    let question = Question { names: &req.hosts, v4: req.v4, v6: req.v6, client, attrs: &attrs };
    let found = crate::answer::answer(app, published, question).await;
    let client_ip = client.to_string();
    let client_isp = found.view.isp.as_ref().filter(|_| req.labels).map(ToString::to_string);
    // Several hosts with both families: one element per (host, type), as Alibaba's batch;
    // one host keeps both families in one element.
    let per_type = shape == Shape::Batch && req.hosts.len() > 1 && req.v4 && req.v6;
    let mut dns = Vec::with_capacity(req.hosts.len() * (1 + usize::from(per_type)));
    for (host, a) in req.hosts.iter().zip(&found.names) {
        let texts = |f: Option<&crate::answer::FamilyAnswer>| {
            f.map(|f| f.ips.iter().map(ToString::to_string).collect::<Vec<_>>())
        };
        let labels = |fams: &[Family]| -> BTreeMap<String, String> {
            if !req.labels {
                return BTreeMap::new();
            }
            fams.iter()
                .filter_map(|fam| a.family(*fam))
                .flat_map(|f| f.ips.iter())
                .filter_map(|ip| Some((ip.to_string(), found.isp_of(*ip)?)))
                .collect()
        };
        let entry = |rtype, ips, ipsv6, ttl: Option<u32>, ip_isp| Entry {
            host: host.to_string(),
            client_ip: client_ip.clone(),
            rtype,
            ips,
            ipsv6,
            ttl: ttl.unwrap_or(EMPTY_TTL),
            origin_ttl: ttl.unwrap_or(EMPTY_TTL),
            client_isp: client_isp.clone(),
            ip_isp,
        };
        if per_type {
            for (fam, rtype) in [(Family::V4, 1), (Family::V6, 28)] {
                let f = a.family(fam);
                let ttl = f.filter(|f| !f.ips.is_empty()).map(|f| f.ttl);
                dns.push(entry(Some(rtype), texts(f), None, ttl, labels(&[fam])));
            }
        } else {
            dns.push(entry(
                None,
                texts(a.v4.as_ref()).filter(|_| req.v4),
                texts(a.v6.as_ref()).filter(|_| req.v6),
                a.ttl(),
                labels(&[Family::V4, Family::V6]),
            ));
        }
    }
    found.count(app, Endpoint::Resolve, &req.hosts, started);
    Ok((dns, found.outcomes()))
}

/// A name that is not managed here could not be resolved upstream: a 502 rather than an empty
/// list the client would cache.
fn upstream_failed(outcomes: &[Outcome]) -> Response {
    let mut resp =
        ApiError::new(StatusCode::BAD_GATEWAY, "InternalError", "upstream DNS resolution failed; try again")
            .into_response();
    resp.headers_mut().insert(STATUS_HEADER, status_header(outcomes));
    resp
}

fn json(body: &impl Serialize, outcomes: &[Outcome]) -> Response {
    let body = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    h.insert(STATUS_HEADER, status_header(outcomes));
    resp
}

/// Largest signature validity accepted: a `t` further ahead is `InvalidDuration`.
const MAX_SIGNATURE_VALIDITY_S: i64 = 86_400;

/// Which Alibaba account endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccountApi {
    D,
    Resolve,
    SignD,
    SignResolve,
}

/// `429 Throttled`: the account's rate limit is reached.
pub(crate) fn throttled() -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "Throttled", "the account's rate limit is reached")
}

/// `/{account_id}/d|resolve|sign_d|sign_resolve`: Alibaba's account-scoped API.
pub(crate) async fn account(
    State(app): State<AppState>,
    PeerAddr(peer): PeerAddr,
    Path((account, api)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    reached: crate::service_ips::Reached,
) -> Response {
    let started = Instant::now();
    let api = match api.as_str() {
        "d" => AccountApi::D,
        "resolve" => AccountApi::Resolve,
        "sign_d" => AccountApi::SignD,
        "sign_resolve" => AccountApi::SignResolve,
        "ss" => return crate::service_ips::account(&app, peer, &method, &account, reached),
        _ => return ApiError::not_found("no such endpoint").into_response(),
    };
    let resp = if method != Method::GET && method != Method::HEAD {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "use GET").into_response()
    } else {
        let pairs: Vec<_> = crate::form::query(uri.query()).collect();
        match account_answer(&app, peer, &account, api, &pairs, started).await {
            Ok(r) => r,
            Err(e) => e.into_response(),
        }
    };
    app.metrics.http_answer_request(crate::metrics::Route::Resolve, resp.status());
    resp
}

/// Applies an account's `rate_limit_qps` (a burst of one second's worth).
pub(crate) fn allow_account(app: &AppState, id: u32, qps: Option<u32>) -> bool {
    let ok = qps.is_none_or(|q| app.account_limits.allow_at(id, f64::from(q), f64::from(q)));
    if !ok {
        app.metrics.rate_limited.with_label_values(&["account"]).inc();
    }
    ok
}

/// The per-address limit of unauthenticated calls, keyed by the connection's client (the
/// peer, or what a trusted proxy said), never by the `ip=` a request names.
pub(crate) fn allow_client(app: &AppState, peer: IpAddr) -> bool {
    let Some((rate, burst)) = app.settings.client_rate_limit else { return true };
    let ok = app.client_limits.allow_at(peer, rate, burst);
    if !ok {
        app.metrics.rate_limited.with_label_values(&["client"]).inc();
    }
    ok
}

/// The 429 of a client over its per-address limit.
pub(crate) fn client_throttled() -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "Throttled",
        "too many requests from this address; slow down",
    )
}

pub(crate) fn forbidden(code: &'static str, message: &str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, code, message)
}

/// Checks Alibaba's signature `s = md5(content-secret-t)` with its expiry `t` (Unix seconds,
/// in the future and at most a day ahead), the codes as Alibaba's service answers them.
pub(crate) fn verify_signature(
    secret: &str,
    content: &str,
    t: Option<&str>,
    s: Option<&str>,
) -> Result<(), ApiError> {
    let t = t.ok_or_else(|| ApiError::bad_request("MissingArgument", "t", "missing t: the expiry time"))?;
    let s = s.ok_or_else(|| ApiError::bad_request("MissingArgument", "s", "missing s: the signature"))?;
    let expiry: i64 =
        t.parse().map_err(|_| ApiError::bad_request("InvalidArgument", "t", "t must be Unix seconds"))?;
    let now = httpdns_core::clock::unix_s() as i64;
    if expiry < now {
        return Err(forbidden("SignatureExpired", "the signature's expiry time has passed"));
    }
    if expiry - now > MAX_SIGNATURE_VALIDITY_S {
        return Err(forbidden("InvalidDuration", "the signature is valid for too long (at most one day)"));
    }
    let expected = httpdns_auth::alibaba_signature(content, secret, t);
    if !httpdns_auth::constant_time_eq(expected.as_bytes(), s.to_ascii_lowercase().as_bytes()) {
        return Err(forbidden("InvalidSignature", "the signature does not match"));
    }
    Ok(())
}

async fn account_answer(
    app: &AppState,
    peer: IpAddr,
    account: &str,
    api: AccountApi,
    pairs: &[(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)],
    started: Instant,
) -> Result<Response, ApiError> {
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_ref());
    // One snapshot for the whole request: the account checked and the answer agree.
    let snapshot = app.catalog.snapshot_full();
    let id = httpdns_core::model::parse_account_id(account)
        .map_err(|_| forbidden("InvalidAccount", "no such account"))?;
    let spec = snapshot
        .account(id)
        .filter(|a| a.enabled)
        .ok_or_else(|| forbidden("InvalidAccount", "no such account"))?;
    let signed = matches!(api, AccountApi::SignD | AccountApi::SignResolve);
    if !signed && app.settings.auth_required {
        return Err(forbidden("UnsignedInterfaceDisabled", "this server answers signed requests only"));
    }
    if signed {
        let host = get("host").filter(|h| !h.is_empty()).ok_or_else(|| {
            ApiError::bad_request("MissingArgument", "host", "missing host: the domain name to resolve")
        })?;
        verify_signature(&spec.secret, host, get("t"), get("s"))?;
    }
    // Charged only once the request is authenticated: forged requests naming a public
    // account id must not spend the app's quota.
    if !allow_account(app, id, spec.rate_limit_qps) {
        return Err(throttled());
    }
    let single = matches!(api, AccountApi::D | AccountApi::SignD);
    let shape = if single { Shape::Single } else { Shape::Batch };
    let (mut dns, outcomes) = entries(app, snapshot, peer, pairs, started, shape).await?;
    if outcomes.contains(&Outcome::UpstreamError) {
        return Ok(upstream_failed(&outcomes));
    }
    Ok(if single { json(&dns.remove(0), &outcomes) } else { json(&Body { dns }, &outcomes) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(q: &str) -> Result<ResolveRequest, ApiError> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(q.as_bytes()).into_owned().collect();
        parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    #[test]
    fn parses_hosts_and_query() {
        let r = p("host=a.com,b.com&query=4,6&ip=1.2.3.4").unwrap();
        assert_eq!(r.hosts.len(), 2);
        assert!(r.v4 && r.v6);
        assert_eq!(p("host=a.com").map(|r| (r.v4, r.v6)).unwrap(), (true, false));
        assert_eq!(p("host=a.com&query=6").map(|r| (r.v4, r.v6)).unwrap(), (false, true));
    }

    #[test]
    fn error_codes() {
        assert_eq!(p("").unwrap_err().code, "MissingArgument");
        assert_eq!(p("host=").unwrap_err().code, "MissingArgument");
        assert_eq!(p("host=a..b").unwrap_err().code, "InvalidHost");
        assert_eq!(p("host=a,b,c,d,e,f").unwrap_err().code, "TooManyHosts");
        let e = p("host=a.com&query=5").unwrap_err();
        assert_eq!((e.code, e.field.as_deref()), ("InvalidArgument", Some("query")));
    }
}
