//! The resolver: cache, HTTPDNS service, address filters, LocalDNS fallback.
//!
//! `resolve` answers from the memory cache while an entry is fresh (refreshing it in the
//! background once it is past 75% of its TTL), else asks the service, else LocalDNS. Every
//! address passes [`filter`] first: unspecified, loopback, private and otherwise unroutable
//! addresses are dropped for public names (a hijacking LocalDNS answers `127.0.0.1`), and so
//! are nodes labelled with another carrier than the client's. Every answer says which path
//! produced it.
//!
//! It plugs into reqwest as its DNS resolver ([`reqwest::dns::Resolve`]), the way the SDKs
//! plug into OkHttp's `Dns.lookup`, so every request of the [`crate::CdnClient`] connects to
//! the addresses HTTPDNS chose.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use httpdns_core::DomainName;
use httpdns_flight::SingleFlight;
use tokio::time::Instant;

use crate::cache::{Cache, Lookup};
use crate::error::{Error, Result};
use crate::events::{ClientEvent, FallbackReason, Reporter};
use crate::localdns::LocalDns;
use crate::service::{Fault, Service, ServiceAnswer, ServiceOptions, Unavailable};

/// Which path produced an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// The memory cache, within the TTL.
    Cache,
    /// The HTTPDNS service, just now.
    HttpDns,
    /// An expired cached answer, reused while it is refreshed (or while nothing else answers).
    Stale,
    /// The system's resolver (or the configured LocalDNS servers).
    LocalDns,
    /// The name was an IP address.
    Literal,
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Path::Cache => "cache",
            Path::HttpDns => "httpdns",
            Path::Stale => "stale",
            Path::LocalDns => "localdns",
            Path::Literal => "literal",
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub name: String,
    /// IPv4 first, then IPv6, in the service's order of preference.
    pub ips: Vec<IpAddr>,
    /// How long the answer may still be used.
    pub ttl: Duration,
    pub path: Path,
    /// Addresses thrown away, and why.
    pub dropped: Vec<(IpAddr, &'static str)>,
    /// Why the service did not answer, when another path did.
    pub service_error: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ResolverOptions {
    pub service: ServiceOptions,
    pub local_dns: LocalDns,
    /// Reuse expired answers while refreshing them ("optimistic DNS"; Alibaba's default).
    pub reuse_expired: bool,
    /// How long past its TTL an answer may be reused, and kept in the cache file.
    pub max_stale: Duration,
    /// Admit loopback and private addresses (intranets, tests). Off for a phone.
    pub allow_private: bool,
    /// The client's carrier, when the app knows it (from the SIM). Else the service's view of
    /// the client is used. Nodes labelled with another carrier are dropped.
    pub isp: Option<String>,
    /// Drop nodes whose carrier label differs from the client's.
    pub isp_filter: bool,
    /// Bounds on the TTL of service answers.
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    /// TTL given to LocalDNS answers: short, so the service is asked again soon.
    pub local_ttl: Duration,
    pub local_timeout: Duration,
    /// Persistent cache file, loaded at start and written after each service answer.
    pub cache_file: Option<PathBuf>,
}

impl Default for ResolverOptions {
    fn default() -> Self {
        Self {
            service: ServiceOptions::default(),
            local_dns: LocalDns::System,
            reuse_expired: true,
            max_stale: Duration::from_secs(24 * 3600),
            allow_private: false,
            isp: None,
            isp_filter: true,
            min_ttl: Duration::from_secs(10),
            max_ttl: Duration::from_secs(3600),
            local_ttl: Duration::from_secs(30),
            local_timeout: Duration::from_secs(2),
            cache_file: None,
        }
    }
}

/// A cheap handle; clones share the cache and the service state.
#[derive(Clone)]
pub struct Resolver {
    inner: Arc<Inner>,
}

struct Inner {
    opts: ResolverOptions,
    service: Service,
    cache: Mutex<Cache>,
    network: RwLock<String>,
    /// In-flight lookups per (network, name), so many concurrent misses make one request. Each
    /// runs on a task of its own: an app request that is cancelled while its name is looked up
    /// neither cancels the lookup nor leaves the others waiting for it.
    inflight: SingleFlight<(String, String), Result<Resolution, String>>,
    /// Where fallbacks and LocalDNS comparisons are reported, once set.
    events: OnceLock<Reporter>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolver").field("network", &self.network()).finish_non_exhaustive()
    }
}

