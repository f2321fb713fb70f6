//! The HTTPDNS service as the app sees it: several addresses, failover between them, and a
//! "sniff" mode when all of them fail.
//!
//! Requests use the JSON `/resolve` (or the signed `/{account}/sign_resolve` when the app has
//! an account), asking for both families at once and for carrier labels (`labels=1`). On a connection failure, a timeout, a 5xx
//! or a 429 the next address is tried, and the one that answered becomes the first choice
//! (Alibaba's `ShiftServerWatcher`). When every address failed, at most one request per
//! `sniff_interval` goes to the service and the others go straight to LocalDNS, so an outage
//! does not add a timeout to every lookup.
//!
//! One request may ask for up to [`MAX_BATCH`] names (`host=a,b,c`, the service's limit), and
//! only for the families the device can reach ([`IpStack::query`]). The addresses asked are the
//! configured ones until [`Service::refresh_service_ips`] replaces them with the service's own
//! list from `/ss` (the configured ones stay last, as the bootstrap and the last resort).

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use md5::{Digest, Md5};
use reqwest::Url;
use serde::Deserialize;
use tokio::time::Instant;

use crate::error::Result;
use crate::stack::IpStack;

/// Names per `/resolve` request: the service takes at most 5.
pub const MAX_BATCH: usize = 5;

/// An account for signed requests (`/{account}/sign_resolve`).
#[derive(Debug, Clone)]
pub struct Account {
    pub id: u32,
    pub secret: String,
}

#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Base URLs of the service (`http://203.0.113.10:8080`), in order of preference: the
    /// bootstrap list, replaced by `/ss`'s (these last) once that answers.
    pub servers: Vec<Url>,
    pub account: Option<Account>,
    /// Per request to one address (the SDKs use 2 s).
    pub timeout: Duration,
    /// While every address is failing, at most one request per this interval tries them.
    pub sniff_interval: Duration,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            servers: Vec::new(),
            account: None,
            timeout: Duration::from_secs(2),
            sniff_interval: Duration::from_secs(30),
        }
    }
}

/// One name's answer from the service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceAnswer {
    /// IPv4 first, then IPv6.
    pub ips: Vec<IpAddr>,
    pub ttl: u32,
    /// The client's carrier as the server classified it, when it knows.
    pub client_isp: Option<String>,
    /// The carrier of each answered node, when the server labels them.
    pub ip_isp: HashMap<IpAddr, String>,
    /// Which address answered (its base URL).
    pub server: String,
}

#[derive(Deserialize)]
struct Body {
    dns: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    host: String,
    /// `1` (A) or `28` (AAAA) in a batch answer with both families: the addresses are in `ips`.
    #[serde(default, rename = "type")]
    kind: Option<u16>,
    #[serde(default)]
    ips: Vec<String>,
    #[serde(default)]
    ipsv6: Vec<String>,
    #[serde(default)]
    ttl: u32,
    #[serde(default)]
    client_isp: Option<String>,
    #[serde(default)]
    ip_isp: HashMap<String, String>,
}

#[derive(Debug)]
pub struct Service {
    opts: ServiceOptions,
    http: reqwest::Client,
    /// The addresses asked now: `/ss`'s list then the configured ones, or the configured ones.
    servers: RwLock<Arc<Vec<Url>>>,
    /// Index of the address tried first.
    preferred: AtomicUsize,
    /// When every address last failed, and how the last one did; `None` while the service works.
    all_failed_at: Mutex<Option<(Instant, Fault)>>,
    /// The resolution policy's per-request timeout in milliseconds; 0: `opts.timeout`.
    timeout_ms: AtomicU64,
}

#[derive(Deserialize)]
struct ServiceIps {
    /// Required: a body without it is not a `/ss` answer.
    service_ip: Vec<String>,
    #[serde(default)]
    service_ip_port: Vec<serde_json::Value>,
    #[serde(default)]
    service_ipv6: Vec<String>,
    #[serde(default)]
    service_ipv6_port: Vec<serde_json::Value>,
}

/// Why the service gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// Sniff mode: every address failed recently (the last one this way); this request did
    /// not try.
    Sniffing(Fault),
    /// Every address was tried and failed (how the last one failed, and its error).
    Failed(Fault, String),
    /// An address answered with a client error (4xx other than 429), or said the name's own
    /// resolution failed (an API 502): retrying elsewhere would not help.
    Refused(String),
    /// No service address is configured.
    NotConfigured,
}

