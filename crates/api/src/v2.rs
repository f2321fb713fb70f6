//! `GET /v2/d`: Alibaba's v2 API, as the Android (2.6.x), iOS (3.x) and Node.js SDKs call it.
//!
//! ```text
//! /v2/d?id=<account>&m=0&dn=a.com[,b.com…≤5][&q=4|6|4,6][&cip=<ip>][&sdns-k=v][&tags=…]&v=1.0&exp=<unix>[&s=<hmac>]
//! /v2/d?id=<account>&m=1|2&enc=<hex(IV‖ciphertext)>&v=1.0&exp=<unix>[&s=<hmac>]
//! ```
//!
//! ```json
//! {"code":"success","mode":0,"data":{"cip":"1.2.3.4","answers":[
//!   {"dn":"a.com","v4":{"ips":["1.1.1.1"],"ttl":60},"v6":{"ips":[],"ttl":60,"no_ip_code":"RRNotExist"}}]}}
//! ```
//!
//! In modes 1 and 2 `data` is `base64(IV ‖ ciphertext)` of that object, under the account's
//! `aes_key` (see [`httpdns_auth::aliyun_v2`]). Errors are non-200 with `{"code": ...}`: the
//! SDKs treat a 200 with another code as a network failure and switch servers.
//!
//! What the SDKs need (read from their sources, `docs/api.md` has the table): `q` defaults to
//! `4` (Android omits it for IPv4); every requested family gets an object, empty ones with
//! `no_ip_code`, and a `ttl` above zero; `dn` is echoed exactly as sent (the SDKs look answers
//! up by string equality); `mode` repeats the request's.

use std::net::IpAddr;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use httpdns_auth::aliyun_v2::{self, AesKey, Mode};
use httpdns_core::DomainName;
use serde::Serialize;

use httpdns_answer::{Endpoint, FamilyAnswer, Question};

use crate::error::ApiError;
use crate::httpdns::state::HttpdnsState;
use crate::httpdns::status::{status_header, STATUS_HEADER};
use crate::peer::PeerAddr;
use crate::resolve::{families, name_list, EMPTY_TTL};

/// Largest signature validity accepted (`exp` further ahead is `InvalidDuration`).
const MAX_VALIDITY_S: i64 = 86_400;

/// The hidden parameters of an encrypted request (`enc`'s JSON); the SDKs send strings.
#[derive(Debug, Default, serde::Deserialize)]
struct Hidden {
    dn: Option<String>,
    q: Option<String>,
    cip: Option<String>,
}

/// What a `/v2/d` request asks, parsed and checked.
#[derive(Debug)]
struct V2Request {
    mode: u8,
    /// The names as sent, for the echo.
    echo: Vec<String>,
    names: Vec<DomainName>,
    v4: bool,
    v6: bool,
    cip: Option<IpAddr>,
}

fn parse_names(dn: Option<&str>) -> Result<(Vec<String>, Vec<DomainName>), ApiError> {
    Ok(name_list(dn, "dn")?.into_iter().map(|(sent, name)| (sent.to_owned(), name)).unzip())
}

fn parse_q(q: Option<&str>) -> Result<(bool, bool), ApiError> {
    families(q, "q")
}

fn parse_cip(cip: Option<&str>) -> Result<Option<IpAddr>, ApiError> {
    match cip.filter(|c| !c.is_empty()) {
        None => Ok(None),
        Some(c) => c
            .parse::<IpAddr>()
            .map(|a| Some(a.to_canonical()))
            .map_err(|_| ApiError::bad_request("InvalidArgument", "cip", "cip must be an IP address")),
    }
}

type Pairs<'a> = [(std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>)];

