//! The service-IP lists clients bootstrap from: Alibaba's `/{account}/ss` (and `/ss`) and
//! Tencent's `/conf`.
//!
//! Every replica that announces public entry points (`HTTPDNS_PUBLIC_ADDRS`) rewrites its row
//! in the store every [`HEARTBEAT`]; every replica reads all rows as often and keeps the ones
//! that are alive. A row is alive while its `seen_at` keeps changing, as observed by the
//! reader's own clock, so replicas with skewed clocks neither vanish nor linger: a replica
//! that stops (crash, partition, kill -9) leaves the lists within [`EXPIRE`] plus one read, and
//! one that stops cleanly deletes its row at once.
//!
//! The handlers read the kept list from memory; they never wait for the store.
//!
//! Order: the replicas on the client's carrier and in its region first, then its carrier,
//! then its region, then the rest (each classified like a client: operator networks, then
//! GeoIP), rotated within each group by the client's address so that clients spread over
//! equals while one client sees a stable order.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use httpdns_core::snapshot::client_seed;
use httpdns_store::replicas::ReplicaRow;
use httpdns_store::Store;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::httpdns::HttpdnsState;
use crate::peer::PeerAddr;
use httpdns_guard::d::Auth;

/// How often a replica writes its row and reads the others'.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A row unchanged for this long is a replica that is gone.
pub const EXPIRE: Duration = Duration::from_secs(6);

/// A public entry point: an address, and a port unless it is the scheme's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServiceAddr {
    pub ip: IpAddr,
    /// `None`: the default port of the scheme the client uses (80 or 443).
    pub port: Option<u16>,
}

/// Why an announced address does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an address: write ip, ip:port or [ipv6]:port")]
pub struct BadServiceAddr(String);

impl FromStr for ServiceAddr {
    type Err = BadServiceAddr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let bad = || BadServiceAddr(s.to_owned());
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Self { ip: ip.to_canonical(), port: None });
        }
        if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let ip = inner.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
            return Ok(Self { ip: IpAddr::V6(ip), port: None });
        }
        let sa = s.parse::<SocketAddr>().map_err(|_| bad())?;
        if sa.port() == 0 {
            return Err(bad());
        }
        Ok(Self { ip: sa.ip().to_canonical(), port: Some(sa.port()) })
    }
}

impl fmt::Display for ServiceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            None => write!(f, "{}", self.ip),
            Some(p) => write!(f, "{}", SocketAddr::new(self.ip, p)),
        }
    }
}

/// The replicas' announced addresses, kept alive by the heartbeat loop.
#[derive(Debug)]
pub struct ServiceIps {
    id: String,
    own: Vec<ServiceAddr>,
    /// Every alive replica's addresses (this one's first), deduplicated.
    alive: ArcSwap<Vec<ServiceAddr>>,
    /// Per other replica: what its row looked like when last read.
    seen: Mutex<HashMap<String, Seen>>,
    /// The vendors' switches these answers carry, read from the store with the heartbeat.
    switches: crate::vendor_switches::Board,
}

/// One other replica's row, as this replica has read it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    seen_at: i64,
    /// When it was first read with this `seen_at`.
    since: Instant,
    /// Read to change (or fresh by the writer's clock at first sight); a row stale at first
    /// sight is not listed until it changes.
    changing: bool,
}

/// A row read unchanged for this long, by this replica's own clock, belongs to a replica that
/// is gone: it is deleted (no writer's clock is trusted for it, so a replica whose clock is
/// far off neither deletes the others' rows nor loses its own).
pub const FORGET: Duration = Duration::from_secs(24 * 3600);

impl ServiceIps {
    /// This replica's announcer; `own` may be empty (it then only lists the others).
    pub fn new(own: Vec<ServiceAddr>) -> Self {
        let mut id = [0u8; 8];
        let _ = getrandom::fill(&mut id);
        let host = std::env::var("HOSTNAME").unwrap_or_default();
        let id = format!("{host}-{}-{}", std::process::id(), httpdns_auth::hex(&id));
        Self {
            id,
            alive: ArcSwap::from_pointee(own.clone()),
            own,
            seen: Mutex::new(HashMap::new()),
            switches: Default::default(),
        }
    }