/// How an address failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No answer within the timeout.
    Timeout,
    /// No connection (refused, unreachable, reset before an answer).
    Connect,
    /// A 5xx or 429, or an answer that does not parse.
    Server,
}

impl Service {
    pub fn new(opts: ServiceOptions) -> Self {
        // The service is asked by address: no proxy, no system resolver in the way.
        let http = crate::http::client_builder()
            .no_proxy()
            .timeout(opts.timeout)
            .connect_timeout(opts.timeout)
            .build()
            .expect("a reqwest client with static settings");
        let servers = RwLock::new(Arc::new(opts.servers.clone()));
        Self {
            opts,
            http,
            servers,
            preferred: AtomicUsize::new(0),
            all_failed_at: Mutex::new(None),
            timeout_ms: AtomicU64::new(0),
        }
    }

    /// The per-request timeout in force: the policy's, else the options'.
    pub fn timeout(&self) -> Duration {
        match self.timeout_ms.load(Ordering::Relaxed) {
            0 => self.opts.timeout,
            ms => Duration::from_millis(ms),
        }
    }

    /// Sets (or, with `None`, clears) the resolution policy's timeout.
    pub fn set_timeout(&self, timeout: Option<Duration>) {
        self.timeout_ms.store(timeout.map_or(0, |t| (t.as_millis() as u64).max(1)), Ordering::Relaxed);
    }

    pub fn is_configured(&self) -> bool {
        !self.servers().is_empty()
    }

    /// The addresses asked now, in order (the preferred one aside).
    pub fn servers(&self) -> Arc<Vec<Url>> {
        self.servers.read().clone()
    }

    /// Asks for `name` (already validated), both families, trying every address from the
    /// preferred one on.
    pub async fn query(&self, name: &str) -> Result<ServiceAnswer, Unavailable> {
        let mut answers = self.query_many(&[name.to_owned()], IpStack::Dual).await?;
        Ok(answers.remove(name).unwrap_or_default())
    }

    /// Asks for `names` (validated, at most [`MAX_BATCH`]) in one request, the families of
    /// `stack`, trying every address from the preferred one on. The answer has an entry per
    /// name the service answered (a single name is matched whatever case the service echoed).
    pub async fn query_many(
        &self,
        names: &[String],
        stack: IpStack,
    ) -> Result<HashMap<String, ServiceAnswer>, Unavailable> {
        let servers = self.servers();
        let n = servers.len();
        if n == 0 {
            return Err(Unavailable::NotConfigured);
        }
        {
            let mut failed = self.all_failed_at.lock();
            if let Some((at, fault)) = *failed {
                if at.elapsed() < self.opts.sniff_interval {
                    return Err(Unavailable::Sniffing(fault));
                }
                // This request is the sniff; the next ones wait for another interval.
                *failed = Some((Instant::now(), fault));
            }
        }
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut last = (Fault::Connect, String::new());
        for i in 0..n {
            let idx = (first + i) % n;
            let base = &servers[idx];
            match self.ask(base, names, stack).await {
                Ok(answers) => {
                    self.preferred.store(idx, Ordering::Relaxed);
                    *self.all_failed_at.lock() = None;
                    let mut out: HashMap<String, ServiceAnswer> = HashMap::new();
                    let single = names.len() == 1;
                    for (i, (host, mut answer)) in answers.into_iter().enumerate() {
                        answer.server = base.to_string();
                        // One name asked: the first entry is its answer, whatever was echoed.
                        let key = if single && i == 0 { names[0].clone() } else { host };
                        out.entry(key).or_insert(answer);
                    }
                    return Ok(out);
                }
                Err(Attempt::Refused(e)) => return Err(Unavailable::Refused(e)),
                Err(Attempt::Retry(fault, e)) => {
                    tracing::debug!(server = %base, error = %e, "HTTPDNS address failed; trying the next.");
                    last = (fault, format!("{base}: {e}"));
                }
            }
        }
        *self.all_failed_at.lock() = Some((Instant::now(), last.0));
        Err(Unavailable::Failed(last.0, last.1))
    }

