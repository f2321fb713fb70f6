//! `GET /resolve`: the Alibaba-shaped JSON API.
//!
//! ```json
//! {"dns":[{"host":"www.example.com","client_ip":"1.2.3.4","ips":["1.1.1.1"],
//!          "ipsv6":["2400:3200::1"],"ttl":60,"origin_ttl":60}]}
//! ```
//!
//! `ips` is present when `query` includes 4 (the default), `ipsv6` when it includes 6. Errors
//! are `{"code":"InvalidHost", ...}` with 400, 405 or 500, as Alibaba's codes.

use std::net::IpAddr;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use httpdns_core::{DomainName, Family};
use serde::Serialize;

use crate::dnspod::{family, status_header, STATUS_HEADER};
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
}

fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<ResolveRequest, ApiError> {
    let (mut host, mut query, mut ip) = (None, None, None);
    for (k, v) in pairs {
        let slot = match k {
            "host" => &mut host,
            "query" => &mut query,
            "ip" => &mut ip,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(v);
        }
    }
    let host = host.filter(|h| !h.is_empty()).ok_or_else(|| {
        ApiError::bad_request("MissingArgument", "host", "missing host: the domain name to resolve")
    })?;
    let parts: Vec<&str> = host.split(',').collect();
    if parts.len() > MAX_HOSTS {
        return Err(ApiError::bad_request(
            "TooManyHosts",
            "host",
            format!("at most {MAX_HOSTS} hosts per request"),
        ));
    }
    let hosts = parts
        .into_iter()
        .map(|h| {
            DomainName::parse(h)
                .map_err(|e| ApiError::bad_request("InvalidHost", "host", format!("{h:.80?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (v4, v6) = match query.unwrap_or("4") {
        "" | "4" => (true, false),
        "6" => (false, true),
        "4,6" | "6,4" => (true, true),
        _ => return Err(ApiError::bad_request("InvalidArgument", "query", "query must be 4, 6 or 4,6")),
    };
    // As on /d: an unusable `ip=` falls back to the connection's address.
    let ip = ip.and_then(|s| s.parse::<IpAddr>().ok()).map(|a| a.to_canonical());
    Ok(ResolveRequest { hosts, v4, v6, ip })
}

#[derive(Serialize)]
struct Entry {
    host: String,
    client_ip: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    ips: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ipsv6: Option<Vec<String>>,
    ttl: u32,
    origin_ttl: u32,
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
    let resp = answer(&app, peer, &method, uri.query(), started);
    app.metrics.http_answer_request(crate::metrics::Route::Resolve, resp.status());
    resp
}

fn answer(app: &AppState, peer: IpAddr, method: &Method, query: Option<&str>, started: Instant) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "use GET").into_response();
    }
    let pairs: Vec<_> = form_urlencoded::parse(query.unwrap_or("").as_bytes()).collect();
    let req = match parse(pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let client = req.ip.unwrap_or(peer);
    let snapshot = app.catalog.snapshot();
    let view = httpdns_geo::classify(&snapshot, &app.geo, client);
    let seed = httpdns_core::snapshot::client_seed(client);
    let client_ip = client.to_string();
    let mut dns = Vec::with_capacity(req.hosts.len());
    let mut outcomes = Vec::with_capacity(req.hosts.len());
    for host in &req.hosts {
        let mut ttl = None::<u32>;
        let mut outcome = None::<Outcome>;
        let mut take = |fam: Family| {
            let (part, o) = family(&snapshot, host, fam, &view, seed);
            if !part.ips.is_empty() {
                ttl = Some(ttl.map_or(part.ttl, |t| t.min(part.ttl)));
            }
            if let Some(o) = o {
                outcome = Some(match outcome {
                    Some(prev) if rank(prev) <= rank(o) => prev,
                    _ => o,
                });
            }
            part.ips.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        let ips = req.v4.then(|| take(Family::V4));
        let ipsv6 = req.v6.then(|| take(Family::V6));
        let ttl = ttl.unwrap_or(EMPTY_TTL);
        outcomes.push(outcome.unwrap_or(Outcome::NotManaged));
        dns.push(Entry {
            host: host.to_string(),
            client_ip: client_ip.clone(),
            ips,
            ipsv6,
            ttl,
            origin_ttl: ttl,
        });
    }
    for o in &outcomes {
        app.metrics.answer(Endpoint::Resolve, *o);
    }
    app.metrics.answer_time(Endpoint::Resolve, started.elapsed());
    let body = serde_json::to_vec(&Body { dns }).unwrap_or_default();
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    h.insert(STATUS_HEADER, status_header(&outcomes));
    resp
}

fn rank(o: Outcome) -> usize {
    Outcome::ALL.iter().position(|x| *x == o).unwrap_or(usize::MAX)
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