/// Checks the account, the signature and the expiry, decrypts `enc`, and parses the question.
/// Returns the request and, for modes 1 and 2, the key to seal the answer with.
fn authenticate(
    app: &HttpdnsState,
    snapshot: &httpdns_catalog::Published,
    pairs: &Pairs<'_>,
) -> Result<(V2Request, Option<(Mode, AesKey)>), ApiError> {
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_ref());
    let id = get("id")
        .filter(|i| !i.is_empty())
        .ok_or_else(|| ApiError::bad_request("MissingArgument", "id", "missing id: the account id"))?;
    let invalid = || ApiError::forbidden("InvalidAccount", "no such account").with_field("id");
    let id = httpdns_core::model::parse_account_id(id).map_err(|_| invalid())?;
    let account = snapshot.account(id).filter(|a| a.enabled).ok_or_else(invalid)?;
    let mode = match get("m").unwrap_or("0") {
        "" | "0" => 0,
        "1" => 1,
        "2" => 2,
        _ => return Err(ApiError::bad_request("InvalidArgument", "m", "m must be 0, 1 or 2")),
    };
    match get("s").filter(|s| !s.is_empty()) {
        Some(s) => {
            let exp = get("exp").filter(|e| !e.is_empty()).ok_or_else(|| {
                ApiError::bad_request("MissingArgument", "exp", "a signed request needs exp, its expiry time")
            })?;
            let exp: i64 = exp
                .parse()
                .map_err(|_| ApiError::bad_request("InvalidArgument", "exp", "exp must be Unix seconds"))?;
            let now = httpdns_core::clock::unix_s() as i64;
            if exp < now {
                return Err(ApiError::forbidden(
                    "SignatureExpired",
                    "the signature's expiry time has passed",
                )
                .with_field("exp"));
            }
            if exp - now > MAX_VALIDITY_S {
                return Err(ApiError::forbidden(
                    "InvalidDuration",
                    "the signature is valid for too long (at most one day)",
                )
                .with_field("exp"));
            }
            let canonical = aliyun_v2::canonical(pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref())));
            let expected = aliyun_v2::signature(&account.secret, &canonical);
            if !httpdns_auth::constant_time_eq(expected.as_bytes(), s.to_ascii_lowercase().as_bytes()) {
                return Err(
                    ApiError::forbidden("InvalidSignature", "the signature does not match").with_field("s")
                );
            }
        }
        None if app.guard.auth_required() => {
            return Err(ApiError::forbidden(
                "UnsignedInterfaceDisabled",
                "this server answers signed requests only",
            ))
        }
        None => {}
    }
    // Charged only once the request is authenticated: forged requests naming a public
    // account id must not spend the app's quota.
    app.guard.charge_account(id, account.rate_limit_qps)?;
    if mode == 0 {
        let (echo, names) = parse_names(get("dn"))?;
        let (v4, v6) = parse_q(get("q"))?;
        let cip = parse_cip(get("cip"))?;
        return Ok((V2Request { mode, echo, names, v4, v6, cip }, None));
    }
    let cipher = if mode == 1 { Mode::Cbc } else { Mode::Gcm };
    let key = account.aes_key.as_deref().and_then(|k| AesKey::from_hex(k).ok()).ok_or_else(|| {
        ApiError::forbidden("EncryptionNotEnabled", "the account has no aes_key: use m=0 or set one")
            .with_field("m")
    })?;
    let enc = get("enc").filter(|e| !e.is_empty()).ok_or_else(|| {
        ApiError::bad_request("MissingArgument", "enc", "m=1 and m=2 carry the question in enc")
    })?;
    // Decrypted and read as one step with one failure, whatever failed (the padding, the JSON,
    // a name, `q`, `cip`): an answer that told them apart would be a padding oracle on CBC.
    let read = |plain: &[u8]| -> Option<V2Request> {
        let hidden: Hidden = serde_json::from_slice(plain).ok()?;
        let (echo, names) = parse_names(hidden.dn.as_deref()).ok()?;
        let (v4, v6) = parse_q(hidden.q.as_deref()).ok()?;
        // `cip` may come in the clear beside `enc`, or inside it.
        let cip = parse_cip(hidden.cip.as_deref().or(get("cip"))).ok()?;
        Some(V2Request { mode, echo, names, v4, v6, cip })
    };
    let request = aliyun_v2::open_with(cipher, &key, enc, read).map_err(|_| {
        ApiError::bad_request(
            "InvalidArgument",
            "enc",
            "enc does not decrypt with the account's aes_key to a question (a JSON object with dn, and q and cip when given, valid)",
        )
    })?;
    Ok((request, Some((cipher, key))))
}

#[derive(Serialize)]
struct FamilyJson {
    ips: Vec<String>,
    ttl: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_ip_code: Option<&'static str>,
}

#[derive(Serialize)]
struct AnswerJson<'a> {
    dn: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    v4: Option<FamilyJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    v6: Option<FamilyJson>,
}

#[derive(Serialize)]
struct Data<'a> {
    cip: String,
    answers: Vec<AnswerJson<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Payload<'a> {
    Plain(Data<'a>),
    Sealed(String),
}

#[derive(Serialize)]
struct Envelope<'a> {
    code: &'static str,
    mode: u8,
    data: Payload<'a>,
}

fn family(f: Option<&FamilyAnswer>, domain_ttl: Option<u32>) -> Option<FamilyJson> {
    let f = f?;
    Some(if f.ips.is_empty() {
        // An empty family still needs a TTL above zero (Android reads 0 as 60 s, iOS as 0).
        FamilyJson {
            ips: Vec::new(),
            ttl: domain_ttl.unwrap_or(EMPTY_TTL).max(1),
            no_ip_code: Some("RRNotExist"),
        }
    } else {
        FamilyJson {
            ips: f.ips.iter().map(ToString::to_string).collect(),
            ttl: f.ttl.max(1),
            no_ip_code: None,
        }
    })
}