    async fn ask(
        &self,
        base: &Url,
        names: &[String],
        stack: IpStack,
    ) -> Result<Vec<(String, ServiceAnswer)>, Attempt> {
        let url = self.url(base, &names.join(","), stack).map_err(|e| Attempt::Refused(e.to_string()))?;
        let resp = self
            .http
            .get(url)
            .timeout(self.timeout())
            .send()
            .await
            .map_err(|e| Attempt::Retry(fault_of(&e), error_chain(&e)))?;
        let status = resp.status();
        if status.as_u16() == 502 {
            // httpdns answers 502 with its JSON error when the upstream resolution of this one
            // name failed: the server is fine, another address would say the same, and it must
            // not put every other name into sniff mode. A 502 without that body is a balancer
            // whose backend is down: try the next address.
            let body = resp.text().await.unwrap_or_default();
            if serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|v| v.get("code").is_some()) {
                return Err(Attempt::Refused(format!("status {status}: {}", body.trim())));
            }
            return Err(Attempt::Retry(Fault::Server, format!("status {status}")));
        }
        if status.is_server_error() || status.as_u16() == 429 {
            return Err(Attempt::Retry(Fault::Server, format!("status {status}")));
        }
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(Attempt::Refused(format!("status {status}: {}", body.trim())));
        }
        let bytes = resp.bytes().await.map_err(|e| Attempt::Retry(fault_of(&e), error_chain(&e)))?;
        parse_answers(&bytes).map_err(|e| Attempt::Retry(Fault::Server, e))
    }

    /// `GET /{account}/ss` (or `/ss`) on the addresses in use (the configured ones when none):
    /// the service's entry points replace the list, followed by the configured ones as the last
    /// resort, the first becomes the preferred one, and sniff mode ends. `None` when no address
    /// answered a usable list (the list in use stays).
    pub async fn refresh_service_ips(&self) -> Option<Vec<Url>> {
        let current = self.servers();
        let list: &[Url] = if current.is_empty() { &self.opts.servers } else { &current };
        for base in list {
            let mut url = base.clone();
            match &self.opts.account {
                Some(acc) => url.set_path(&format!("/{}/ss", acc.id)),
                None => url.set_path("/ss"),
            }
            url.set_query(None);
            let resp = match self.http.get(url).send().await {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => {
                    tracing::debug!(server = %base, status = %r.status(), "/ss refused.");
                    continue;
                }
                Err(e) => {
                    tracing::debug!(server = %base, error = %error_chain(&e), "/ss failed.");
                    continue;
                }
            };
            let Ok(bytes) = resp.bytes().await else { continue };
            let Ok(fresh) = parse_service_ips(&bytes, base) else { continue };
            let mut merged: Vec<Url> = Vec::with_capacity(fresh.len() + self.opts.servers.len());
            for u in fresh.into_iter().chain(self.opts.servers.iter().cloned()) {
                if !merged.contains(&u) {
                    merged.push(u);
                }
            }
            {
                let mut servers = self.servers.write();
                // An unchanged list keeps the address that answered last as the first choice.
                if **servers != merged {
                    *servers = Arc::new(merged.clone());
                    self.preferred.store(0, Ordering::Relaxed);
                }
            }
            *self.all_failed_at.lock() = None;
            tracing::debug!(servers = ?merged.iter().map(Url::as_str).collect::<Vec<_>>(), "Service addresses from /ss.");
            return Some(merged);
        }
        None
    }

    fn url(&self, base: &Url, name: &str, stack: IpStack) -> Result<Url> {
        let mut url = base.clone();
        match &self.opts.account {
            None => {
                url.set_path("/resolve");
                url.query_pairs_mut()
                    .clear()
                    .append_pair("host", name)
                    .append_pair("query", stack.query())
                    .append_pair("labels", "1");
            }
            Some(acc) => {
                // Valid for ten minutes: long enough for clock skew, short against replay.
                let t = httpdns_core::clock::unix_s() + 600;
                let s = sign(name, &acc.secret, t);
                url.set_path(&format!("/{}/sign_resolve", acc.id));
                url.query_pairs_mut()
                    .clear()
                    .append_pair("host", name)
                    .append_pair("query", stack.query())
                    .append_pair("labels", "1")
                    .append_pair("t", &t.to_string())
                    .append_pair("s", &s);
            }
        }
        Ok(url)
    }
}

enum Attempt {
    Retry(Fault, String),
    Refused(String),
}

