//! DNS over HTTPS on the API listener: RFC 8484 (`GET /dns-query?dns=`, `POST /dns-query` with
//! `application/dns-message`) and the JSON API of Google and Cloudflare
//! (`GET /dns-query?name=&type=`, `application/dns-json`). Same answers as plain DNS.

use std::net::IpAddr;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use hickory_proto::op::Message;
use hickory_proto::rr::{RData, RecordType};
use httpdns_dns::{Answer, Context, Frontend, Reply, Transport};

use crate::error::ApiError;
use crate::httpdns::state::HttpdnsState;
use crate::peer::PeerAddr;

const DNS_MESSAGE: &str = "application/dns-message";
const DNS_JSON: &str = "application/dns-json";
const DNS_UDPWIREFORMAT: &str = "application/dns-udpwireformat";

async fn answer(app: &HttpdnsState, wire: &[u8], client: IpAddr) -> Option<Reply> {
    let engine = &app.engine;
    let answered = {
        let published = app.catalog.snapshot();
        let ctx = Context {
            snapshot: &published.snapshot,
            health: &published.health,
            classify: |ip| httpdns_geo::classify_scoped(&published.snapshot, engine.geo(), ip),
            tally: Some((engine.tally(), "doh")),
        };
        httpdns_dns::answer(wire, client, Transport::Encrypted, &ctx)?
    };
    Some(match answered {
        Answer::Reply(r) => r,
        Answer::Forward(f) => {
            let lookup = engine.upstream().lookup(&f.name, f.qtype, f.client).await;
            f.finish(lookup)
        }
    })
}

/// `max-age` from the smallest TTL; `private` when the answer was chosen for this client.
fn cache_control(reply: &Reply) -> HeaderValue {
    let age = reply.min_ttl.unwrap_or(0);
    let scope = if reply.client_dependent { "private" } else { "public" };
    HeaderValue::from_str(&format!("{scope}, max-age={age}")).expect("ascii")
}

pub(crate) async fn handle(
    State(app): State<HttpdnsState>,
    PeerAddr(peer): PeerAddr,
    request: Request,
) -> Response {
    match serve(&app, peer, request).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve(app: &HttpdnsState, peer: IpAddr, request: Request) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    app.guard.charge_client(peer)?;
    let (parts, body) = request.into_parts();
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()).into_owned().collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let wire: Vec<u8> = match parts.method {
        Method::GET | Method::HEAD => {
            if let Some(dns) = get("dns") {
                URL_SAFE_NO_PAD
                    .decode(dns.trim_end_matches('='))
                    .or_else(|_| URL_SAFE.decode(dns))
                    .map_err(|_| ApiError::bad_request("InvalidArgument", "dns", "dns must be base64url"))?
            } else if get("name").is_some() {
                return json(app, peer, &JsonQuery::of(&get), started).await;
            } else {
                return Err(ApiError::bad_request(
                    "MissingArgument",
                    "dns",
                    "missing dns (RFC 8484) or name (JSON API)",
                ));
            }
        }
        Method::POST => {
            let ct = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            // The media type without its parameters, compared without case (RFC 9110 §8.3.1).
            // `application/dns-udpwireformat` is the type of the drafts before RFC 8484, which
            // some clients still send.
            let media = ct.split(';').next().unwrap_or("").trim();
            if !media.eq_ignore_ascii_case(DNS_MESSAGE) && !media.eq_ignore_ascii_case(DNS_UDPWIREFORMAT) {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    format!("POST needs Content-Type: {DNS_MESSAGE}"),
                ));
            }
            let bytes: Bytes = axum::body::to_bytes(body, 65_535).await.map_err(|_| {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "InvalidArgument", "message too large")
            })?;
            bytes.to_vec()
        }
        _ => {
            return Err(ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "use GET or POST"))
        }
    };
    let reply = answer(app, &wire, peer).await;
    app.metrics.dns.observe(Frontend::Doh, reply.as_ref().map(|r| r.rcode), started);
    let reply =
        reply.ok_or_else(|| ApiError::bad_request("InvalidArgument", "dns", "not a DNS query message"))?;
    let mut resp = (StatusCode::OK, reply.bytes.clone()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(DNS_MESSAGE));
    h.insert(header::CACHE_CONTROL, cache_control(&reply));
    Ok(resp)
}

fn record_type(t: Option<&str>) -> Result<RecordType, ApiError> {
    let t = t.unwrap_or("A");
    let rt = match t.parse::<u16>() {
        Ok(n) => RecordType::from(n),
        Err(_) => t.to_ascii_uppercase().parse::<RecordType>().map_err(|_| {
            ApiError::bad_request("InvalidArgument", "type", format!("unknown record type {t:?}"))
        })?,
    };
    Ok(rt)
}

