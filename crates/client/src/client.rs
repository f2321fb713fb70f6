//! [`CdnClient`]: every piece together, as the app's network layer uses it.
//!
//! A `get` converges the URL onto the unified host list (when the config says so for this
//! device), resolves hosts through HTTPDNS (the reqwest client's DNS resolver is the
//! [`Resolver`]), and on a 5xx or a connection failure, while the network works, records the
//! failure, possibly disabling the host, and retries the same request on the next enabled host;
//! when every host failed or is disabled, the original URL is used. Background tasks revive
//! disabled hosts with `HEAD` probes and poll the config center.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, Url};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config_source::{ActiveConfig, ConfigStore, Refresh};
use crate::convergence::{self, authority};
use crate::error::{Error, Result};
use crate::events::{self, ClientEvent, Failure, Reporter, RequestOutcome};
use crate::failover::{FailureEffect, HostPool};
use crate::netcheck::NetworkCheck;
use crate::policy::Decision;
use crate::resolver::Resolver;

/// Retries of a request whose reused connection failed, before it counts as a host failure:
/// one per idle pooled connection that may have died with its node.
const STALE_CONNECTION_RETRIES: usize = 2;

mod fetched;
mod options;

pub use fetched::{Attempt, Fetched, Outcome, Route};
pub use options::ClientOptions;

/// A cheap handle; clones share everything.
#[derive(Clone)]
pub struct CdnClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CdnClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CdnClient").finish_non_exhaustive()
    }
}

struct Inner {
    opts: ClientOptions,
    http: reqwest::Client,
    resolver: Resolver,
    config: ConfigStore,
    hosts: Mutex<HostPool>,
    /// Config version the host pool was built from (`u64::MAX`: none yet).
    hosts_version: AtomicU64,
    netcheck: NetworkCheck,
    events: Option<Reporter>,
    feedback: Option<Reporter>,
}

/// The background tasks of a client; dropping this stops them.
#[derive(Debug)]
pub struct Background {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Background {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl CdnClient {
    pub fn new(opts: ClientOptions) -> Result<Self> {
        let resolver = Resolver::new(opts.resolver.clone());
        let feedback = opts.feedback.as_ref().and_then(|f| {
            // `/feedback` on every service address as configured (or the given URL).
            let urls = service_urls(&opts, f.url.as_ref(), "/feedback");
            if urls.is_empty() {
                return None;
            }
            let mut f = f.clone();
            f.account = f.account.or_else(|| opts.resolver.service.account.clone());
            Some(Reporter::feedback(f, urls))
        });
        let mut http = crate::http::client_builder()
            .no_proxy()
            .dns_resolver(Arc::new(resolver.clone()))
            .connect_timeout(opts.connect_timeout)
            .timeout(opts.request_timeout);
        if let Some(f) = &feedback {
            http = http.connector_layer(crate::feedback::FeedbackLayer::new(f.clone(), resolver.clone()));
        }
        let http = http.build().map_err(Error::HttpClient)?;
        let config = ConfigStore::new(opts.config.clone());
        let netcheck =
            NetworkCheck::new(opts.network_probe_port, opts.network_probe_timeout, Duration::from_secs(2));
        let hosts = Mutex::new(HostPool::new(Vec::new(), opts.ejection));
        let events = opts.events.as_ref().and_then(|e| {
            // The events URL, or `/app/events` on every service address, in their order: a
            // batch fails over between them as lookups do.
            let urls = service_urls(&opts, e.url.as_ref(), "/app/events");
            if urls.is_empty() {
                return None;
            }
            let mut e = e.clone();
            e.account = e.account.or_else(|| opts.resolver.service.account.clone());
            Some(Reporter::new(e, urls))
        });
        if let Some(r) = &events {
            resolver.set_reporter(r.clone());
        }
        Ok(Self {
            inner: Arc::new(Inner {
                opts,
                http,
                resolver,
                config,
                hosts,
                hosts_version: AtomicU64::new(u64::MAX),
                netcheck,
                events,
                feedback,
            }),
        })
    }

