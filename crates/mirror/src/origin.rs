//! Fetching from origins: failover along the rule's origins (`origin`, `origins` by priority,
//! `backup_origin`), redirects followed by hand with every hop checked, timeouts for connect,
//! first byte and idle, a health probe, and SigV4 signing for private buckets.
//!
//! Nothing from the client reaches the origin unless the rule says so: not its query string
//! (unless the rule lists parameters), not cookies or other headers (unless `headers` passes
//! them), never `Authorization` or `Accept-Encoding`, and `Range` and conditionals only for a
//! proxy rule (`store: false`). Requests ask for `identity`, so what is stored is the object
//! itself and its length can be checked.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use httpdns_core::ip::{classify, origin_class, IpClass, OriginClass};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::StatusCode;
use url::Url;

use crate::rule::Rule;

/// At most this many redirects per fetch, as OSS does.
pub const MAX_REDIRECTS: usize = 10;

/// Why a fetch failed. Maps to 404, 502 or 504.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("the origin does not have this object")]
    NotFound,
    #[error("the origin timed out")]
    Timeout,
    #[error("the origin could not be reached: {0}")]
    Unreachable(String),
    #[error("the origin answered {0}")]
    Status(u16),
    #[error("the origin redirected more than {MAX_REDIRECTS} times")]
    TooManyRedirects,
    #[error("a redirect led to a forbidden address: {0}")]
    Forbidden(String),
    #[error("the origin sent a bad response: {0}")]
    Invalid(String),
}

impl FetchError {
    /// Whether the next origin may do better.
    fn fails_over(&self, rule: &Rule) -> bool {
        match self {
            FetchError::Timeout | FetchError::Unreachable(_) => true,
            FetchError::Status(s) => *s >= 500 || rule.spec.failover_statuses.contains(s),
            FetchError::NotFound => rule.spec.failover_statuses.contains(&404),
            _ => false,
        }
    }

    /// The status class label of metrics.
    pub fn class(&self) -> &'static str {
        match self {
            FetchError::NotFound => "4xx",
            FetchError::Status(s) if *s < 500 => "4xx",
            FetchError::Status(_) => "5xx",
            FetchError::Timeout => "timeout",
            _ => "error",
        }
    }
}

/// A successful origin answer, headers read, body not yet.
#[derive(Debug)]
pub struct Fetched {
    pub response: reqwest::Response,
    /// Which origin answered, in the order tried when all are up (0: the first).
    pub origin: usize,
}

/// What one origin request carries beyond the object's URL.
#[derive(Debug, Default, Clone)]
pub struct Ask {
    /// A revalidation's validators.
    pub validators: Option<Validators>,
    /// Client headers the rule passes (a proxy's `Range` and conditionals among them).
    pub passed: HeaderMap,
    /// A proxy request: `206`, `304`, `412` and `416` are answers to pass back, not failures.
    pub proxy: bool,
    /// A proxy's `HEAD`: sent as `HEAD` (fills always `GET`).
    pub head: bool,
}

/// Validators of a stored copy, for revalidation.
#[derive(Debug, Clone, Default)]
pub struct Validators {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// The HTTP side of one rule: its client (with its connect timeout and guarded resolver) and
/// the primary's health.
#[derive(Debug)]
pub struct OriginClient {
    client: reqwest::Client,
    /// Until when (unix ms) each origin is considered down; 0 when up.
    down_until: Vec<AtomicU64>,
    allow_local: bool,
}

/// Whether an origin connection may go to `ip`: never where nothing can be fetched; to this
/// host or its link only for origins the rule names (`trusted`: its origins and
/// `redirect_origins`) and only when `allow_local` (`HTTPDNS_ALLOW_LOCAL_ORIGINS`); to private
/// addresses only for origins the rule names; public addresses always.
pub fn connectable(ip: IpAddr, trusted: bool, allow_local: bool) -> bool {
    match origin_class(ip) {
        OriginClass::Unreachable => false,
        OriginClass::Local => allow_local && trusted,
        OriginClass::Allowed => trusted || classify(ip.to_canonical()) == IpClass::Public,
    }
}

impl OriginClient {
    pub fn new(rule: &Rule, allow_local: bool) -> Self {
        let trusted_hosts: Vec<String> = rule
            .trusted_origins
            .iter()
            .filter_map(|o| Url::parse(o).ok()?.host_str().map(str::to_owned))
            .collect();
        // reqwest comes without a bundled TLS provider (the workspace uses ring, not aws-lc-rs):
        // ring becomes the process default unless the embedding program installed another.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(rule.connect_timeout())
            .no_proxy()
            .pool_idle_timeout(Duration::from_secs(30))
            .dns_resolver(GuardedResolver { trusted_hosts: Arc::new(trusted_hosts), allow_local })
            .build()
            .expect("an HTTP client with static settings");
        let down_until = rule.origins.iter().map(|_| AtomicU64::new(0)).collect();
        Self { client, down_until, allow_local }
    }

