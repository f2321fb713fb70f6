//! Reporting what the app saw to the service (`POST /app/events`, docs/observability.md):
//! resolution fallbacks, host switches and revivals, a sample of requests, and a sample of
//! LocalDNS answers beside HTTPDNS's for the hijack map.
//!
//! Recording never waits and never fails: an event is pushed onto a bounded queue under a
//! short lock (the oldest is dropped, and counted, when it is full). A background task sends
//! batches every [`EventOptions::interval`] (sooner when a batch is full), retries with
//! exponential backoff, and drops a batch the server refuses as invalid. The queue is written to
//! [`EventOptions::file`] (atomically) after every send and every interval, and read back at
//! start, so events survive a restart up to the cap. Device ids are never sent.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use serde_json::{json, Value};
use sha2::Digest as _;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::service::Account;

/// Addresses per side of a `localdns_compare` that the server takes.
pub const MAX_COMPARE_IPS: usize = 32;

#[derive(Debug, Clone)]
pub struct EventOptions {
    /// Where batches go; `None`: `/app/events` on the first service address (no address: off).
    pub url: Option<Url>,
    /// Signs batches (`?account=&t=&s=`); the service's account when `None` here.
    pub account: Option<Account>,
    /// Events per request.
    pub batch_size: usize,
    /// How often a batch is sent (when one is not full sooner).
    pub interval: Duration,
    /// Events kept waiting at most; the oldest go first.
    pub max_queue: usize,
    /// Share of requests reported as `request` events.
    pub request_sample_rate: f64,
    /// Share of HTTPDNS answers also asked of LocalDNS and reported (`localdns_compare`).
    pub localdns_sample_rate: f64,
    /// The queue's file across restarts.
    pub file: Option<PathBuf>,
    /// One send's bound.
    pub timeout: Duration,
    /// The longest wait between retries.
    pub max_backoff: Duration,
}

impl EventOptions {
    /// The settings of the `/feedback` reporter ([`Reporter::feedback`]), as the Android SDK's:
    /// batches of 100 (the server's limit) every 30 s, at most 500 waiting, no file (a report is
    /// worth little once old), never woken early by a full batch (the server takes 5 requests a
    /// second per client).
    pub fn feedback() -> Self {
        Self {
            batch_size: 100,
            max_queue: 500,
            request_sample_rate: 0.0,
            localdns_sample_rate: 0.0,
            ..Self::default()
        }
    }
}

impl Default for EventOptions {
    fn default() -> Self {
        Self {
            url: None,
            account: None,
            batch_size: 50,
            interval: Duration::from_secs(30),
            max_queue: 1000,
            request_sample_rate: 0.01,
            localdns_sample_rate: 0.01,
            file: None,
            timeout: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
        }
    }
}

mod kinds;

pub use kinds::{ClientEvent, Failure, FallbackReason, FeedbackReport, RequestOutcome};

/// What the reporter did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReporterStats {
    pub recorded: u64,
    /// Accepted by the server.
    pub sent: u64,
    /// Waiting in the queue.
    pub queued: usize,
    /// Dropped because the queue was full.
    pub dropped: u64,
    /// Refused by the server as invalid (dropped, not retried).
    pub refused: u64,
    /// Sends that failed and will be retried.
    pub failed_sends: u64,
    pub last_error: Option<String>,
    /// Per event type, what was recorded.
    pub by_type: Vec<(String, u64)>,
}

/// How one POST of a batch ended.
enum Sent {
    Taken,
    /// Never to be taken: dropped.
    Refused(String),
    /// Worth another address, or a later try.
    Retry(String),
}

/// A cheap handle; clones share the queue.
#[derive(Clone, Debug)]
pub struct Reporter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    opts: EventOptions,
    /// Where batches go, tried in order from the one that last took a batch.
    urls: Vec<Url>,
    preferred: std::sync::atomic::AtomicUsize,
    http: reqwest::Client,
    state: Mutex<State>,
    notify: Notify,
    /// 0: unknown, 1: off, 2: on.
    side: AtomicU8,
    /// The device's side of its place's `httpdnsRate`, the same encoding.
    policy_side: AtomicU8,
    /// The config version the device runs; 0: none said.
    config_version: AtomicU64,
    // One send at a time (the loop, and `flush`).
    sending: tokio::sync::Mutex<()>,
    /// `events` (`/app/events`) or `reports` (`/feedback`): the body's list.
    list_key: &'static str,
}
#[derive(Debug, Default)]
struct State {
    /// (sequence number, event JSON).
    queue: VecDeque<(u64, Value)>,
    next_seq: u64,
    stats: ReporterStats,
}

/// Whether a thing sampled at `rate` is taken this time.
pub fn sampled(rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    if rate <= 0.0 {
        return false;
    }
    let r = getrandom::u32().unwrap_or(0);
    f64::from(r) < rate * f64::from(u32::MAX)
}

impl Reporter {
    /// A reporter sending to the first of `urls` that takes a batch (the service's addresses,
    /// or [`EventOptions::url`]). Reads the queue file if any. Sample rates are clamped to 0..=1.
    pub fn new(opts: EventOptions, urls: Vec<Url>) -> Self {
        Self::with_list(opts, urls, "events")
    }

