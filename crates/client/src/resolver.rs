//! The resolver: cache, HTTPDNS service, address filters, LocalDNS fallback.
//!
//! `resolve` answers from the memory cache while an entry is fresh (refreshing it in the
//! background once it is past 75% of its TTL), else asks the service, else LocalDNS. Every
//! address passes [`filter`] first: unspecified, loopback, private and otherwise unroutable
//! addresses are dropped for public names (a hijacking LocalDNS answers `127.0.0.1`), and so
//! are nodes labelled with another carrier than the client's. Every answer says which path
//! produced it.
//!
//! Around that (issue 40, as the Android SDK): names on the deny list (or off a non-empty allow
//! list) go straight to LocalDNS; a host list is pre-resolved at start in batches of 5; the
//! service's addresses are refreshed from `/ss` at start, on a network change, when every
//! address failed, and every 8 hours; the IP stack decides the families asked and the order of
//! the answer ([`crate::stack`]).
//!
//! It plugs into reqwest as its DNS resolver ([`reqwest::dns::Resolve`]), the way the SDKs
//! plug into OkHttp's `Dns.lookup`, so every request of the [`crate::CdnClient`] connects to
//! the addresses HTTPDNS chose.

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use httpdns_core::DomainName;
use httpdns_flight::SingleFlight;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cache::{Cache, Lookup};
use crate::error::{Error, Result};
use crate::events::{ClientEvent, FallbackReason, Reporter};
use crate::localdns::LocalDns;
use crate::policy::Decision;
use crate::service::{Fault, Service, ServiceOptions, Unavailable, MAX_BATCH};
use crate::stack::{IpStack, IpStackDetector, RouteProbe};

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
    /// IPv4 first, then IPv6 (IPv6 first on an IPv6-only network), each in the service's order
    /// of preference.
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
    /// Names resolved by [`Resolver::start`] and after a network change, [`MAX_BATCH`] per
    /// request.
    pub pre_resolve: Vec<String>,
    /// Names that never use HTTPDNS (exact, or `*.suffix` for the names under it): LocalDNS
    /// answers them.
    pub deny_hosts: Vec<String>,
    /// When not empty, only these names (same patterns) use HTTPDNS.
    pub allow_hosts: Vec<String>,
    /// Finds the families the device can reach (default: [`RouteProbe`], which sends nothing).
    pub ip_stack: Arc<dyn IpStackDetector>,
    /// Refresh the service addresses from `/ss` at start, on a network change, when every
    /// address failed, and every `service_ip_interval`. Off by default (the Android SDK's is
    /// on): `/ss` lists the replicas' announced addresses, or, when none is announced, the
    /// address a request reached, which behind a balancer is an inside one; turn it on where
    /// the replicas announce their public addresses (`HTTPDNS_PUBLIC_ADDRS`).
    pub refresh_service_ips: bool,
    pub service_ip_interval: Duration,
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
            pre_resolve: Vec::new(),
            deny_hosts: Vec::new(),
            allow_hosts: Vec::new(),
            ip_stack: Arc::new(RouteProbe::default()),
            refresh_service_ips: false,
            service_ip_interval: Duration::from_secs(8 * 3600),
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
    /// The device's IP stack; `None` until first detected (and after a network change).
    stack: RwLock<Option<IpStack>>,
    /// A `/ss` refresh is running (one at a time).
    refreshing_ips: AtomicBool,
    /// The resolution policy in force ([`Resolver::set_policy`]).
    policy: RwLock<Decision>,
}

/// Names per request after a network change (ten requests): the names in use, not the whole
/// cache.
const RERESOLVE_LIMIT: usize = 50;