    pub fn primary_up(&self) -> bool {
        self.up(0)
    }

    fn up(&self, idx: usize) -> bool {
        self.down_until.get(idx).is_none_or(|d| d.load(Ordering::Relaxed) <= httpdns_core::clock::unix_ms())
    }

    fn mark(&self, idx: usize, up: bool, rule: &Rule) {
        let until = if up { 0 } else { httpdns_core::clock::unix_ms() + rule.spec.probe_interval_ms };
        if let Some(d) = self.down_until.get(idx) {
            d.store(until, Ordering::Relaxed);
        }
    }

    /// Fetches `path_and_query` (encoded, no leading `/`) from the rule's origins in order,
    /// those marked down (a failure within the last probe interval) after those up; each one
    /// that fails over hands on to the next, as the backup always did.
    pub async fn fetch(&self, rule: &Rule, path_and_query: &str, ask: &Ask) -> Result<Fetched, FetchError> {
        let mut order: Vec<usize> = (0..rule.origins.len()).collect();
        // Stable: priority order among the up ones, then among the down ones.
        order.sort_by_key(|i| !self.up(*i));
        let mut last = FetchError::Unreachable("no origin".into());
        for (i, idx) in order.iter().copied().enumerate() {
            let result = self.fetch_from(rule, idx, path_and_query, ask).await;
            match result {
                Ok(response) => {
                    self.mark(idx, true, rule);
                    return Ok(Fetched { response, origin: idx });
                }
                Err(e) => {
                    let over = e.fails_over(rule);
                    if over && !matches!(e, FetchError::NotFound) {
                        self.mark(idx, false, rule);
                    }
                    tracing::debug!(rule = %rule.name, origin = idx, error = %e, "Origin fetch failed.");
                    last = e;
                    if !over || i + 1 == order.len() {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    async fn fetch_from(
        &self,
        rule: &Rule,
        idx: usize,
        path_and_query: &str,
        ask: &Ask,
    ) -> Result<reqwest::Response, FetchError> {
        let mut url = object_url(&rule.origins[idx], path_and_query)?;
        for _ in 0..=MAX_REDIRECTS {
            check_hop(rule, &url, self.allow_local).await?;
            let mut headers = ask.passed.clone();
            for (k, v) in fill_headers(rule) {
                if let Some(k) = k {
                    headers.insert(k, v);
                }
            }
            if let Some(v) = &ask.validators {
                if let Some(e) = v.etag.as_deref().and_then(|e| HeaderValue::from_str(e).ok()) {
                    headers.insert(reqwest::header::IF_NONE_MATCH, e);
                }
                if let Some(d) = v.last_modified.as_deref().and_then(|d| HeaderValue::from_str(d).ok()) {
                    headers.insert(reqwest::header::IF_MODIFIED_SINCE, d);
                }
            }
            let method = if ask.head { reqwest::Method::HEAD } else { reqwest::Method::GET };
            sign(rule, method.as_str(), &url, &mut headers);
            let req = self.client.request(method, url.clone()).headers(headers);
            let response = match tokio::time::timeout(rule.first_byte_timeout(), req.send()).await {
                Err(_) => return Err(FetchError::Timeout),
                Ok(Err(e)) if e.is_timeout() => return Err(FetchError::Timeout),
                Ok(Err(e)) => return Err(FetchError::Unreachable(error_chain(&e))),
                Ok(Ok(r)) => r,
            };
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .ok_or_else(|| FetchError::Invalid(format!("{status} without Location")))?;
                url = url.join(location).map_err(|e| FetchError::Invalid(format!("bad Location: {e}")))?;
                continue;
            }
            return match status.as_u16() {
                200 | 304 => Ok(response),
                206 | 412 | 416 if ask.proxy => Ok(response),
                404 | 410 => Err(FetchError::NotFound),
                s => Err(FetchError::Status(s)),
            };
        }
        Err(FetchError::TooManyRedirects)
    }

    /// One `HEAD` of the primary's probe path; records the result.
    pub async fn probe(&self, rule: &Rule) -> bool {
        let Some(path) = &rule.spec.probe_path else { return true };
        let Ok(url) = rule.origins[0].join(path) else { return false };
        let mut headers = fill_headers(rule);
        sign(rule, "HEAD", &url, &mut headers);
        let req = self.client.head(url).headers(headers).send();
        let up = matches!(tokio::time::timeout(rule.first_byte_timeout(), req).await,
            Ok(Ok(r)) if r.status().is_success() || r.status().is_redirection());
        self.mark(0, up, rule);
        up
    }
}

/// `base` (a directory) + `path_and_query`.
fn object_url(base: &Url, path_and_query: &str) -> Result<Url, FetchError> {
    let mut s = base.as_str().trim_end_matches('/').to_owned();
    s.push('/');
    s.push_str(path_and_query);
    Url::parse(&s).map_err(|e| FetchError::Invalid(format!("origin URL: {e}")))
}

/// Signs a request for a private bucket (`origin_auth`): every hop, since a redirect changes
/// the URL the signature covers.
fn sign(rule: &Rule, method: &str, url: &Url, headers: &mut HeaderMap) {
    let Some(auth) = &rule.spec.origin_auth else { return };
    let date = crate::sigv4::amz_date(httpdns_core::clock::unix_ms() / 1000);
    let signer = crate::sigv4::Signer {
        access_key_id: &auth.access_key_id,
        secret_access_key: &auth.secret_access_key,
        region: &auth.region,
    };
    let range = headers.get(reqwest::header::RANGE).and_then(|r| r.to_str().ok());
    let authorization = signer.authorization(method, url, &date, range);
    let value = |s: &str| HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""));
    headers.insert(HeaderName::from_static("x-amz-date"), value(&date));
    headers.insert(
        HeaderName::from_static("x-amz-content-sha256"),
        HeaderValue::from_static(crate::sigv4::EMPTY_SHA256),
    );
    let mut authorization = value(&authorization);
    authorization.set_sensitive(true);
    headers.insert(reqwest::header::AUTHORIZATION, authorization);
}

/// The headers every origin request sets: the rule's (`set_headers`, then `headers.set`), then
/// ours (which win).
fn fill_headers(rule: &Rule) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in rule.spec.set_headers.iter().chain(&rule.spec.headers.set) {
        if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
            h.insert(k, v);
        }
    }
    h.insert(reqwest::header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    h.entry(reqwest::header::USER_AGENT).or_insert(HeaderValue::from_static("httpdns-mirror"));
    h
}

/// A hop is allowed when every address it leads to is [`connectable`]: for origins the rule
/// names, anything but this host and its link (unless allowed); for any other hop a redirect
/// leads to, public addresses only. Names of the rule's own origins are checked on their
/// resolved addresses by [`GuardedResolver`] at connect (one lookup, the one used).
async fn check_hop(rule: &Rule, url: &Url, allow_local: bool) -> Result<(), FetchError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(FetchError::Forbidden(format!("scheme {}", url.scheme())));
    }
    let trusted = rule.trusted_origins.contains(&url.origin().ascii_serialization());
    if httpdns_core::model::mirror::host_class(url) == OriginClass::Local && !(allow_local && trusted) {
        return Err(FetchError::Forbidden(format!("{} is on this host", url.host_str().unwrap_or(""))));
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<IpAddr> = match url.host() {
        Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
        Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
        Some(url::Host::Domain(_)) if trusted => return Ok(()),
        Some(url::Host::Domain(d)) => tokio::net::lookup_host((d, port))
            .await
            .map_err(|e| FetchError::Unreachable(format!("resolving {d}: {e}")))?
            .map(|a| a.ip())
            .collect(),
        None => return Err(FetchError::Forbidden("no host".into())),
    };
    if addrs.is_empty() {
        return Err(FetchError::Unreachable(format!("{url} resolves to nothing")));
    }
    if let Some(bad) = addrs.iter().find(|ip| !connectable(**ip, trusted, allow_local)) {
        return Err(FetchError::Forbidden(format!("{} resolves to {bad}", url.host_str().unwrap_or(""))));
    }
    Ok(())
}

/// Resolves names for origin connections and keeps only [`connectable`] addresses (the
/// rule's own origin hosts are trusted with private ones). Checking after resolving, on the
/// addresses the connection will use, is what defeats DNS rebinding between a check and the
/// connect.
#[derive(Debug, Clone)]
struct GuardedResolver {
    trusted_hosts: Arc<Vec<String>>,
    allow_local: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let trusted = self.trusted_hosts.iter().any(|h| h.eq_ignore_ascii_case(name.as_str()));
        let allow_local = self.allow_local;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addrs: Vec<SocketAddr> =
                addrs.into_iter().filter(|a| connectable(a.ip(), trusted, allow_local)).collect();
            if addrs.is_empty() {
                return Err(format!("{host} has no address the mirror may connect to").into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}
