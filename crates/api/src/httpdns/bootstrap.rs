//! The service-IP lists clients bootstrap from, as the httpdns routes answer them: Alibaba's
//! `/{account}/ss` (and `/ss`) and Tencent's `/conf`. The lists themselves are kept by
//! [`crate::service_ips`] (the replica heartbeat); these handlers read them from memory and
//! never wait for the store.
//!
//! Order: the replicas on the client's carrier and in its region first, then its carrier,
//! then its region, then the rest (each classified like a client: operator networks, then
//! GeoIP), rotated within each group by the client's address so that clients spread over
//! equals while one client sees a stable order.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use httpdns_core::snapshot::client_seed;
use httpdns_guard::d::Auth;
use serde::Serialize;

use crate::error::ApiError;
use crate::httpdns::state::HttpdnsState;
use crate::peer::PeerAddr;
use crate::service_ips::ServiceAddr;

/// `addrs` ordered for the client at `client`.
fn ordered(app: &HttpdnsState, addrs: &[ServiceAddr], client: IpAddr) -> Vec<ServiceAddr> {
    let snapshot = app.catalog.snapshot();
    let geo = app.engine.geo();
    let view = httpdns_geo::classify(&snapshot.snapshot, geo, client);
    let rank = |a: &ServiceAddr| {
        let v = httpdns_geo::classify(&snapshot.snapshot, geo, a.ip);
        let same_isp = view.isp.is_some() && v.isp == view.isp;
        let same_region = view.region.is_some() && v.region == view.region;
        match (same_isp, same_region) {
            (true, true) => 0,
            (true, false) => 1,
            (false, true) => 2,
            (false, false) => 3,
        }
    };
    let mut groups: [Vec<ServiceAddr>; 4] = Default::default();
    for a in addrs {
        groups[rank(a)].push(*a);
    }
    let seed = client_seed(client);
    groups
        .into_iter()
        .flat_map(|mut g| {
            if !g.is_empty() {
                let n = g.len();
                g.rotate_left((seed % n as u64) as usize);
            }
            g
        })
        .collect()
}

/// Alibaba's `/ss` answer. The port arrays always have the length of their address arrays
/// (the Android SDK indexes them by the address's position), `0` meaning the default port.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct ServiceIpList {
    /// The Alibaba SDKs' kill switch (docs/api.md, "Vendor switches"); absent unless set.
    #[serde(skip_serializing_if = "Option::is_none")]
    service_status: Option<&'static str>,
    service_ip: Vec<String>,
    service_ipv6: Vec<String>,
    service_ip_port: Vec<u16>,
    service_ipv6_port: Vec<u16>,
}

fn service_ip_list(addrs: &[ServiceAddr]) -> ServiceIpList {
    let mut l = ServiceIpList {
        service_status: None,
        service_ip: vec![],
        service_ipv6: vec![],
        service_ip_port: vec![],
        service_ipv6_port: vec![],
    };
    for a in addrs {
        let (ips, ports) = match a.ip {
            IpAddr::V4(_) => (&mut l.service_ip, &mut l.service_ip_port),
            IpAddr::V6(_) => (&mut l.service_ipv6, &mut l.service_ipv6_port),
        };
        ips.push(a.ip.to_string());
        ports.push(a.port.unwrap_or(0));
    }
    l
}

fn json_response(body: &impl Serialize) -> Response {
    let mut resp = (StatusCode::OK, serde_json::to_vec(body).unwrap_or_default()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // The order depends on the client's address.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    resp
}

/// The entry point a request reached on this server: its socket's local address, and whether
/// it came over TLS (which decides the default port). What `/ss` lists when no replica
/// announces an address: a server started with its defaults then still bootstraps the
/// vendors' SDKs, which stop when the list is empty.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reached(Option<ServiceAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Reached {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let Some(httpdns_net::http::LocalAddr(local)) = parts.extensions.get().copied() else {
            return Ok(Self(None));
        };
        let tls = parts.extensions.get::<httpdns_net::http::Secure>().is_some();
        let default = if tls { 443 } else { 80 };
        let port = (local.port() != default).then_some(local.port());
        Ok(Self(Some(ServiceAddr { ip: local.ip().to_canonical(), port })))
    }
}

impl Reached {
    /// The alive replicas' addresses, or, when none announces one, this entry point.
    fn or_alive(self, alive: &[ServiceAddr]) -> Vec<ServiceAddr> {
        match (alive.is_empty(), self.0) {
            (true, Some(own)) => vec![own],
            _ => alive.to_vec(),
        }
    }
}

/// `GET /ss`: the service-IP list without an account (our own client, curl).
pub(crate) async fn plain(
    State(app): State<HttpdnsState>,
    PeerAddr(peer): PeerAddr,
    method: Method,
    reached: Reached,
) -> Response {
    let resp = list(&app, peer, &method, None, reached);
    app.metrics.http_answer_request(crate::metrics::Route::ServiceIps, resp.status());
    resp
}

/// `GET /{account}/ss`, Alibaba's SDKs' bootstrap. Any query parameters are accepted and
/// ignored (`platform`, `sdk_version` or `sdkVersion`, `region`, `sid`, `net`, the C SDK's
/// `s`/`t`/`n`): the list is the same for every SDK.
pub(crate) fn account(
    app: &HttpdnsState,
    peer: IpAddr,
    method: &Method,
    account: &str,
    reached: Reached,
) -> Response {
    let resp = list(app, peer, method, Some(account), reached);
    app.metrics.http_answer_request(crate::metrics::Route::ServiceIps, resp.status());
    resp
}

