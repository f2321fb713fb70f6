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
use crate::policy::Decision;
use crate::service::{Fault, Service, Unavailable, MAX_BATCH};
use crate::stack::IpStack;

mod compare;
mod filter;
mod options;
mod resolution;

pub use filter::filter;
pub use options::ResolverOptions;
pub use resolution::{Path, Resolution};

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
            // The detail crosses the lookup's single flight as text (`Error::NoAddress`).
            opts.local_dns.lookup(name, opts.local_timeout).await.map_err(|e| e.to_string())
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
mod tests;

#[cfg(test)]
mod service_tests;

#[cfg(test)]
mod issue40_tests;