    /// The vendors' switches `/ss` and `/conf` carry.
    pub fn switches(&self) -> &crate::vendor_switches::Board {
        &self.switches
    }

    /// The addresses every alive replica announces.
    pub fn alive(&self) -> Arc<Vec<ServiceAddr>> {
        self.alive.load_full()
    }

    /// Folds one read of the rows into the alive list, at local time `now` with the wall
    /// clock at `now_ms`. Returns the rows to forget, as `(id, seen_at)`.
    fn observe(&self, rows: Vec<ReplicaRow>, now: Instant, now_ms: i64) -> Vec<(String, i64)> {
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut list = self.own.clone();
        let mut present = Vec::with_capacity(rows.len());
        let mut forget = Vec::new();
        for row in rows {
            if row.id == self.id {
                continue;
            }
            present.push(row.id.clone());
            let fresh = Seen { seen_at: row.seen_at, since: now, changing: true };
            let entry = match seen.get(&row.id) {
                Some(s) if s.seen_at == row.seen_at => *s,
                Some(_) => fresh,
                // First sight: the writer's clock is all there is to go by.
                None => Seen {
                    changing: (now_ms - row.seen_at).unsigned_abs() <= EXPIRE.as_millis() as u64,
                    ..fresh
                },
            };
            seen.insert(row.id.clone(), entry);
            let unchanged_for = now.saturating_duration_since(entry.since);
            if unchanged_for > FORGET {
                forget.push((row.id.clone(), row.seen_at));
            }
            if !entry.changing || unchanged_for > EXPIRE {
                continue;
            }
            for a in row.addrs.iter().filter_map(|a| a.parse::<ServiceAddr>().ok()) {
                if !list.contains(&a) {
                    list.push(a);
                }
            }
        }
        seen.retain(|id, _| present.contains(id));
        self.alive.store(Arc::new(list));
        forget
    }

    /// Writes this replica's row and reads the others' every [`HEARTBEAT`] until `shutdown`,
    /// then deletes the row. A store that fails keeps the last list: during a database outage
    /// no replica can announce itself, and the list from before is the best knowledge there is.
    pub async fn run(self: Arc<Self>, store: Store, shutdown: CancellationToken) {
        let own: Vec<String> = self.own.iter().map(ToString::to_string).collect();
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let beat = async {
                if !own.is_empty() {
                    store.replica_heartbeat(&self.id, &own).await?;
                }
                if let Err(e) = self.switches.load(&store).await {
                    tracing::warn!(error = %e, "Could not read the vendor switches; keeping the last read.");
                }
                store.replicas().await
            };
            match tokio::time::timeout(HEARTBEAT * 2, beat).await {
                Ok(Ok(rows)) => {
                    let now_ms = httpdns_core::clock::unix_ms() as i64;
                    for (id, seen_at) in self.observe(rows, Instant::now(), now_ms) {
                        if let Err(e) = store.forget_replica(&id, seen_at).await {
                            tracing::warn!(error = %e, replica = %id, "Could not delete a gone replica's row.");
                        }
                    }
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "Replica heartbeat failed."),
                Err(_) => tracing::warn!("Replica heartbeat timed out."),
            }
        }
        if !own.is_empty() {
            if let Ok(Err(e)) = tokio::time::timeout(HEARTBEAT, store.remove_replica(&self.id)).await {
                tracing::warn!(error = %e, "Could not remove this replica from the service-IP list.");
            }
        }
    }
}

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
    body.service_status = app.service_ips.switches.get().effective(id).service_status.map(|s| s.as_str());
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
    let resp = conf_answer(&app, peer, reached, request);
    app.metrics.http_answer_request(crate::metrics::Route::ServiceIps, resp.status());
    resp
}