    pub fn resolver(&self) -> &Resolver {
        &self.inner.resolver
    }

    pub fn config(&self) -> &ConfigStore {
        &self.inner.config
    }

    /// The event reporter, when reporting is on.
    pub fn events(&self) -> Option<&Reporter> {
        self.inner.events.as_ref()
    }

    /// The `/feedback` reporter of connection outcomes, when it is on.
    pub fn feedback(&self) -> Option<&Reporter> {
        self.inner.feedback.as_ref()
    }

    /// `(host, disabled)` in failover order, for this device.
    pub fn host_states(&self) -> Vec<(String, bool)> {
        self.sync_hosts();
        let pool = self.inner.hosts.lock();
        pool.hosts().into_iter().map(|h| (h.clone(), pool.is_disabled(&h))).collect()
    }

    /// Fetches the config once (when a URL is configured) and starts the resolver's start-up
    /// work ([`Resolver::start`]: IP stack, `/ss`, pre-resolve, `/ss` every 8 hours), the revive
    /// prober and the config poller.
    pub async fn start(&self) -> Background {
        let resolver = self.inner.resolver.start();
        if self.inner.opts.config.url.is_some() {
            if let Err(e) = self.inner.config.refresh().await {
                tracing::warn!(error = %e, "First config fetch failed; using the kept or default document.");
            }
        }
        self.apply_policy().await;
        let reviver = {
            let this = self.clone();
            tokio::spawn(async move {
                loop {
                    this.probe_disabled_hosts().await;
                    let now = Instant::now();
                    // Wake at least every second (a host disabled meanwhile), never spin.
                    let cap = this.revive_interval().clamp(Duration::from_millis(10), Duration::from_secs(1));
                    let next = this.inner.hosts.lock().next_probe_at().unwrap_or(now + cap);
                    tokio::time::sleep_until(next.clamp(now + Duration::from_millis(10), now + cap)).await;
                }
            })
        };
        let mut tasks = vec![resolver, reviver];
        if let Some(r) = &self.inner.events {
            tasks.push(r.start());
        }
        if let Some(r) = &self.inner.feedback {
            tasks.push(r.start());
        }
        if self.inner.opts.config.url.is_some() {
            let this = self.clone();
            tasks.push(tokio::spawn(async move { this.follow_config().await }));
        }
        Background { tasks }
    }

    /// Puts the resolution policy of the document in force into effect: the server's decision
    /// for this device (a `POST` of the config center), or, when that fails, the device's own
    /// from the document's `default` and `segments` ([`Decision::from_policy`]).
    pub async fn apply_policy(&self) {
        let Some(cfg) = self.inner.config.current() else { return };
        let opts = &self.inner.opts;
        let decision = match &cfg.doc.resolution_policy {
            None => Decision::default(),
            Some(policy) => {
                let own = || Decision::from_policy(policy, opts.segment.as_deref(), &opts.device_id);
                if opts.device_id.is_empty() || opts.config.url.is_none() {
                    own()
                } else {
                    match self.inner.config.device_answer(&opts.device_id, opts.segment.as_deref()).await {
                        Ok(v) => Decision::from_answer(&v).unwrap_or_else(own),
                        Err(e) => {
                            tracing::warn!(error = %e, "No per-device policy from the config center; deciding from the document.");
                            own()
                        }
                    }
                }
            }
        };
        if let Some(r) = &self.inner.events {
            let side = cfg.doc.resolution_policy.as_ref().map(|_| decision.httpdns);
            r.set_policy(side, cfg.version);
        }
        self.inner.resolver.set_policy(decision);
    }

    fn revive_interval(&self) -> Duration {
        self.inner.opts.revive_interval.unwrap_or_else(|| {
            let ms = self.inner.config.current().map_or(600_000, |c| c.doc.revive_probe_interval);
            Duration::from_millis(ms)
        })
    }