/// `md5_hex(host + "-" + secret + "-" + t)`, Alibaba's `sign_resolve` signature.
pub fn sign(host: &str, secret: &str, t: u64) -> String {
    let digest = Md5::digest(format!("{host}-{secret}-{t}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses a `/resolve` (or `sign_resolve`) answer: the first name's answer (all its entries).
pub fn parse_answer(bytes: &[u8]) -> Result<ServiceAnswer, String> {
    let mut all = parse_answers(bytes)?;
    Ok(all.swap_remove(0).1)
}

/// Parses a `/resolve` answer with every name in it, in the order they first appear: one
/// entry with `ips` and `ipsv6` per name, or, in a batch with both families, one entry per
/// name and type (`"type": 28` puts IPv6 addresses in `ips`). Per name: IPv4 then IPv6,
/// unparseable addresses dropped, the smallest TTL of its entries, its carrier labels. Names
/// are lowercased without a trailing dot. An answer without an entry is an error.
pub fn parse_answers(bytes: &[u8]) -> Result<Vec<(String, ServiceAnswer)>, String> {
    let body: Body = serde_json::from_slice(bytes).map_err(|e| format!("malformed answer: {e}"))?;
    if body.dns.is_empty() {
        return Err("answer without an entry".into());
    }
    // (name, IPv4, IPv6, answer without its addresses)
    let mut out: Vec<(String, Vec<IpAddr>, Vec<IpAddr>, ServiceAnswer)> = Vec::new();
    for entry in body.dns {
        let host = entry.host.trim_end_matches('.').to_ascii_lowercase();
        let i = match out.iter().position(|(h, ..)| *h == host) {
            Some(i) => i,
            None => {
                let blank = ServiceAnswer { ttl: entry.ttl, ..Default::default() };
                out.push((host, Vec::new(), Vec::new(), blank));
                out.len() - 1
            }
        };
        let (_, v4, v6, answer) = &mut out[i];
        // Unparseable addresses are dropped here, like any other invalid address.
        let parsed = entry.ips.iter().filter_map(|s| s.parse::<IpAddr>().ok());
        if entry.kind == Some(28) {
            v6.extend(parsed);
        } else {
            v4.extend(parsed);
        }
        v6.extend(entry.ipsv6.iter().filter_map(|s| s.parse::<IpAddr>().ok()));
        answer.ttl = answer.ttl.min(entry.ttl);
        if entry.client_isp.is_some() {
            answer.client_isp = entry.client_isp;
        }
        answer.ip_isp.extend(entry.ip_isp.into_iter().filter_map(|(k, v)| Some((k.parse().ok()?, v))));
    }
    Ok(out
        .into_iter()
        .map(|(host, v4, v6, mut answer)| {
            answer.ips = v4.into_iter().chain(v6).collect();
            (host, answer)
        })
        .collect())
}

/// Parses `/ss`: `service_ip` then `service_ipv6`, each with its port (`0` or absent: the
/// scheme's default), as base URLs with `base`'s scheme. Unparseable addresses are skipped.
pub fn parse_service_ips(bytes: &[u8], base: &Url) -> Result<Vec<Url>, String> {
    let body: ServiceIps = serde_json::from_slice(bytes).map_err(|e| format!("malformed /ss answer: {e}"))?;
    let mut out = Vec::new();
    let families = [(&body.service_ip, &body.service_ip_port), (&body.service_ipv6, &body.service_ipv6_port)];
    for (ips, ports) in families {
        for (i, ip) in ips.iter().enumerate() {
            let Ok(ip) = ip.parse::<IpAddr>() else { continue };
            let port = ports.get(i).and_then(serde_json::Value::as_u64).filter(|p| (1..=65535).contains(p));
            let host = match ip.to_canonical() {
                IpAddr::V4(a) => a.to_string(),
                IpAddr::V6(a) => format!("[{a}]"),
            };
            let text = match port {
                Some(p) => format!("{}://{host}:{p}", base.scheme()),
                None => format!("{}://{host}", base.scheme()),
            };
            if let Ok(u) = text.parse::<Url>() {
                out.push(u);
            }
        }
    }
    Ok(out)
}

fn fault_of(e: &reqwest::Error) -> Fault {
    if e.is_timeout() {
        Fault::Timeout
    } else {
        Fault::Connect
    }
}

/// The error and its causes on one line (reqwest hides the useful part in `source()`).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests;