fn conf_answer(app: &HttpdnsState, peer: IpAddr, reached: Reached, request: Request) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "use GET").into_response();
    }
    let secure = crate::peer::is_secure(app, &request);
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
    let switches = app.service_ips.switches.get().effective(account);
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
    fn parses_announced_addresses() {
        assert_eq!(a("1.2.3.4"), ServiceAddr { ip: "1.2.3.4".parse().unwrap(), port: None });
        assert_eq!(a("1.2.3.4:8080").port, Some(8080));
        assert_eq!(a("[2001:db8::1]:443").port, Some(443));
        assert_eq!(a("2001:db8::1").port, None);
        assert_eq!(a("[2001:db8::1]").port, None);
        assert_eq!(a("::ffff:1.2.3.4").ip, "1.2.3.4".parse::<IpAddr>().unwrap(), "mapped → v4");
        for bad in ["", "host:80", "1.2.3.4:0", "1.2.3.4:99999", "1.2.3"] {
            assert!(bad.parse::<ServiceAddr>().is_err(), "{bad}");
        }
        assert_eq!(a("[2001:db8::1]:443").to_string(), "[2001:db8::1]:443");
        assert_eq!(a("1.2.3.4").to_string(), "1.2.3.4");
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

    fn row(id: &str, addr: &str, seen_at: i64) -> ReplicaRow {
        ReplicaRow { id: id.into(), addrs: vec![addr.into()], seen_at }
    }

    #[test]
    fn replicas_leave_when_their_row_stops_changing() {
        let ips = ServiceIps::new(vec![a("10.0.0.1")]);
        let t0 = Instant::now();
        let wall = 1_700_000_000_000;
        ips.observe(vec![row("b", "10.0.0.2", wall), row("c", "10.0.0.3", wall - 3_600_000)], t0, wall);
        assert_eq!(*ips.alive(), [a("10.0.0.1"), a("10.0.0.2")], "c's row is an hour old at first sight");
        // b keeps beating, with a clock an hour slow: still alive, since its row changes.
        ips.observe(
            vec![row("b", "10.0.0.2", wall + 2000), row("c", "10.0.0.3", wall - 3_598_000)],
            t0 + HEARTBEAT,
            wall,
        );
        assert_eq!(ips.alive().len(), 3, "c changed its row: alive whatever its clock says");
        // b stops; c goes on.
        let later = t0 + HEARTBEAT + EXPIRE + Duration::from_millis(1);
        ips.observe(
            vec![row("b", "10.0.0.2", wall + 2000), row("c", "10.0.0.3", wall - 3_590_000)],
            later,
            wall,
        );
        assert_eq!(*ips.alive(), [a("10.0.0.1"), a("10.0.0.3")]);
        // Unchanged for a day by this replica's clock: deleted, whatever the writer's clock.
        let day = later + FORGET + Duration::from_secs(1);
        let gone = ips.observe(
            vec![row("b", "10.0.0.2", wall + 2000), row("c", "10.0.0.3", wall - 3_590_000)],
            day,
            wall,
        );
        assert_eq!(gone, [("b".to_owned(), wall + 2000), ("c".to_owned(), wall - 3_590_000)]);
        // A row stale at first sight is deleted after a day too, never listed meanwhile.
        let fresh = ServiceIps::new(vec![]);
        assert!(fresh.observe(vec![row("d", "10.0.0.4", 0)], t0, wall).is_empty());
        assert!(fresh.alive().is_empty());
        assert_eq!(fresh.observe(vec![row("d", "10.0.0.4", 0)], day, wall), [("d".to_owned(), 0)]);
        // A deleted row is forgotten.
        ips.observe(vec![], later, wall);
        assert_eq!(*ips.alive(), [a("10.0.0.1")]);
        assert!(ips.seen.lock().unwrap().is_empty());
    }
}
