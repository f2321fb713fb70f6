//! The HTTPDNS service as the app sees it: several addresses, failover between them, and a
//! "sniff" mode when all of them fail.
//!
//! Requests use the JSON `/resolve` (or the signed `/{account}/sign_resolve` when the app has
//! an account), asking for both families at once and for carrier labels (`labels=1`). On a connection failure, a timeout, a 5xx
//! or a 429 the next address is tried, and the one that answered becomes the first choice
//! (Alibaba's `ShiftServerWatcher`). When every address failed, at most one request per
//! `sniff_interval` goes to the service and the others go straight to LocalDNS, so an outage
//! does not add a timeout to every lookup.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};
use reqwest::Url;
use serde::Deserialize;
use tokio::time::Instant;

use crate::error::Result;

/// An account for signed requests (`/{account}/sign_resolve`).
#[derive(Debug, Clone)]
pub struct Account {
    pub id: u32,
    pub secret: String,
}

#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Base URLs of the service (`http://203.0.113.10:8080`), in order of preference.
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
    /// Index of the address tried first.
    preferred: AtomicUsize,
    /// When every address last failed; `None` while the service works.
    /// When every address last failed, and how the last one did; `None` while the service works.
    all_failed_at: Mutex<Option<(Instant, Fault)>>,
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
        Self { opts, http, preferred: AtomicUsize::new(0), all_failed_at: Mutex::new(None) }
    }

    pub fn is_configured(&self) -> bool {
        !self.opts.servers.is_empty()
    }

    /// Asks for `name` (already validated), trying every address from the preferred one on.
    pub async fn query(&self, name: &str) -> Result<ServiceAnswer, Unavailable> {
        let n = self.opts.servers.len();
        if n == 0 {
            return Err(Unavailable::NotConfigured);
        }
        {
            let mut failed = self.all_failed_at.lock().expect("lock");
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
            let base = &self.opts.servers[idx];
            match self.ask(base, name).await {
                Ok(mut answer) => {
                    self.preferred.store(idx, Ordering::Relaxed);
                    *self.all_failed_at.lock().expect("lock") = None;
                    answer.server = base.to_string();
                    return Ok(answer);
                }
                Err(Attempt::Refused(e)) => return Err(Unavailable::Refused(e)),
                Err(Attempt::Retry(fault, e)) => {
                    tracing::debug!(server = %base, error = %e, "HTTPDNS address failed; trying the next.");
                    last = (fault, format!("{base}: {e}"));
                }
            }
        }
        *self.all_failed_at.lock().expect("lock") = Some((Instant::now(), last.0));
        Err(Unavailable::Failed(last.0, last.1))
    }

    async fn ask(&self, base: &Url, name: &str) -> Result<ServiceAnswer, Attempt> {
        let url = self.url(base, name).map_err(|e| Attempt::Refused(e.to_string()))?;
        let resp =
            self.http.get(url).send().await.map_err(|e| Attempt::Retry(fault_of(&e), error_chain(&e)))?;
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
        parse_answer(&bytes).map_err(|e| Attempt::Retry(Fault::Server, e))
    }

    fn url(&self, base: &Url, name: &str) -> Result<Url> {
        let mut url = base.clone();
        match &self.opts.account {
            None => {
                url.set_path("/resolve");
                url.query_pairs_mut()
                    .clear()
                    .append_pair("host", name)
                    .append_pair("query", "4,6")
                    .append_pair("labels", "1");
            }
            Some(acc) => {
                // Valid for ten minutes: long enough for clock skew, short against replay.
                let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() + 600;
                let s = sign(name, &acc.secret, t);
                url.set_path(&format!("/{}/sign_resolve", acc.id));
                url.query_pairs_mut()
                    .clear()
                    .append_pair("host", name)
                    .append_pair("query", "4,6")
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

fn parse_answer(bytes: &[u8]) -> Result<ServiceAnswer, String> {
    let body: Body = serde_json::from_slice(bytes).map_err(|e| format!("malformed answer: {e}"))?;
    let entry = body.dns.into_iter().next().ok_or("answer without an entry")?;
    // Unparseable addresses are dropped here, like any other invalid address.
    let ips = entry.ips.iter().chain(entry.ipsv6.iter()).filter_map(|s| s.parse::<IpAddr>().ok()).collect();
    let ip_isp = entry.ip_isp.into_iter().filter_map(|(k, v)| Some((k.parse().ok()?, v))).collect();
    Ok(ServiceAnswer { ips, ttl: entry.ttl, client_isp: entry.client_isp, ip_isp, server: String::new() })
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
mod tests {
    use super::*;

    #[test]
    fn alibaba_signature_vector() {
        // From docs/api.md (Alibaba's documented example).
        assert_eq!(sign("www.aliyun.com", "IAmASecret", 1534316400), "60c71e98b6d7fcbb366243e224eab457");
    }

    #[test]
    fn parses_answers_and_drops_garbage_addresses() {
        let a = parse_answer(
            br#"{"dns":[{"host":"a.example.com","client_ip":"1.0.2.7","ips":["2.2.2.1","nonsense"],
                "ipsv6":["2402:4e00::1"],"ttl":60,"origin_ttl":60,"client_isp":"unicom",
                "ip_isp":{"2.2.2.1":"unicom","2402:4e00::1":"telecom"}}]}"#,
        )
        .unwrap();
        assert_eq!(a.ips, vec!["2.2.2.1".parse::<IpAddr>().unwrap(), "2402:4e00::1".parse().unwrap()]);
        assert_eq!(a.ttl, 60);
        assert_eq!(a.client_isp.as_deref(), Some("unicom"));
        assert_eq!(a.ip_isp.get(&"2402:4e00::1".parse().unwrap()).map(String::as_str), Some("telecom"));
        assert!(parse_answer(b"{}").is_err());
        assert!(parse_answer(br#"{"dns":[]}"#).is_err());
    }

    #[tokio::test]
    async fn unreachable_addresses_enter_sniff_mode() {
        // Port 1 on loopback refuses at once.
        let svc = Service::new(ServiceOptions {
            servers: vec!["http://127.0.0.1:1".parse().unwrap()],
            sniff_interval: Duration::from_secs(30),
            ..Default::default()
        });
        assert!(matches!(svc.query("a.example.com").await, Err(Unavailable::Failed(Fault::Connect, _))));
        assert_eq!(svc.query("a.example.com").await, Err(Unavailable::Sniffing(Fault::Connect)));
    }

    #[tokio::test]
    async fn a_name_failure_is_not_a_server_failure() {
        let app = axum::Router::new().fallback(|| async {
            (
                axum::http::StatusCode::BAD_GATEWAY,
                r#"{"code":"InternalError","error":"upstream DNS resolution failed"}"#,
            )
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        let svc = Service::new(ServiceOptions {
            servers: vec![format!("http://{addr}").parse().unwrap()],
            ..Default::default()
        });
        assert!(matches!(svc.query("broken.example.com").await, Err(Unavailable::Refused(_))));
        // Not sniffing: the next name is asked.
        assert!(matches!(svc.query("other.example.com").await, Err(Unavailable::Refused(_))));
    }
}