    /// A reporter of connection outcomes to `/feedback` (`urls`: `/feedback` on the service's
    /// addresses), with [`EventOptions::feedback`]-like settings: `{"reports": [...]}`
    /// batches, signed like events, never woken early by a full batch.
    pub fn feedback(opts: EventOptions, urls: Vec<Url>) -> Self {
        Self::with_list(opts, urls, "reports")
    }

    fn with_list(mut opts: EventOptions, urls: Vec<Url>, list_key: &'static str) -> Self {
        let clamp = |r: f64| if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) };
        opts.request_sample_rate = clamp(opts.request_sample_rate);
        opts.localdns_sample_rate = clamp(opts.localdns_sample_rate);
        opts.batch_size = opts.batch_size.max(1);
        let http = crate::http::client_builder()
            .no_proxy()
            .timeout(opts.timeout)
            .connect_timeout(opts.timeout)
            .build()
            .expect("a reqwest client with static settings");
        let mut state = State::default();
        if let Some(path) = &opts.file {
            if let Ok(bytes) = std::fs::read(path) {
                // A torn or foreign file is ignored: the writes are atomic, so it is not ours.
                if let Ok(Value::Array(list)) = serde_json::from_slice::<Value>(&bytes) {
                    for v in list.into_iter().rev().take(opts.max_queue).rev() {
                        state.queue.push_back((state.next_seq, v));
                        state.next_seq += 1;
                    }
                }
            }
        }
        Self {
            inner: Arc::new(Inner {
                urls,
                preferred: std::sync::atomic::AtomicUsize::new(0),
                http,
                state: Mutex::new(state),
                notify: Notify::new(),
                side: AtomicU8::new(0),
                policy_side: AtomicU8::new(0),
                config_version: AtomicU64::new(0),
                sending: tokio::sync::Mutex::new(()),
                list_key,
                opts,
            }),
        }
    }

    pub fn options(&self) -> &EventOptions {
        &self.inner.opts
    }

    /// The device's side of the convergence switch, attached to every event from now on.
    pub fn set_side(&self, convergence: Option<bool>) {
        self.inner.side.store(
            match convergence {
                None => 0,
                Some(false) => 1,
                Some(true) => 2,
            },
            Ordering::Relaxed,
        );
    }

    /// The device's side of its place's `httpdnsRate` (`httpdns_enabled`, which the policy
    /// controller compares the cohorts by) and the config version it runs (`config_version`),
    /// attached to every event from now on.
    pub fn set_policy(&self, httpdns_enabled: Option<bool>, config_version: u64) {
        self.inner.policy_side.store(
            match httpdns_enabled {
                None => 0,
                Some(false) => 1,
                Some(true) => 2,
            },
            Ordering::Relaxed,
        );
        self.inner.config_version.store(config_version, Ordering::Relaxed);
    }

    fn side(&self) -> Option<bool> {
        match self.inner.side.load(Ordering::Relaxed) {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        }
    }

    /// Queues an event; never waits.
    #[allow(clippy::needless_pass_by_value, reason = "a queue's `send`: callers hand the event over")]
    pub fn record(&self, event: ClientEvent) {
        let mut v = event.to_json(httpdns_core::clock::unix_s(), self.side());
        match self.inner.policy_side.load(Ordering::Relaxed) {
            1 => v["httpdns_enabled"] = Value::Bool(false),
            2 => v["httpdns_enabled"] = Value::Bool(true),
            _ => {}
        }
        match self.inner.config_version.load(Ordering::Relaxed) {
            0 => {}
            n => v["config_version"] = Value::from(n),
        }
        let kind = v["event"].as_str().unwrap_or("?").to_owned();
        self.push(v, kind);
    }

    /// Queues a connection report (a [`Reporter::feedback`] reporter); never waits.
    pub fn record_feedback(&self, report: &FeedbackReport) {
        self.push(report.to_json(), "feedback".to_owned());
    }

    fn push(&self, v: Value, kind: String) {
        let full = {
            let mut s = self.inner.state.lock();
            let seq = s.next_seq;
            s.next_seq += 1;
            s.queue.push_back((seq, v));
            while s.queue.len() > self.inner.opts.max_queue {
                s.queue.pop_front();
                s.stats.dropped += 1;
            }
            s.stats.recorded += 1;
            match s.stats.by_type.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => s.stats.by_type.push((kind, 1)),
            }
            s.queue.len() >= self.inner.opts.batch_size
        };
        // Feedback waits for its interval: the server's per-client rate limit is low.
        if full && self.inner.list_key == "events" {
            self.inner.notify.notify_one();
        }
    }

    pub fn stats(&self) -> ReporterStats {
        let s = self.inner.state.lock();
        ReporterStats { queued: s.queue.len(), ..s.stats.clone() }
    }

    /// Sends one batch. `Ok(0)`: nothing was waiting.
    async fn send_batch(&self) -> Result<usize, String> {
        let _one = self.inner.sending.lock().await;
        let (last_seq, events): (u64, Vec<Value>) = {
            let s = self.inner.state.lock();
            let batch: Vec<&(u64, Value)> = s.queue.iter().take(self.inner.opts.batch_size).collect();
            match batch.last() {
                None => return Ok(0),
                Some((seq, _)) => (*seq, batch.iter().map(|(_, v)| v.clone()).collect()),
            }
        };
        let n = events.len();
        let body = serde_json::to_vec(&json!({ (self.inner.list_key): events })).expect("JSON");
        let drop_sent = |refused: bool| {
            let mut s = self.inner.state.lock();
            // By sequence number: events dropped for room meanwhile are not counted twice.
            let before = s.queue.len();
            s.queue.retain(|(seq, _)| *seq > last_seq);
            let gone = (before - s.queue.len()) as u64;
            if refused {
                s.stats.refused += gone;
            } else {
                s.stats.sent += gone;
            }
        };
        let urls = &self.inner.urls;
        if urls.is_empty() {
            return Err("no events URL".into());
        }
        let first = self.inner.preferred.load(Ordering::Relaxed) % urls.len();
        let mut last = String::new();
        for i in 0..urls.len() {
            let idx = (first + i) % urls.len();
            match self.post(&urls[idx], &body).await {
                Sent::Taken => {
                    self.inner.preferred.store(idx, Ordering::Relaxed);
                    drop_sent(false);
                    return Ok(n);
                }
                Sent::Refused(e) => {
                    tracing::warn!(error = %e, "The service refused an event batch; dropped.");
                    drop_sent(true);
                    return Err(format!("refused: {e}"));
                }
                Sent::Retry(e) => last = format!("{}: {e}", urls[idx]),
            }
        }
        Err(last)
    }

    /// One POST of a batch to one address.
    async fn post(&self, url: &Url, body: &[u8]) -> Sent {
        let mut url = url.clone();
        if let Some(acc) = &self.inner.opts.account {
            // Valid for ten minutes, as the service's signed lookups are.
            let t = httpdns_core::clock::unix_s() + 600;
            let digest: String = sha2::Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect();
            let s = crate::service::sign(&digest, &acc.secret, t);
            url.query_pairs_mut()
                .append_pair("account", &acc.id.to_string())
                .append_pair("t", &t.to_string())
                .append_pair("s", &s);
        }
        let resp = self
            .inner
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec())
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => Sent::Taken,
            // 400 and 413: this batch will never be taken anywhere; retrying it would block
            // the rest behind it.
            Ok(r) if r.status().as_u16() == 400 || r.status().as_u16() == 413 => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                Sent::Refused(format!("{status}: {}", body.trim()))
            }
            Ok(r) => Sent::Retry(format!("status {}", r.status())),
            Err(e) => Sent::Retry(crate::service::error_chain(&e)),
        }
    }

    /// Sends everything waiting now (for a command line about to exit, or a test). Stops at the
    /// first failure; returns the events sent.
    pub async fn flush(&self) -> Result<usize, String> {
        let mut total = 0;
        loop {
            match self.send_batch().await {
                Ok(0) => break,
                Ok(n) => total += n,
                Err(e) => {
                    self.failed(&e);
                    self.persist().await;
                    return Err(e);
                }
            }
        }
        self.persist().await;
        Ok(total)
    }

    fn failed(&self, e: &str) {
        let mut s = self.inner.state.lock();
        s.stats.failed_sends += 1;
        s.stats.last_error = Some(e.to_owned());
    }

    /// Writes the queue to its file, off the async workers.
    async fn persist(&self) {
        let Some(path) = self.inner.opts.file.clone() else { return };
        let bytes = {
            let s = self.inner.state.lock();
            serde_json::to_vec(&s.queue.iter().map(|(_, v)| v).collect::<Vec<_>>()).expect("JSON")
        };
        let _ = tokio::task::spawn_blocking(move || {
            if let Err(e) = crate::fsutil::write_atomic(&path, &bytes) {
                tracing::warn!(path = %path.display(), error = %e, "Could not write the event queue file.");
            }
        })
        .await;
    }

    /// The sending loop: a batch every interval or when one is full; after a failure, waits
    /// doubling from one second up to [`EventOptions::max_backoff`].
    pub fn start(&self) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let opts = &this.inner.opts;
            let mut backoff: Option<Duration> = None;
            loop {
                let wait = backoff.unwrap_or(opts.interval);
                if backoff.is_some() {
                    tokio::time::sleep(wait).await;
                } else {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = this.inner.notify.notified() => {}
                    }
                }
                let mut result = Ok(());
                loop {
                    match this.send_batch().await {
                        Ok(n) if n < opts.batch_size => break,
                        Ok(_) => continue,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                match result {
                    Ok(()) => backoff = None,
                    Err(e) => {
                        tracing::debug!(error = %e, "Event batch not sent; retrying later.");
                        this.failed(&e);
                        let next = backoff.map_or(Duration::from_secs(1), |b| b * 2);
                        backoff = Some(next.min(opts.max_backoff));
                    }
                }
                this.persist().await;
            }
        })
    }
}

#[cfg(test)]
mod tests;