impl Resolver {
    pub fn new(opts: ResolverOptions) -> Self {
        let cache = match &opts.cache_file {
            Some(p) => Cache::load(p, Instant::now(), opts.max_stale),
            None => Cache::new(),
        };
        let service = Service::new(opts.service.clone());
        Self {
            inner: Arc::new(Inner {
                opts,
                service,
                cache: Mutex::new(cache),
                network: RwLock::new("default".into()),
                inflight: SingleFlight::new(),
                events: OnceLock::new(),
            }),
        }
    }

    /// Tells the resolver which network the device is on (`"wifi:<ssid>"`, `"cellular"`):
    /// answers are cached per network.
    pub fn set_network(&self, key: &str) {
        *self.inner.network.write().expect("lock") = key.to_owned();
    }

    /// Reports fallbacks and a sample of LocalDNS comparisons to `reporter` from now on (the
    /// first reporter set stays).
    pub fn set_reporter(&self, reporter: Reporter) {
        let _ = self.inner.events.set(reporter);
    }

    pub fn network(&self) -> String {
        self.inner.network.read().expect("lock").clone()
    }

    pub async fn resolve(&self, name: &str) -> Result<Resolution> {
        let raw = name.trim_end_matches('.');
        if let Ok(ip) = raw.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return Ok(Resolution {
                name: raw.to_owned(),
                ips: vec![ip],
                ttl: Duration::MAX,
                path: Path::Literal,
                dropped: vec![],
                service_error: None,
            });
        }
        let name = DomainName::parse(raw).map_err(|e| Error::InvalidInput(format!("{raw:?}: {e}")))?;
        let name = name.as_str().to_owned();
        let network = self.network();
        if let Some(r) = self.cached(&network, &name) {
            return Ok(r);
        }
        // One lookup per name at a time: the others share its result.
        let this = self.clone();
        let (net, n) = (network.clone(), name.clone());
        let shared = self
            .inner
            .inflight
            .run((network, name.clone()), self.lookup_bound(), move || async move {
                this.lookup(&net, &n).await.map_err(|e| match e {
                    Error::NoAddress { detail, .. } => detail,
                    other => other.to_string(),
                })
            })
            .await;
        match shared {
            Ok(s) => s.value.map_err(|detail| Error::NoAddress { name, detail }),
            Err(e) => Err(Error::NoAddress { name, detail: e.to_string() }),
        }
    }

    /// The longest a lookup can take: every service address, then LocalDNS.
    fn lookup_bound(&self) -> Duration {
        let opts = &self.inner.opts;
        opts.service.timeout * opts.service.servers.len().max(1) as u32
            + opts.local_timeout
            + Duration::from_secs(1)
    }

    /// A fresh (or reusable stale) cache entry, starting a background refresh when due.
    fn cached(&self, network: &str, name: &str) -> Option<Resolution> {
        let lookup = self.inner.cache.lock().expect("lock").lookup(network, name, Instant::now());
        let (ips, ttl, path, refresh) = match lookup {
            Lookup::Fresh { ips, remaining, refresh } => (ips, remaining, Path::Cache, refresh),
            Lookup::Expired { ips, age, refresh }
                if self.inner.opts.reuse_expired && age <= self.inner.opts.max_stale =>
            {
                (ips, Duration::ZERO, Path::Stale, refresh)
            }
            Lookup::Expired { refresh: true, .. } => {
                self.inner.cache.lock().expect("lock").refresh_released(network, name);
                return None;
            }
            _ => return None,
        };
        if refresh {
            let this = self.clone();
            let (network, name) = (network.to_owned(), name.to_owned());
            tokio::spawn(async move {
                if this.ask_service(&network, &name).await.is_err() {
                    this.inner.cache.lock().expect("lock").refresh_failed(&network, &name, Instant::now());
                }
            });
        }
        Some(Resolution { name: name.to_owned(), ips, ttl, path, dropped: vec![], service_error: None })
    }

    /// Service, then LocalDNS, then any expired answer, then an error. A fallback is reported
    /// (when a reporter is set) with why the service did not answer and how long it took.
    async fn lookup(&self, network: &str, name: &str) -> Result<Resolution> {
        let started = Instant::now();
        let (reason, service_error) = match self.ask_service(network, name).await {
            Ok(r) => return Ok(r),
            Err(e) => e,
        };
        let result = self.fall_back(network, name, service_error).await;
        if let (Some(reporter), Some(reason)) = (self.inner.events.get(), reason) {
            reporter.record(ClientEvent::DnsFallback {
                host: name.to_owned(),
                reason,
                duration: started.elapsed(),
            });
        }
        result
    }

    async fn fall_back(&self, network: &str, name: &str, service_error: String) -> Result<Resolution> {
        let opts = &self.inner.opts;
        let local = opts.local_dns.lookup(name, opts.local_timeout).await;
        if let Ok(ips) = &local {
            let (kept, dropped) = filter(ips, opts.allow_private, None, &HashMap::new());
            if !kept.is_empty() {
                self.inner.cache.lock().expect("lock").insert(
                    network,
                    name,
                    kept.clone(),
                    opts.local_ttl,
                    Instant::now(),
                );
                return Ok(Resolution {
                    name: name.to_owned(),
                    ips: kept,
                    ttl: opts.local_ttl,
                    path: Path::LocalDns,
                    dropped,
                    service_error: Some(service_error),
                });
            }
        }
        // Last resort: an expired answer beats no answer, whatever `reuse_expired` says.
        if let Lookup::Expired { ips, .. } =
            self.inner.cache.lock().expect("lock").lookup(network, name, Instant::now())
        {
            return Ok(Resolution {
                name: name.to_owned(),
                ips,
                ttl: Duration::ZERO,
                path: Path::Stale,
                dropped: vec![],
                service_error: Some(service_error),
            });
        }
        let local = match local {
            Ok(ips) => format!("LocalDNS gave no usable address ({} dropped)", ips.len()),
            Err(e) => format!("LocalDNS: {e}"),
        };
        Err(Error::NoAddress { name: name.to_owned(), detail: format!("HTTPDNS: {service_error}; {local}") })
    }

    /// Asks the service and caches a usable answer. An error says why, as a fallback reason
    /// (none when no service is configured: nothing fell back).
    async fn ask_service(
        &self,
        network: &str,
        name: &str,
    ) -> Result<Resolution, (Option<FallbackReason>, String)> {
        let opts = &self.inner.opts;
        // In sniff mode the reason is the failure that started it: what the operator must fix.
        let reason = |fault| match fault {
            Fault::Timeout => FallbackReason::Timeout,
            Fault::Connect => FallbackReason::Unreachable,
            Fault::Server => FallbackReason::Error,
        };
        let answer: ServiceAnswer = self.inner.service.query(name).await.map_err(|e| match e {
            Unavailable::Sniffing(fault) => {
                (Some(reason(fault)), "every service address failed recently (sniff mode)".to_owned())
            }
            Unavailable::Failed(fault, e) => {
                (Some(reason(fault)), format!("every service address failed, last: {e}"))
            }
            Unavailable::Refused(e) => (Some(FallbackReason::Refused), format!("refused: {e}")),
            Unavailable::NotConfigured => (None, "no service address configured".to_owned()),
        })?;
        self.maybe_compare(name, &answer.ips);
        let isp = if opts.isp_filter { opts.isp.as_deref().or(answer.client_isp.as_deref()) } else { None };
        let (kept, dropped) = filter(&answer.ips, opts.allow_private, isp, &answer.ip_isp);
        if kept.is_empty() {
            return Err((
                Some(FallbackReason::Empty),
                if dropped.is_empty() {
                    "the service has no address for this name".to_owned()
                } else {
                    format!("every address the service gave was dropped: {dropped:?}")
                },
            ));
        }
        let ttl = Duration::from_secs(answer.ttl.into()).clamp(opts.min_ttl, opts.max_ttl);
        let snapshot = {
            let mut cache = self.inner.cache.lock().expect("lock");
            cache.insert(network, name, kept.clone(), ttl, Instant::now());
            opts.cache_file.as_ref().map(|path| (path.clone(), cache.to_bytes(Instant::now())))
        };
        // The file write (with its fsyncs) happens off the lock and off the async workers.
        if let Some((path, bytes)) = snapshot {
            tokio::task::spawn_blocking(move || {
                if let Err(e) = crate::fsutil::write_atomic(&path, &bytes) {
                    tracing::warn!(path = %path.display(), error = %e, "Could not write the DNS cache file.");
                }
            });
        }
        Ok(Resolution {
            name: name.to_owned(),
            ips: kept,
            ttl,
            path: Path::HttpDns,
            dropped,
            service_error: None,
        })
    }
}