    /// Keeps the config current: a long poll held by the server where it offers one (a new
    /// version arrives within a second of its publish), else a conditional GET every
    /// `configRequestInterval`. A server that answers a long poll at once (a proxy in between
    /// that does not hold requests) is polled from then on.
    async fn follow_config(&self) {
        let config = &self.inner.config;
        let mut holds = true;
        let mut failures = 0u32;
        loop {
            let wait = config.long_poll().filter(|_| holds);
            let started = Instant::now();
            let result = match wait {
                Some(w) => config.wait_for_change(w).await,
                None => {
                    tokio::time::sleep(self.config_interval()).await;
                    config.refresh().await
                }
            };
            match result {
                Ok(r) => {
                    failures = 0;
                    tracing::debug!(result = ?r, long_poll = wait.is_some(), "Config polled.");
                    if matches!(r, Refresh::Updated(_)) {
                        self.apply_policy().await;
                    }
                    if let (Some(w), Refresh::NotModified) = (wait, r) {
                        if started.elapsed() < w / 2 {
                            tracing::info!(
                                "The config center answered a long poll at once; polling instead."
                            );
                            holds = false;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Config poll failed; keeping the document in force.");
                    if wait.is_some() {
                        // Backs off (1 s doubling, at most the interval), so a server that is
                        // down is not asked in a loop.
                        failures = failures.saturating_add(1);
                        let backoff = Duration::from_secs(1u64 << failures.min(9));
                        tokio::time::sleep(backoff.min(self.config_interval())).await;
                    }
                }
            }
        }
    }

    fn config_interval(&self) -> Duration {
        self.inner.opts.config_interval.unwrap_or_else(|| {
            let ms = self.inner.config.current().map_or(600_000, |c| c.doc.config_request_interval);
            Duration::from_millis(ms)
        })
    }

    /// Rebuilds the host pool when the config version changed; returns the config in force.
    fn sync_hosts(&self) -> Option<Arc<ActiveConfig>> {
        let cfg = self.inner.config.current()?;
        // Checked and rebuilt under the pool's lock: a request racing the revive task must
        // not see the new version with the old (or empty) pool.
        let mut pool = self.inner.hosts.lock();
        if let Some(r) = &self.inner.events {
            r.set_side(Some(cfg.doc.convergence_enabled(&self.inner.opts.device_id)));
        }
        if self.inner.hosts_version.load(Ordering::Acquire) != cfg.version {
            pool.set_hosts(convergence::host_list(&cfg.doc, &self.inner.opts.device_id));
            self.inner.hosts_version.store(cfg.version, Ordering::Release);
        }
        drop(pool);
        Some(cfg)
    }

    /// One round of `HEAD` probes of the disabled hosts that are due. Returns how many came
    /// back.
    pub async fn probe_disabled_hosts(&self) -> usize {
        self.sync_hosts();
        let due = self.inner.hosts.lock().due_probes(Instant::now());
        let mut revived = 0;
        for (host, url) in due {
            let ok = match self.inner.http.request(Method::HEAD, &url).send().await {
                Ok(r) => r.status().is_success(),
                Err(_) => false,
            };
            if ok {
                revived += 1;
                tracing::info!(%host, "CDN host answers its probe again; re-enabled.");
                if let Some(r) = &self.inner.events {
                    r.record(ClientEvent::HostRevive { host: host.clone() });
                }
            }
            self.inner.hosts.lock().probe_result(&host, ok, Instant::now(), self.revive_interval());
        }
        revived
    }

    /// `GET url` through convergence and failover.
    pub async fn get(&self, url: &str) -> Result<Fetched> {
        let url = Url::parse(url).map_err(|source| Error::InvalidUrl { url: url.to_owned(), source })?;
        let started = Instant::now();
        let cfg = self.sync_hosts();
        let converged =
            cfg.as_ref().and_then(|c| convergence::converge(&c.doc, &self.inner.opts.device_id, &url));
        let Some(conv) = converged else {
            let mut attempts = Vec::new();
            let resp = self.attempt(&url, started, &mut attempts).await;
            self.report(&attempts, &resp, started);
            return finish(resp, url, Route::Direct, attempts);
        };
        let public_ips = cfg.as_ref().map(|c| c.doc.public_ip_list.clone()).unwrap_or_default();
        let mut attempts = Vec::new();
        let candidates = self.inner.hosts.lock().candidates();
        for host in candidates {
            let Some(target) = conv.on_host(&host) else { continue };
            match self.attempt(&target, started, &mut attempts).await {
                Ok(resp) if !resp.status().is_server_error() => {
                    self.inner.hosts.lock().report_success(&host);
                    let resp = Ok(resp);
                    self.report(&attempts, &resp, started);
                    return finish(resp, target, Route::Unified, attempts);
                }
                Ok(_) => self.failed(&host, &target, &mut attempts),
                // No address for the host is a resolution failure, not the host's: move on
                // without disabling it.
                Err(Error::NoAddress { .. } | Error::Timeout(_)) => {}
                Err(_) => {
                    // A connection failure counts against the host only while the network
                    // works (seed 000 §3.3): a phone in a lift must not disable every host. The
                    // request still tries the next hosts and the original URL, since the check
                    // itself can be wrong (TCP/53 blocked on some Wi-Fi).
                    if self.inner.netcheck.network_works(&public_ips).await {
                        self.failed(&host, &target, &mut attempts);
                    } else if let Some(Attempt { outcome: Outcome::Failed(m), .. }) = attempts.last_mut() {
                        m.push_str(" (network check failed: no publicIpList address answers; host kept)");
                    }
                }
            }
        }
        // Every unified host failed or is disabled: the URL as it was before convergence.
        let original = self.attempt(&conv.original, started, &mut attempts).await;
        self.report(&attempts, &original, started);
        finish(original, conv.original, Route::Original, attempts)
    }

    fn failed(&self, host: &str, target: &Url, attempts: &mut [Attempt]) {
        let effect = self.inner.hosts.lock().report_failure(
            host,
            target.as_str(),
            Instant::now(),
            self.revive_interval(),
        );
        if let Some(last) = attempts.last_mut() {
            last.disabled_host = effect == FailureEffect::Ejected;
        }
        // `AlreadyDisabled`: a concurrent request disabled it first.
        if effect == FailureEffect::Ejected {
            tracing::warn!(%host, "CDN host disabled; moving to the next one.");
        }
    }

    /// One request; records the attempt.
    async fn attempt(
        &self,
        url: &Url,
        started: Instant,
        attempts: &mut Vec<Attempt>,
    ) -> Result<reqwest::Response> {
        let t0 = Instant::now();
        let mut record = Attempt {
            url: url.to_string(),
            resolved: None,
            outcome: Outcome::Failed(String::new()),
            started_after: t0 - started,
            elapsed: Duration::ZERO,
            disabled_host: false,
            dns_failed: false,
            timed_out: false,
        };
        if let Some(url::Host::Domain(name)) = url.host() {
            // Bounded: the connect timeout of reqwest does not cover the lookup done here.
            let limit = self.inner.opts.request_timeout;
            let resolved = tokio::time::timeout(limit, self.inner.resolver.resolve(name))
                .await
                .unwrap_or(Err(Error::Timeout(limit)));
            match resolved {
                Ok(r) => record.resolved = Some((r.path, r.ips)),
                Err(e) => {
                    record.outcome = Outcome::Failed(e.to_string());
                    record.dns_failed = matches!(e, Error::NoAddress { .. });
                    record.timed_out = matches!(e, Error::Timeout(_));
                    record.elapsed = t0.elapsed();
                    attempts.push(record);
                    return Err(e);
                }
            }
        }
        let mut result = self.inner.http.get(url.clone()).send().await;
        // A pooled keep-alive connection to a node that has since died fails without a
        // connect error ("connection closed before message completed", a reset). As OkHttp's
        // `retryOnConnectionFailure` does, a GET is retried on a fresh connection before that
        // counts against the host: a dead node must not disable its whole host.
        for _ in 0..STALE_CONNECTION_RETRIES {
            match &result {
                Err(e) if !e.is_connect() && !e.is_timeout() && !e.is_builder() && !e.is_redirect() => {
                    tracing::debug!(url = %url, error = %crate::service::error_chain(e), "Retrying on a fresh connection.");
                    result = self.inner.http.get(url.clone()).send().await;
                }
                _ => break,
            }
        }
        record.elapsed = t0.elapsed();
        let out = match result {
            Ok(resp) => {
                record.outcome = Outcome::Status(resp.status().as_u16());
                Ok(resp)
            }
            Err(e) => {
                let msg = crate::service::error_chain(&e);
                record.outcome = Outcome::Failed(msg.clone());
                record.timed_out = e.is_timeout();
                Err(Error::Request { attempts: attempts.len() + 1, last: msg, source: e })
            }
        };
        attempts.push(record);
        out
    }
}

impl CdnClient {
    /// Reports a request's host switches, and the request itself when sampled.
    fn report(&self, attempts: &[Attempt], resp: &Result<reqwest::Response>, started: Instant) {
        let Some(r) = &self.inner.events else { return };
        let host_of = |a: &Attempt| Url::parse(&a.url).ok().and_then(|u| authority(&u)).unwrap_or_default();
        for pair in attempts.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let reason = match &a.outcome {
                Outcome::Status(s) if *s >= 500 => Failure::Status5xx,
                Outcome::Status(_) => continue,
                // Resolution failures are reported by the resolver (dns_fallback).
                Outcome::Failed(_) if a.dns_failed => continue,
                Outcome::Failed(_) if a.timed_out => Failure::Timeout,
                Outcome::Failed(_) => Failure::ConnectError,
            };
            r.record(ClientEvent::HostSwitch {
                from: host_of(a),
                to: Some(host_of(b)),
                reason,
                duration: b.started_after.saturating_sub(a.started_after),
            });
        }
        let rate = r.options().request_sample_rate;
        let Some(last) = attempts.last() else { return };
        if !events::sampled(rate) {
            return;
        }
        let outcome = match (resp, &last.outcome) {
            (Ok(resp), _) if resp.status().is_server_error() => RequestOutcome::Failed(Failure::Status5xx),
            (Ok(resp), _) if resp.status().is_client_error() => RequestOutcome::Status4xx,
            (Ok(_), _) => RequestOutcome::Ok,
            (Err(_), _) if last.dns_failed => RequestOutcome::DnsError,
            (Err(_), _) if last.timed_out => RequestOutcome::Failed(Failure::Timeout),
            (Err(_), _) => RequestOutcome::Failed(Failure::ConnectError),
        };
        r.record(ClientEvent::Request {
            host: host_of(last),
            outcome,
            latency: started.elapsed(),
            sample_rate: rate,
        });
    }
}

/// `url`, or `path` on every configured service address, in their order: a batch fails over
/// between them as lookups do.
fn service_urls(opts: &ClientOptions, url: Option<&Url>, path: &str) -> Vec<Url> {
    match url {
        Some(u) => vec![u.clone()],
        None => opts
            .resolver
            .service
            .servers
            .iter()
            .map(|s| {
                let mut u = s.clone();
                u.set_path(path);
                u.set_query(None);
                u
            })
            .collect(),
    }
}

fn finish(
    resp: Result<reqwest::Response>,
    url: Url,
    route: Route,
    attempts: Vec<Attempt>,
) -> Result<Fetched> {
    let response = resp?;
    let host = authority(&url).unwrap_or_default();
    Ok(Fetched { response, url, host, route, attempts })
}

#[cfg(test)]
mod tests;