fn list(
    app: &HttpdnsState,
    peer: IpAddr,
    method: &Method,
    account: Option<&str>,
    reached: Reached,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "use GET").into_response();
    }
    let mut id = None;
    if let Some(account) = account {
        id = httpdns_core::model::parse_account_id(account)
            .ok()
            .filter(|id| app.catalog.snapshot().account(*id).is_some_and(|a| a.enabled));
        if id.is_none() {
            return ApiError::forbidden("InvalidAccount", "no such account").into_response();
        }
    }
    if let Err(e) = app.guard.charge_client(peer) {
        return ApiError::from(e).into_response();
    }
    let mut body = service_ip_list(&ordered(app, &reached.or_alive(&app.service_ips.alive()), peer));
    body.service_status = app.service_ips.switches().get().effective(id).service_status.map(|s| s.as_str());
    json_response(&body)
}

/// Refresh period Tencent's SDKs are told in `/conf` (`ttl`, minutes).
const CONF_TTL_MINUTES: u32 = 60;

/// Tencent's `/conf` body: `log:<0|1>|domain:<0|1>|ip:a;b|ttl:<minutes>`, the switches as
/// set (docs/api.md, "Vendor switches"). The SDKs connect on the default port and IPv4 only,
/// so only IPv4 addresses announced without a port are listed; with none, `ip` is left out:
/// the Android SDK fails on an empty `ip:` before it applies `log` and `domain`
/// (`"ip:".split(":")` has no second item), and the iOS SDK reads `domain` only without `ip`.
fn conf_body(addrs: &[ServiceAddr], switches: crate::vendor_switches::Effective) -> String {
    let ips: Vec<String> =
        addrs.iter().filter(|a| a.ip.is_ipv4() && a.port.is_none()).map(|a| a.ip.to_string()).collect();
    let (log, domain) = (u8::from(switches.log), u8::from(switches.domain));
    if ips.is_empty() {
        return format!("log:{log}|domain:{domain}|ttl:{CONF_TTL_MINUTES}");
    }
    format!("log:{log}|domain:{domain}|ip:{}|ttl:{CONF_TTL_MINUTES}", ips.join(";"))
}

/// The account a `/conf` request authenticated as (`token=` or `id=`), once it has.
fn conf_account(
    snapshot: &httpdns_catalog::Published,
    fields: &crate::dnspod::params::Fields<'_>,
) -> Option<u32> {
    if let Some(token) = fields.token.as_deref().filter(|t| !t.is_empty()) {
        return snapshot.account_by_token(token).map(|(id, _)| id);
    }
    fields.id.as_deref().and_then(|id| httpdns_core::model::parse_account_id(id).ok())
}

/// `GET /conf?id=<account>&alg=des|aes` (the body encrypted like `/d`'s) or
/// `/conf?token=<token>` over HTTPS (plain): the service IPs of Tencent's SDKs.
pub(crate) async fn conf(
    State(app): State<HttpdnsState>,
    PeerAddr(peer): PeerAddr,
    reached: Reached,
    request: Request,
) -> Response {
    let resp = conf_answer(&app, peer, reached, &request);
    app.metrics.http_answer_request(crate::metrics::Route::ServiceIps, resp.status());
    resp
}

fn conf_answer(app: &HttpdnsState, peer: IpAddr, reached: Reached, request: &Request) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "use GET").into_response();
    }
    let secure = crate::peer::is_secure(app, request);
    let mut fields = crate::dnspod::fields(request.uri().query(), &[]);
    let snapshot = app.catalog.snapshot();
    let auth = match crate::dnspod::authenticate(app, &snapshot, &mut fields, secure, peer) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    if matches!(auth, Auth::None) {
        if let Err(e) = app.guard.charge_client(peer) {
            return ApiError::from(e).into_response();
        }
    }
    let account = match auth {
        Auth::None => None,
        _ => conf_account(&snapshot, &fields),
    };
    let switches = app.service_ips.switches().get().effective(account);
    let mut body = conf_body(&ordered(app, &reached.or_alive(&app.service_ips.alive()), peer), switches);
    if let Auth::Encrypted(alg, secret) = &auth {
        match httpdns_auth::encrypt(*alg, secret, body.as_bytes()) {
            Ok(hex) => body = hex,
            Err(_) => return ApiError::internal(&"cannot encrypt with the account key").into_response(),
        }
    }
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> ServiceAddr {
        s.parse().unwrap()
    }

    #[test]
    fn lists_keep_port_arrays_as_long_as_address_arrays() {
        let l = service_ip_list(&[a("1.1.1.1"), a("[2001:db8::1]:8443"), a("2.2.2.2:8080")]);
        assert_eq!(l.service_ip, ["1.1.1.1", "2.2.2.2"]);
        assert_eq!(l.service_ip_port, [0, 8080]);
        assert_eq!(l.service_ipv6, ["2001:db8::1"]);
        assert_eq!(l.service_ipv6_port, [8443]);
    }

    #[test]
    fn conf_lists_default_port_ipv4_only() {
        let off = crate::vendor_switches::Effective::default();
        let body = conf_body(&[a("1.1.1.1"), a("2.2.2.2:8080"), a("2001:db8::1"), a("3.3.3.3")], off);
        assert_eq!(body, "log:0|domain:0|ip:1.1.1.1;3.3.3.3|ttl:60");
    }

    #[test]
    fn conf_carries_the_switches_and_no_empty_ip() {
        let on = crate::vendor_switches::Effective { service_status: None, log: true, domain: true };
        assert_eq!(conf_body(&[a("1.1.1.1")], on), "log:1|domain:1|ip:1.1.1.1|ttl:60");
        // Nothing Tencent's SDKs can connect to: no `ip` at all (an empty one fails the
        // Android SDK's parse before it applies the switches).
        assert_eq!(conf_body(&[a("1.1.1.1:8080")], on), "log:1|domain:1|ttl:60");
    }
}