/// `?edns_client_subnet=1.2.3.0/24` (or an address alone: /24 for IPv4, /56 for IPv6).
fn subnet(s: Option<&str>) -> Result<Option<(IpAddr, u8)>, ApiError> {
    let Some(s) = s.filter(|s| !s.is_empty()) else { return Ok(None) };
    let bad = || {
        ApiError::bad_request("InvalidArgument", "edns_client_subnet", "must be an address or address/prefix")
    };
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a.parse::<IpAddr>().map_err(|_| bad())?, Some(p.parse::<u8>().map_err(|_| bad())?)),
        None => (s.parse::<IpAddr>().map_err(|_| bad())?, None),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = prefix.unwrap_or(if addr.is_ipv4() { 24 } else { 56 });
    if prefix > max {
        return Err(bad());
    }
    // The network of the address, as resolvers send it: bits past the prefix would be a
    // malformed option (RFC 7871 §6).
    let net = ipnet::IpNet::new(addr, prefix).map_err(|_| bad())?.trunc();
    Ok(Some((net.addr(), prefix)))
}

/// The parameters of a JSON API question (Google's and Cloudflare's names).
struct JsonQuery<'a> {
    name: Option<&'a str>,
    qtype: Option<&'a str>,
    ecs: Option<&'a str>,
    /// `do=1`: DNSSEC records wanted (the DO bit of the query).
    dnssec_ok: bool,
    /// `cd=1`: checking disabled, echoed in the answer.
    checking_disabled: bool,
}

impl<'a> JsonQuery<'a> {
    fn of(get: &impl Fn(&str) -> Option<&'a str>) -> Self {
        let flag = |k: &str| get(k).is_some_and(|v| matches!(v, "1" | "true"));
        Self {
            name: get("name"),
            qtype: get("type"),
            ecs: get("edns_client_subnet"),
            dnssec_ok: flag("do"),
            checking_disabled: flag("cd"),
        }
    }
}

/// `GET /resolve?name=&type=` (Google's path of the JSON API): as `/dns-query` with
/// `Accept: application/dns-json`.
pub(crate) async fn google_json(app: &HttpdnsState, peer: IpAddr, query: &str) -> Response {
    if let Err(e) = app.guard.charge_client(peer) {
        return ApiError::from(e).into_response();
    }
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    match json(app, peer, &JsonQuery::of(&get), std::time::Instant::now()).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn json(
    app: &HttpdnsState,
    peer: IpAddr,
    q: &JsonQuery<'_>,
    started: std::time::Instant,
) -> Result<Response, ApiError> {
    let name = q
        .name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request("MissingArgument", "name", "missing name"))?;
    let qtype = record_type(q.qtype)?;
    let fqdn = if name.ends_with('.') { name.to_owned() } else { format!("{name}.") };
    let flags = httpdns_dns::QueryFlags { dnssec_ok: q.dnssec_ok, checking_disabled: q.checking_disabled };
    let wire = httpdns_dns::build_query_with(0, &fqdn, qtype, subnet(q.ecs)?, flags)
        .ok_or_else(|| ApiError::bad_request("InvalidHost", "name", "not a domain name"))?;
    let reply = answer(app, &wire, peer).await;
    app.metrics.dns.observe(Frontend::DohJson, reply.as_ref().map(|r| r.rcode), started);
    let reply = reply.ok_or_else(|| ApiError::internal(&"no DNS reply"))?;
    let msg = Message::from_vec(&reply.bytes).map_err(|e| ApiError::internal(&e))?;
    let rr = |r: &hickory_proto::rr::Record| {
        let data = match &r.data {
            RData::A(a) => a.0.to_string(),
            RData::AAAA(a) => a.0.to_string(),
            RData::SOA(s) => format!(
                "{} {} {} {} {} {} {}",
                s.mname, s.rname, s.serial, s.refresh, s.retry, s.expire, s.minimum
            ),
            other => other.to_string(),
        };
        serde_json::json!({"name": r.name.to_ascii(), "type": u16::from(r.record_type()), "TTL": r.ttl, "data": data})
    };
    let m = &msg.metadata;
    let mut body = serde_json::json!({
        "Status": u16::from(m.response_code),
        "TC": m.truncation, "RD": m.recursion_desired, "RA": m.recursion_available,
        "AD": false, "CD": m.checking_disabled,
        "Question": msg.queries.iter().map(|q| serde_json::json!({"name": q.name().to_ascii(), "type": u16::from(q.query_type())})).collect::<Vec<_>>(),
    });
    if !msg.answers.is_empty() {
        body["Answer"] = msg.answers.iter().map(rr).collect();
    }
    if !msg.authorities.is_empty() {
        body["Authority"] = msg.authorities.iter().map(rr).collect();
    }
    if let Some(s) = q.ecs.filter(|s| !s.is_empty()) {
        body["edns_client_subnet"] = serde_json::Value::String(s.to_owned());
    }
    let mut resp = (StatusCode::OK, serde_json::to_vec(&body).unwrap_or_default()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(DNS_JSON));
    h.insert(header::CACHE_CONTROL, cache_control(&reply));
    Ok(resp)
}