/// The client's attributes for the domains' rules: the app version from `sdns-app_version`,
/// else `v` (the SDKs send their protocol version there, `1.0`, unless the app sets its own),
/// and tags from `tags` and `sdns-tag` (comma-separated). They are in the clear in every mode.
fn attrs(pairs: &Pairs<'_>) -> httpdns_core::schedule::ClientAttrs {
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_ref());
    let version = get("sdns-app_version").filter(|v| !v.is_empty()).or(get("v"));
    let tags = pairs.iter().filter(|(n, _)| n == "tags" || n == "sdns-tag").map(|(_, v)| v.as_ref());
    httpdns_answer::client_attrs(version, tags)
}

pub(crate) async fn handle(
    State(app): State<HttpdnsState>,
    PeerAddr(peer): PeerAddr,
    method: Method,
    uri: Uri,
) -> Response {
    let started = Instant::now();
    let resp = if method != Method::GET && method != Method::HEAD {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "use GET").into_response()
    } else {
        let pairs: Vec<_> = crate::form::query(uri.query()).collect();
        answer(&app, peer, &pairs, started).await.unwrap_or_else(IntoResponse::into_response)
    };
    app.metrics.http_answer_request(crate::metrics::Route::V2, resp.status());
    resp
}

async fn answer(
    app: &HttpdnsState,
    peer: IpAddr,
    pairs: &Pairs<'_>,
    started: Instant,
) -> Result<Response, ApiError> {
    // One snapshot for the whole request: the account checked and the answer agree.
    let published = app.catalog.snapshot_full();
    let (req, seal) = authenticate(app, &published, pairs)?;
    let client = req.cip.unwrap_or(peer);
    let attrs = attrs(pairs);
    let question = Question { names: &req.names, v4: req.v4, v6: req.v6, client, attrs: &attrs };
    let found = app.engine.answer(published, question).await;
    app.engine.count(&found, Endpoint::V2, &req.names, started);
    let outcomes = found.outcomes();
    if found.upstream_failed() {
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "InternalError",
            "upstream DNS resolution failed; try again",
        ));
    }
    let answers = req
        .echo
        .iter()
        .zip(&found.names)
        .map(|(dn, a)| AnswerJson {
            dn,
            v4: family(a.v4.as_ref(), a.domain_ttl),
            v6: family(a.v6.as_ref(), a.domain_ttl),
        })
        .collect();
    let data = Data { cip: client.to_string(), answers };
    let data = match seal {
        None => Payload::Plain(data),
        Some((mode, key)) => {
            let plain = serde_json::to_vec(&data).map_err(|e| ApiError::internal(&e))?;
            Payload::Sealed(
                aliyun_v2::seal(mode, &key, &plain).map_err(|_| ApiError::internal(&"AES seal failed"))?,
            )
        }
    };
    let body = serde_json::to_vec(&Envelope { code: "success", mode: req.mode, data })
        .map_err(|e| ApiError::internal(&e))?;
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    h.insert(STATUS_HEADER, status_header(&outcomes));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use httpdns_answer::Outcome;

    #[test]
    fn names_and_families() {
        let (echo, names) = parse_names(Some("WWW.A.com,b.com")).unwrap();
        assert_eq!(echo, ["WWW.A.com", "b.com"], "echoed as sent");
        assert_eq!(names[0].to_string(), "www.a.com");
        assert_eq!(parse_names(None).unwrap_err().code, "MissingArgument");
        assert_eq!(parse_names(Some("a,b,c,d,e,f")).unwrap_err().code, "TooManyHosts");
        assert_eq!(parse_names(Some("a..b")).unwrap_err().code, "InvalidHost");
        assert_eq!(parse_q(None).unwrap(), (true, false), "Android omits q for IPv4");
        assert_eq!(parse_q(Some("4,6")).unwrap(), (true, true));
        assert_eq!(parse_q(Some("6")).unwrap(), (false, true));
        assert_eq!(parse_q(Some("5")).unwrap_err().field.as_deref(), Some("q"));
        assert_eq!(parse_cip(Some("x")).unwrap_err().field.as_deref(), Some("cip"));
        assert_eq!(parse_cip(Some("")).unwrap(), None);
    }

    #[test]
    fn empty_families_say_why_and_keep_a_ttl() {
        let empty = FamilyAnswer { ips: vec![], ttl: 0, outcome: Outcome::NoRecord };
        let f = family(Some(&empty), None).unwrap();
        assert_eq!((f.ttl, f.no_ip_code), (EMPTY_TTL, Some("RRNotExist")));
        let full = FamilyAnswer { ips: vec!["1.1.1.1".parse().unwrap()], ttl: 0, outcome: Outcome::Ok };
        assert_eq!(family(Some(&full), None).unwrap().ttl, 1, "never 0");
        assert!(family(None, None).is_none(), "a family not asked is absent");
    }
}