fn matches(name: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| {
        let p = p.trim().trim_end_matches('.');
        match p.strip_prefix("*.") {
            Some(suffix) => {
                name.len() > suffix.len()
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
            None => name.eq_ignore_ascii_case(p),
        }
    })
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
                stack: RwLock::new(None),
                refreshing_ips: AtomicBool::new(false),
                policy: RwLock::new(Decision::default()),
            }),
        }
    }

    /// Tells the resolver which network the device is on (`"wifi:<ssid>"`, `"cellular"`), on
    /// every change: answers are cached per network. The IP stack is detected again, and, on a
    /// task of its own (inside a tokio runtime), the service addresses are refreshed from `/ss`
    /// and the pre-resolve list and the names the old network had cached (at most 50) are
    /// resolved for the new one.
    pub fn set_network(&self, key: &str) {
        let old = std::mem::replace(&mut *self.inner.network.write(), key.to_owned());
        self.detect_stack();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let mut names = self.inner.opts.pre_resolve.clone();
        if old != key {
            names.extend(self.inner.cache.lock().names(&old, RERESOLVE_LIMIT));
        }
        let this = self.clone();
        runtime.spawn(async move {
            if this.inner.opts.refresh_service_ips {
                this.refresh_service_ips().await;
            }
            this.pre_resolve(&names).await;
        });
    }

    /// The start-up work, on a task of its own: the IP stack, the service addresses from `/ss`,
    /// the pre-resolve list; then `/ss` again every `service_ip_interval`. Aborting the handle
    /// stops it (`CdnClient::start` runs it among its background tasks).
    pub fn start(&self) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let opts = &this.inner.opts;
            this.detect_stack();
            let refresh = opts.refresh_service_ips && this.inner.service.is_configured();
            if refresh {
                this.refresh_service_ips().await;
            }
            this.pre_resolve(&opts.pre_resolve).await;
            if !refresh {
                return;
            }
            loop {
                tokio::time::sleep(opts.service_ip_interval).await;
                this.refresh_service_ips().await;
            }
        })
    }

    /// Asks the detector for the device's IP stack now, and keeps it.
    pub fn detect_stack(&self) -> IpStack {
        let stack = self.inner.opts.ip_stack.stack();
        *self.inner.stack.write() = Some(stack);
        stack
    }

    /// The IP stack in force (detected on first use).
    pub fn stack(&self) -> IpStack {
        let known = *self.inner.stack.read();
        known.unwrap_or_else(|| self.detect_stack())
    }

    /// The service addresses asked now, in order.
    pub fn service_addresses(&self) -> Vec<crate::Url> {
        self.inner.service.servers().to_vec()
    }

    /// Replaces the service addresses with `/ss`'s list (the configured ones last); `None` when
    /// no address answered one. One refresh at a time: a call while one runs returns `None`.
    pub async fn refresh_service_ips(&self) -> Option<Vec<crate::Url>> {
        if self.inner.refreshing_ips.swap(true, Ordering::AcqRel) {
            return None;
        }
        let list = self.inner.service.refresh_service_ips().await;
        self.inner.refreshing_ips.store(false, Ordering::Release);
        list
    }

    /// Puts a resolution policy in force (the config center's decision for this device):
    /// `httpdns: false` answers every name from LocalDNS without asking the service,
    /// `local_dns_fallback: false` answers a failed lookup with a stale answer instead of
    /// LocalDNS, `timeout` bounds each service request, and `pre_resolve_hosts` are resolved
    /// now (on a task of its own, inside a tokio runtime).
    pub fn set_policy(&self, decision: Decision) {
        self.inner.service.set_timeout(decision.timeout);
        let hosts = decision.pre_resolve_hosts.clone();
        let httpdns = decision.httpdns;
        *self.inner.policy.write() = decision;
        if httpdns && !hosts.is_empty() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let this = self.clone();
                rt.spawn(async move {
                    this.pre_resolve(&hosts).await;
                });
            }
        }
    }

    /// The resolution policy in force.
    pub fn policy(&self) -> Decision {
        self.inner.policy.read().clone()
    }

    /// Whether `name` (normalised) goes through HTTPDNS at all: not on `deny_hosts`, and on
    /// `allow_hosts` when that is set.
    pub fn uses_httpdns(&self, name: &str) -> bool {
        let opts = &self.inner.opts;
        !matches(name, &opts.deny_hosts) && (opts.allow_hosts.is_empty() || matches(name, &opts.allow_hosts))
    }

    /// Resolves `names` that are not fresh in the cache (literals, invalid names and names that
    /// do not use HTTPDNS skipped), [`MAX_BATCH`] per service request, filling the cache.
    /// Returns how many got a usable answer. Nothing falls back to LocalDNS: a name the service
    /// did not answer is looked up as usual when the app asks for it.
    pub async fn pre_resolve<S: AsRef<str>>(&self, names: &[S]) -> usize {
        let network = self.network();
        let mut todo: Vec<String> = Vec::new();
        {
            let cache = self.inner.cache.lock();
            for raw in names {
                let raw = raw.as_ref().trim().trim_end_matches('.');
                if raw.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok() {
                    continue;
                }
                let Ok(name) = DomainName::parse(raw) else { continue };
                let name = name.as_str().to_owned();
                if !todo.contains(&name)
                    && self.uses_httpdns(&name)
                    && cache.needs_answer(&network, &name, Instant::now())
                {
                    todo.push(name);
                }
            }
        }
        if todo.is_empty() || !self.inner.service.is_configured() {
            return 0;
        }
        let mut answered = 0;
        for chunk in todo.chunks(MAX_BATCH) {
            answered +=
                self.ask_service_many(&network, chunk).await.iter().filter(|(_, r)| r.is_ok()).count();
        }
        answered
    }

    /// The addresses cached for `name` on the current network, fresh or not.
    pub fn cached_addresses(&self, name: &str) -> Option<Vec<IpAddr>> {
        self.inner.cache.lock().peek(&self.network(), name)
    }

    /// Reports fallbacks and a sample of LocalDNS comparisons to `reporter` from now on (the
    /// first reporter set stays).
    pub fn set_reporter(&self, reporter: Reporter) {
        let _ = self.inner.events.set(reporter);
    }

    pub fn network(&self) -> String {
        self.inner.network.read().clone()
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
        let mut r = self.resolve_name(name).await?;
        self.stack().order(&mut r.ips);
        Ok(r)
    }

    /// A valid, normalised name: the lists, the cache, one lookup per name at a time.
    async fn resolve_name(&self, name: String) -> Result<Resolution> {
        if !self.uses_httpdns(&name) {
            return self.local_only(&name, "the name does not use HTTPDNS (allow/deny lists)").await;
        }
        if !self.inner.policy.read().httpdns {
            // The place is degraded (or held back): LocalDNS at once, no service timeout paid.
            return self.local_only(&name, "the resolution policy sends this device to LocalDNS").await;
        }
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

    /// A name that never uses HTTPDNS: LocalDNS, filtered, not cached (nothing to refresh), no
    /// fallback reported (nothing fell back).
    async fn local_only(&self, name: &str, why: &str) -> Result<Resolution> {
        let opts = &self.inner.opts;
        let ips = opts.local_dns.lookup(name, opts.local_timeout).await.map_err(|e| Error::NoAddress {
            name: name.to_owned(),
            detail: format!("{why}; LocalDNS: {e}"),
        })?;
        let (kept, dropped) = filter(&ips, opts.allow_private, None, &HashMap::new());
        if kept.is_empty() {
            return Err(Error::NoAddress {
                name: name.to_owned(),
                detail: format!("{why}; LocalDNS gave no usable address ({} dropped)", dropped.len()),
            });
        }
        Ok(Resolution {
            name: name.to_owned(),
            ips: kept,
            ttl: opts.local_ttl,
            path: Path::LocalDns,
            dropped,
            service_error: Some(why.to_owned()),
        })
    }

    /// The longest a lookup can take: every service address, then LocalDNS.
    fn lookup_bound(&self) -> Duration {
        let opts = &self.inner.opts;
        self.inner.service.timeout() * self.inner.service.servers().len().max(1) as u32
            + opts.local_timeout
            + Duration::from_secs(1)
    }

    /// A fresh (or reusable stale) cache entry, starting a background refresh when due.
    fn cached(&self, network: &str, name: &str) -> Option<Resolution> {
        let lookup = self.inner.cache.lock().lookup(network, name, Instant::now());
        let (ips, ttl, path, refresh) = match lookup {
            Lookup::Fresh { ips, remaining, refresh } => (ips, remaining, Path::Cache, refresh),
            Lookup::Expired { ips, age, refresh }
                if self.inner.opts.reuse_expired && age <= self.inner.opts.max_stale =>
            {
                (ips, Duration::ZERO, Path::Stale, refresh)
            }
            Lookup::Expired { refresh: true, .. } => {
                self.inner.cache.lock().refresh_released(network, name);
                return None;
            }
            _ => return None,
        };
        if refresh {
            let this = self.clone();
            let (network, name) = (network.to_owned(), name.to_owned());
            tokio::spawn(async move {
                if this.ask_service(&network, &name).await.is_err() {
                    this.inner.cache.lock().refresh_failed(&network, &name, Instant::now());
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
        let local = if self.inner.policy.read().local_dns_fallback {
            opts.local_dns.lookup(name, opts.local_timeout).await
        } else {
            // Where LocalDNS lies (the hijack map), a stale answer is the better last resort.
            Err("the resolution policy allows no LocalDNS fallback here".to_owned())
        };
        if let Ok(ips) = &local {
            let (kept, dropped) = filter(ips, opts.allow_private, None, &HashMap::new());
            if !kept.is_empty() {
                self.inner.cache.lock().insert(network, name, kept.clone(), opts.local_ttl, Instant::now());
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
        if let Lookup::Expired { ips, .. } = self.inner.cache.lock().lookup(network, name, Instant::now()) {
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
        let mut all = self.ask_service_many(network, &[name.to_owned()]).await;
        all.pop().map_or_else(|| Err((None, "no answer".to_owned())), |(_, r)| r)
    }

    /// Asks the service for `names` in one request (at most [`MAX_BATCH`]) and caches the usable
    /// answers (one cache-file write). One result per name, in order.
    async fn ask_service_many(
        &self,
        network: &str,
        names: &[String],
    ) -> Vec<(String, Result<Resolution, (Option<FallbackReason>, String)>)> {
        let opts = &self.inner.opts;
        // In sniff mode the reason is the failure that started it: what the operator must fix.
        let reason = |fault| match fault {
            Fault::Timeout => FallbackReason::Timeout,
            Fault::Connect => FallbackReason::Unreachable,
            Fault::Server => FallbackReason::Error,
        };
        let mut answers = match self.inner.service.query_many(names, self.stack()).await {
            Ok(a) => a,
            Err(e) => {
                if matches!(e, Unavailable::Failed(..)) {
                    // Every address failed: the service's list may have moved on.
                    self.refresh_ips_in_background();
                }
                let err = match e {
                    Unavailable::Sniffing(fault) => {
                        (Some(reason(fault)), "every service address failed recently (sniff mode)".to_owned())
                    }
                    Unavailable::Failed(fault, e) => {
                        (Some(reason(fault)), format!("every service address failed, last: {e}"))
                    }
                    Unavailable::Refused(e) => (Some(FallbackReason::Refused), format!("refused: {e}")),
                    Unavailable::NotConfigured => (None, "no service address configured".to_owned()),
                };
                return names.iter().map(|n| (n.clone(), Err(err.clone()))).collect();
            }
        };
        let mut out = Vec::with_capacity(names.len());
        let mut stored = false;
        for name in names {
            let Some(answer) = answers.remove(name) else {
                out.push((
                    name.clone(),
                    Err((Some(FallbackReason::Empty), "the service has no address for this name".to_owned())),
                ));
                continue;
            };
            self.maybe_compare(name, &answer.ips);
            let isp =
                if opts.isp_filter { opts.isp.as_deref().or(answer.client_isp.as_deref()) } else { None };
            let (kept, dropped) = filter(&answer.ips, opts.allow_private, isp, &answer.ip_isp);
            if kept.is_empty() {
                out.push((
                    name.clone(),
                    Err((
                        Some(FallbackReason::Empty),
                        if dropped.is_empty() {
                            "the service has no address for this name".to_owned()
                        } else {
                            format!("every address the service gave was dropped: {dropped:?}")
                        },
                    )),
                ));
                continue;
            }
            let ttl = Duration::from_secs(answer.ttl.into()).clamp(opts.min_ttl, opts.max_ttl);
            self.inner.cache.lock().insert(network, name, kept.clone(), ttl, Instant::now());
            stored = true;
            out.push((
                name.clone(),
                Ok(Resolution {
                    name: name.clone(),
                    ips: kept,
                    ttl,
                    path: Path::HttpDns,
                    dropped,
                    service_error: None,
                }),
            ));
        }
        if stored {
            self.save_cache();
        }
        out
    }

    /// Writes the cache file (when there is one) off the lock and off the async workers.
    fn save_cache(&self) {
        let Some(path) = self.inner.opts.cache_file.clone() else { return };
        let bytes = self.inner.cache.lock().to_bytes(Instant::now());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = crate::fsutil::write_atomic(&path, &bytes) {
                tracing::warn!(path = %path.display(), error = %e, "Could not write the DNS cache file.");
            }
        });
    }

    /// A `/ss` refresh on a task of its own, unless one is running or refreshing is off.
    fn refresh_ips_in_background(&self) {
        if !self.inner.opts.refresh_service_ips || self.inner.refreshing_ips.load(Ordering::Acquire) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            this.refresh_service_ips().await;
        });
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
            let r = Resolver::resolve(&this, name.as_str())
                .await
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })?;
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
                (http::StatusCode::from_u16(status).unwrap(), body)
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

    /// Waits (on the tokio clock) until `f` holds.
    async fn until(mut f: impl FnMut() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached");
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
        // The change re-resolves the names in use for the new network in the background.
        until(|| hits.load(Ordering::SeqCst) == 2).await;
        until(|| r.cached_addresses("a.example.com").is_some()).await;
        assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::Cache);
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
        r.inner.cache.lock().insert(
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

#[cfg(test)]
mod issue40_tests {
    //! Pre-resolve, `/ss`, the IP stack and the allow/deny lists, against a loopback service
    //! that answers `/resolve` for whatever names it is asked and `/ss` with a set list.
    use super::*;
    use crate::stack::FixedStack;
    use std::sync::atomic::AtomicUsize;

    struct Fake {
        url: String,
        /// Every request's path and query.
        log: Arc<Mutex<Vec<String>>>,
        /// `/resolve` answers 503 while set.
        down: Arc<AtomicBool>,
        ss: Arc<Mutex<String>>,
    }

    impl Fake {
        fn count(&self, f: impl Fn(&str) -> bool) -> usize {
            self.log.lock().iter().filter(|u| f(u)).count()
        }
        fn resolves(&self) -> Vec<String> {
            self.log.lock().iter().filter(|u| u.starts_with("/resolve")).cloned().collect()
        }
    }

    /// Host `i` of a request gets `2.2.2.<i+1>` and `2402:4e00::<i+1>`, in the batch form when
    /// several are asked.
    async fn fake() -> Fake {
        let log = Arc::new(Mutex::new(Vec::new()));
        let down = Arc::new(AtomicBool::new(false));
        let ss = Arc::new(Mutex::new(r#"{"service_ip":[]}"#.to_owned()));
        let (l2, d2, s2) = (log.clone(), down.clone(), ss.clone());
        let app = axum::Router::new().fallback(move |uri: http::Uri| {
            let (log, down, ss) = (l2.clone(), d2.clone(), s2.clone());
            async move {
                log.lock().push(uri.to_string());
                if uri.path().ends_with("/ss") {
                    return (http::StatusCode::OK, ss.lock().clone());
                }
                if down.load(Ordering::SeqCst) {
                    return (http::StatusCode::SERVICE_UNAVAILABLE, "down".to_owned());
                }
                let q: HashMap<String, String> =
                    url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()).into_owned().collect();
                let hosts: Vec<&str> = q["host"].split(',').collect();
                let mut entries = Vec::new();
                for (i, h) in hosts.iter().enumerate() {
                    let (v4, v6) = (format!("2.2.2.{}", i + 1), format!("2402:4e00::{}", i + 1));
                    if hosts.len() == 1 {
                        entries.push(serde_json::json!({"host": h, "ips": [v4], "ipsv6": [v6], "ttl": 600}));
                    } else {
                        entries.push(serde_json::json!({"host": h, "type": 1, "ips": [v4], "ttl": 600}));
                        entries.push(serde_json::json!({"host": h, "type": 28, "ips": [v6], "ttl": 600}));
                    }
                }
                (http::StatusCode::OK, serde_json::json!({ "dns": entries }).to_string())
            }
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        Fake { url: format!("http://{addr}"), log, down, ss }
    }

    fn opts(f: &Fake, stack: IpStack) -> ResolverOptions {
        let mut o = ResolverOptions::default();
        o.service.servers = vec![f.url.parse().unwrap()];
        o.local_dns = LocalDns::Off;
        o.ip_stack = Arc::new(FixedStack(stack));
        o.refresh_service_ips = true;
        o
    }

    #[track_caller]
    fn until(mut f: impl FnMut() -> bool) -> impl std::future::Future<Output = ()> {
        let at = std::panic::Location::caller();
        async move {
            for _ in 0..500 {
                if f() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("condition of {at} not reached");
        }
    }

    #[tokio::test]
    async fn pre_resolve_asks_five_names_per_request_and_fills_the_cache() {
        let f = fake().await;
        let mut o = opts(&f, IpStack::Dual);
        o.refresh_service_ips = false;
        o.deny_hosts = vec!["skip.example.com".into()];
        let r = Resolver::new(o);
        let mut names: Vec<String> = (0..12).map(|i| format!("h{i}.example.com")).collect();
        names.extend(["H0.example.com.".into(), "10.0.0.1".into(), "a..b".into(), "skip.example.com".into()]);
        assert_eq!(r.pre_resolve(&names).await, 12);
        let asked = f.resolves();
        assert_eq!(asked.len(), 3, "{asked:?}");
        let sizes: Vec<usize> = asked
            .iter()
            .map(|u| {
                let q: HashMap<String, String> =
                    url::form_urlencoded::parse(u.split_once('?').unwrap().1.as_bytes())
                        .into_owned()
                        .collect();
                q["host"].split(',').count()
            })
            .collect();
        assert_eq!(sizes, [5, 5, 2]);
        // Every name is in the cache with its own batch entry's addresses.
        let h6 = r.resolve("h6.example.com").await.unwrap();
        assert_eq!(h6.path, Path::Cache);
        assert_eq!(h6.ips, vec!["2.2.2.2".parse::<IpAddr>().unwrap(), "2402:4e00::2".parse().unwrap()]);
        assert_eq!(r.resolve("h11.example.com").await.unwrap().path, Path::Cache);
        // Fresh names are not asked again.
        assert_eq!(r.pre_resolve(&names).await, 0);
        assert_eq!(f.resolves().len(), 3);
    }

    #[tokio::test]
    async fn the_stack_decides_the_families_asked_and_the_order() {
        let f = fake().await;
        for (stack, query, first) in [
            (IpStack::V4, "query=4&", "2.2.2.1"),
            (IpStack::V6, "query=6&", "2402:4e00::1"),
            (IpStack::Dual, "query=4%2C6&", "2.2.2.1"),
            (IpStack::None, "query=4%2C6&", "2.2.2.1"),
        ] {
            let mut o = opts(&f, stack);
            o.refresh_service_ips = false;
            let r = Resolver::new(o);
            assert_eq!(r.stack(), stack);
            let a = r.resolve("a.example.com").await.unwrap();
            assert_eq!(a.ips[0], first.parse::<IpAddr>().unwrap(), "{stack:?}");
            assert!(f.resolves().last().unwrap().contains(query), "{stack:?}: {:?}", f.resolves());
            // From the cache too.
            assert_eq!(r.resolve("a.example.com").await.unwrap().ips, a.ips);
        }
    }

    #[tokio::test]
    async fn allow_and_deny_lists_keep_names_off_httpdns() {
        let f = fake().await;
        let mut o = opts(&f, IpStack::Dual);
        o.refresh_service_ips = false;
        o.local_dns = LocalDns::System;
        o.allow_private = true;
        o.deny_hosts = vec!["localhost".into(), "*.internal.example.com".into()];
        let r = Resolver::new(o);
        assert!(!r.uses_httpdns("a.internal.example.com"));
        assert!(r.uses_httpdns("internal.example.com"), "*.suffix is the names under it");
        assert!(r.uses_httpdns("xinternal.example.com"));
        let l = r.resolve("localhost").await.unwrap();
        assert_eq!(l.path, Path::LocalDns);
        assert!(l.ips.iter().all(IpAddr::is_loopback));
        assert!(l.service_error.unwrap().contains("allow/deny"));
        assert!(f.resolves().is_empty(), "the service is not asked");
        // A denied name LocalDNS cannot answer is an error, not a service lookup.
        assert!(r.resolve("x.internal.example.com").await.is_err());
        assert!(f.resolves().is_empty());

        // An allow list: only its names use HTTPDNS.
        let mut o = opts(&f, IpStack::Dual);
        o.refresh_service_ips = false;
        o.local_dns = LocalDns::System;
        o.allow_private = true;
        o.allow_hosts = vec!["*.example.com".into()];
        let r = Resolver::new(o);
        assert_eq!(r.resolve("localhost").await.unwrap().path, Path::LocalDns);
        assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::HttpDns);
        assert_eq!(f.resolves().len(), 1);
    }

    /// `/ss` at start, then every 8 hours (paused clock).
    #[tokio::test(start_paused = true)]
    async fn service_ips_at_start_and_every_eight_hours() {
        let f = fake().await;
        let replica = fake().await;
        let port = replica.url.rsplit(':').next().unwrap().to_owned();
        *f.ss.lock() = format!(r#"{{"service_ip":["127.0.0.1"],"service_ip_port":[{port}]}}"#);
        let mut o = opts(&f, IpStack::Dual);
        o.pre_resolve = vec!["a.example.com".into(), "b.example.com".into()];
        let r = Resolver::new(o);
        let task = r.start();
        // `/ss` is asked of the addresses in use: the replica once the list names it.
        let ss = || f.count(|u| u == "/ss") + replica.count(|u| u == "/ss");
        until(|| ss() == 1).await;
        // The list from /ss, the configured address last; pre-resolve went to the replica.
        until(|| r.cached_addresses("b.example.com").is_some()).await;
        let list: Vec<String> = r.service_addresses().iter().map(|u| u.to_string()).collect();
        assert_eq!(list, [format!("{}/", replica.url), format!("{}/", f.url)]);
        assert_eq!(replica.resolves().len(), 1, "one batch of two");
        assert!(f.resolves().is_empty());
        tokio::time::advance(Duration::from_secs(8 * 3600 - 60)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(ss(), 1);
        tokio::time::advance(Duration::from_secs(60)).await;
        until(|| ss() == 2).await;
        assert_eq!(replica.count(|u| u == "/ss"), 1);
        tokio::time::advance(Duration::from_secs(8 * 3600)).await;
        until(|| ss() == 3).await;
        task.abort();
    }

    #[tokio::test]
    async fn a_network_change_refreshes_the_list_and_re_resolves_the_names_in_use() {
        let f = fake().await;
        let stacks = Arc::new(AtomicUsize::new(0));
        #[derive(Debug)]
        struct Counting(Arc<AtomicUsize>);
        impl IpStackDetector for Counting {
            fn stack(&self) -> IpStack {
                // IPv4 first, IPv6-only after the change.
                if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                    IpStack::V4
                } else {
                    IpStack::V6
                }
            }
        }
        let mut o = opts(&f, IpStack::Dual);
        o.ip_stack = Arc::new(Counting(stacks.clone()));
        o.pre_resolve = vec!["p.example.com".into()];
        let r = Resolver::new(o);
        r.set_network("wifi:home");
        until(|| r.cached_addresses("p.example.com").is_some()).await;
        assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::HttpDns);
        let before = f.count(|u| u == "/ss");
        assert_eq!(before, 1);
        r.set_network("cellular");
        assert_eq!(r.stack(), IpStack::V6, "detected again");
        until(|| f.count(|u| u == "/ss") == 2).await;
        until(|| {
            r.cached_addresses("a.example.com").is_some() && r.cached_addresses("p.example.com").is_some()
        })
        .await;
        let last = f.resolves().last().cloned().unwrap();
        assert!(last.contains("query=6&"), "{last}");
        let a = r.resolve("a.example.com").await.unwrap();
        assert_eq!(a.path, Path::Cache);
        assert!(a.ips[0].is_ipv6() && a.ips[1].is_ipv4(), "IPv6 first on IPv6 only: {:?}", a.ips);
    }

    #[tokio::test]
    async fn every_address_failing_refreshes_the_list() {
        let f = fake().await;
        f.down.store(true, Ordering::SeqCst);
        let r = Resolver::new(opts(&f, IpStack::Dual));
        assert!(r.resolve("a.example.com").await.is_err());
        until(|| f.count(|u| u == "/ss") == 1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The refresh ended sniff mode: the next lookup asks the service again.
        f.down.store(false, Ordering::SeqCst);
        assert_eq!(r.resolve("a.example.com").await.unwrap().path, Path::HttpDns);
        // With refreshing off, nothing is asked.
        let g = fake().await;
        g.down.store(true, Ordering::SeqCst);
        let mut o = opts(&g, IpStack::Dual);
        o.refresh_service_ips = false;
        let r = Resolver::new(o);
        assert!(r.resolve("a.example.com").await.is_err());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(g.count(|u| u.ends_with("/ss")), 0);
    }

    /// The resolution policy's pre-resolve list is resolved when the policy arrives (one batch
    /// request), and its timeout is what each service request gets.
    #[tokio::test]
    async fn a_policy_pre_resolves_its_hosts_and_sets_the_timeout() {
        let f = fake().await;
        let mut o = opts(&f, IpStack::Dual);
        o.refresh_service_ips = false;
        let r = Resolver::new(o);
        let hosts = vec!["p1.example.com".to_owned(), "p2.example.com".to_owned()];
        r.set_policy(Decision {
            timeout: Some(Duration::from_millis(700)),
            pre_resolve_hosts: hosts.clone(),
            ..Decision::default()
        });
        until(|| r.cached_addresses("p2.example.com").is_some()).await;
        assert_eq!(f.resolves().len(), 1, "one batch: {:?}", f.resolves());
        assert_eq!(r.inner.service.timeout(), Duration::from_millis(700));
        r.set_policy(Decision::default());
        assert_eq!(r.inner.service.timeout(), ServiceOptions::default().timeout, "cleared with the policy");
    }
}