impl Resolver {
    /// For a sampled share of service answers, asks LocalDNS too, on a task of its own (the
    /// app's request never waits for it), and reports both answers for the LocalDNS map.
    fn maybe_compare(&self, name: &str, httpdns: &[IpAddr]) {
        let Some(reporter) = self.inner.events.get() else { return };
        if httpdns.is_empty() || !crate::events::sampled(reporter.options().localdns_sample_rate) {
            return;
        }
        let (reporter, local, timeout) =
            (reporter.clone(), self.inner.opts.local_dns.clone(), self.inner.opts.local_timeout);
        let (name, httpdns) = (name.to_owned(), httpdns.to_vec());
        tokio::spawn(async move {
            // A LocalDNS that does not answer says nothing about what it would have answered.
            if let Ok(mut localdns) = local.lookup(&name, timeout).await {
                // The server takes at most 32 addresses a side: a long answer must not get
                // the whole batch refused.
                localdns.truncate(crate::events::MAX_COMPARE_IPS);
                let mut httpdns = httpdns;
                httpdns.truncate(crate::events::MAX_COMPARE_IPS);
                reporter.record(ClientEvent::LocalDnsCompare { host: name, localdns, httpdns });
            }
        });
    }
}

/// Splits `ips` into the usable and the dropped (with the reason). `client_isp` set: nodes
/// labelled with another carrier are dropped.
pub fn filter(
    ips: &[IpAddr],
    allow_private: bool,
    client_isp: Option<&str>,
    labels: &HashMap<IpAddr, String>,
) -> (Vec<IpAddr>, Vec<(IpAddr, &'static str)>) {
    use httpdns_core::ip::{classify, IpClass};
    let mut kept = Vec::with_capacity(ips.len());
    let mut dropped = Vec::new();
    for &ip in ips {
        let ip = ip.to_canonical();
        let reason = match classify(ip) {
            IpClass::Invalid => Some("unroutable address"),
            IpClass::Private if !allow_private => Some("private or loopback address for a public name"),
            _ => match (client_isp, labels.get(&ip)) {
                (Some(mine), Some(theirs)) if !theirs.eq_ignore_ascii_case(mine) => {
                    Some("node of another carrier")
                }
                _ => None,
            },
        };
        match reason {
            Some(r) => dropped.push((ip, r)),
            None if !kept.contains(&ip) => kept.push(ip),
            None => {}
        }
    }
    (kept, dropped)
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.clone();
        Box::pin(async move {
            let r = Resolver::resolve(&this, name.as_str()).await.map_err(|e| Box::new(e) as Box<_>)?;
            let addrs: Box<dyn Iterator<Item = SocketAddr> + Send> =
                Box::new(r.ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn filter_drops_invalid_private_and_foreign_carrier_nodes() {
        let all = ips(&[
            "0.0.0.0",
            "127.0.0.1",
            "10.1.2.3",
            "192.168.1.1",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "1.1.1.1",
            "2.2.2.2",
            "2402:4e00::1",
        ]);
        let labels: HashMap<IpAddr, String> = [("1.1.1.1", "telecom"), ("2.2.2.2", "unicom")]
            .iter()
            .map(|(i, l)| (i.parse().unwrap(), l.to_string()))
            .collect();
        let (kept, dropped) = filter(&all, false, Some("unicom"), &labels);
        // Unlabelled public addresses stay: the filter acts on labels only where they exist.
        assert_eq!(kept, ips(&["2.2.2.2", "2402:4e00::1"]));
        assert_eq!(dropped.len(), 12);
        assert!(dropped.contains(&("1.1.1.1".parse().unwrap(), "node of another carrier")));
        // Intranet mode keeps private ones, never the unroutable.
        let (kept, _) = filter(&all, true, None, &labels);
        assert!(kept.contains(&"10.1.2.3".parse().unwrap()) && kept.contains(&"127.0.0.1".parse().unwrap()));
        assert!(!kept.contains(&"0.0.0.0".parse().unwrap()) && !kept.contains(&"::".parse().unwrap()));
    }

    #[tokio::test]
    async fn literals_bypass_and_bad_names_are_errors() {
        let r = Resolver::new(ResolverOptions::default());
        let lit = r.resolve("127.0.0.1").await.unwrap();
        assert_eq!((lit.path, lit.ips), (Path::Literal, ips(&["127.0.0.1"])));
        assert!(matches!(r.resolve("a..b").await, Err(Error::InvalidInput(_))));
    }
}

#[cfg(test)]
mod service_tests {
    //! The resolver against a real HTTP service on loopback answering fixed JSON.
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn service(body: &'static str, status: u16) -> (String, Arc<AtomicUsize>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let app = axum::Router::new().fallback(move || {
            let h = h.clone();
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                (axum::http::StatusCode::from_u16(status).unwrap(), body)
            }
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        (format!("http://{addr}"), hits)
    }

    fn opts(servers: &[&str]) -> ResolverOptions {
        let mut o = ResolverOptions::default();
        o.service.servers = servers.iter().map(|s| s.parse().unwrap()).collect();
        o.local_dns = LocalDns::Off;
        o
    }

    const ANSWER: &str = r#"{"dns":[{"host":"a.example.com","client_ip":"1.0.2.7","ips":["2.2.2.1","1.1.1.1","0.0.0.0"],
        "ttl":120,"origin_ttl":120,"client_isp":"unicom","ip_isp":{"2.2.2.1":"unicom","1.1.1.1":"telecom"}}]}"#;

    #[tokio::test]
    async fn fails_over_between_addresses_filters_and_caches() {
        let (good, hits) = service(ANSWER, 200).await;
        let (bad, bad_hits) = service("overloaded", 503).await;
        let r = Resolver::new(opts(&["http://127.0.0.1:1", &bad, &good]));
        let a = r.resolve("A.example.com.").await.unwrap();
        assert_eq!(a.path, Path::HttpDns);
        // The invalid address and the other carrier's node are gone.
        assert_eq!(a.ips, vec!["2.2.2.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(a.dropped.len(), 2);
        assert_eq!(a.ttl, Duration::from_secs(120));
        // Cached: no second request. Another network: asked again, and the address that
        // answered is now tried first (the refused and the 503 ones are not asked again).
        assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::Cache);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        r.set_network("cellular");
        assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::HttpDns);
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        assert_eq!(bad_hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn falls_back_to_localdns_then_to_stale() {
        let (bad, _) = service("down", 503).await;
        let mut o = opts(&[&bad]);
        o.local_dns = LocalDns::System;
        o.allow_private = true;
        let r = Resolver::new(o);
        let a = r.resolve("localhost").await.unwrap();
        assert_eq!(a.path, Path::LocalDns);
        assert!(a.service_error.as_deref().unwrap().contains("503"), "{a:?}");
        // With nothing answering, an expired entry is the last resort, even when expired
        // answers are not otherwise reused.
        let mut o = opts(&[&bad]);
        o.reuse_expired = false;
        let r = Resolver::new(o);
        let expired = Instant::now() - Duration::from_secs(3600);
        r.inner.cache.lock().unwrap().insert(
            "default",
            "gone.example.com",
            vec!["2.2.2.2".parse().unwrap()],
            Duration::from_secs(60),
            expired,
        );
        let a = r.resolve("gone.example.com").await.unwrap();
        assert_eq!((a.path, a.ips), (Path::Stale, vec!["2.2.2.2".parse::<IpAddr>().unwrap()]));
        // Nothing at all: an error naming both paths.
        let err = r.resolve("none.example.com").await.unwrap_err().to_string();
        assert!(err.contains("HTTPDNS") && err.contains("LocalDNS"), "{err}");
    }

    #[tokio::test]
    async fn concurrent_misses_make_one_request() {
        let (good, hits) = service(ANSWER, 200).await;
        let r = Resolver::new(opts(&[&good]));
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let r = r.clone();
                tokio::spawn(async move { r.resolve("a.example.com").await.unwrap() })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().ips.len(), 1);
        }
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    /// A resolve whose caller goes away mid-lookup (the app cancelled the request) neither
    /// cancels the lookup nor leaves the next caller waiting: it joins and gets the answer.
    #[tokio::test]
    async fn a_cancelled_resolve_harms_nobody() {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let app = axum::Router::new().fallback(move || {
            let h = h.clone();
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(400)).await;
                ANSWER
            }
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        let r = Resolver::new(opts(&[&format!("http://{addr}")]));
        let first = tokio::time::timeout(Duration::from_millis(100), r.resolve("a.example.com")).await;
        assert!(first.is_err(), "the first caller gives up");
        let started = Instant::now();
        let a = r.resolve("a.example.com").await.unwrap();
        assert_eq!(a.path, Path::HttpDns);
        assert!(started.elapsed() < Duration::from_millis(400), "joined the lookup already out");
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }
}
