//! [`EventHub`]: the aggregator of client events, their Prometheus series and the flush of
//! recent minutes to the store.
//!
//! No write per event: an event is a map update under a lock taken once per batch; each
//! replica rewrites its recent minutes' rows every [`EventSettings::flush_interval`].

use parking_lot::Mutex;
use std::time::Duration;

use httpdns_store::events::{EventCounts, EventKey};
use httpdns_store::{Store, StoreError};
use prometheus::{CounterVec, IntCounter, IntCounterVec, Opts, Registry};
use tokio_util::sync::CancellationToken;

use crate::aggregate::Aggregator;

/// Settings of the event intake (the `[events]` section of the config file).
#[derive(Debug, Clone)]
pub struct EventSettings {
    /// How often this replica writes its recent minutes to the store.
    pub flush_interval: Duration,
    /// Minutes older than this are deleted from the store.
    pub retention: Duration,
    /// Events in one batch.
    pub max_batch: usize,
    /// Bytes of one batch as sent (compressed or not) and after decompression.
    pub max_body_bytes: usize,
    /// Events older than this (by their timestamp) are counted as stale, not aggregated: a
    /// device back after days offline must not move today's rates.
    pub max_age: Duration,
    /// Batches per second per client address (unsigned batches), and the burst.
    pub rate_per_client: f64,
    pub burst: f64,
    /// (carrier, region) pairs that become labels; more count as `other`.
    pub max_label_pairs: usize,
    /// The error or fallback rate over which the summary flags a carrier and region (the
    /// shipped alert rules use the same 1%).
    pub alert_rate: f64,
    /// Requests a carrier and region needs in the window before its rate is judged.
    pub alert_min_requests: f64,
    /// Events as received (unweighted) a carrier and region needs in the window before its
    /// rate is judged: a few sampled events that each stand for many must not make an alert.
    pub alert_min_reports: f64,
}

/// The most one event of an unsigned batch stands for (`1 / sample_rate` is believed down to a
/// rate of 1%): anyone can send one, and its weight must not make a place's figures.
pub const MAX_UNSIGNED_WEIGHT: f64 = 100.0;

impl Default for EventSettings {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_secs(10),
            retention: Duration::from_secs(7 * 24 * 3600),
            max_batch: 500,
            max_body_bytes: 1 << 20,
            max_age: Duration::from_secs(24 * 3600),
            // Generous: carrier-grade NAT puts thousands of devices behind one address, each
            // sending a batch every 30 s; the limit is against one client flooding.
            rate_per_client: 200.0,
            burst: 2000.0,
            max_label_pairs: 512,
            alert_rate: 0.01,
            alert_min_requests: 100.0,
            alert_min_reports: 20.0,
        }
    }
}

/// Minutes since the Unix epoch, now.
pub fn now_minute() -> i64 {
    (httpdns_core::clock::unix_s() as i64) / 60
}

/// The Prometheus series of the events.
#[derive(Debug)]
pub struct EventMetrics {
    /// Events by type, carrier, region, reason and convergence side (sampled ones weighted).
    pub events: CounterVec,
    /// Events as received (unweighted) by type, carrier and region: what the weighted counts
    /// rest on, so alerts can ask for enough real reports (one event sampled at `1e-6` weighs a
    /// million and is one report).
    pub reports: IntCounterVec,
    /// Sampled requests by unified host and outcome (weighted).
    pub requests_by_host: CounterVec,
    /// Duration sums and counts by type, carrier and region (mean latencies per region).
    pub duration_sum: CounterVec,
    pub duration_count: CounterVec,
    /// Batches or events refused, by why.
    pub rejected: IntCounterVec,
    pub flush_errors: IntCounter,
    /// Minutes dropped unflushed (a store outage longer than the minutes kept in memory).
    pub minutes_dropped: IntCounter,
    /// Values of enumerated fields this server does not know, by field (counted as `other`).
    pub unknown_values: IntCounterVec,
    /// Events of unsigned batches whose `sample_rate` claimed more than
    /// [`MAX_UNSIGNED_WEIGHT`]: counted with that weight.
    pub weight_capped: IntCounter,
}

impl EventMetrics {
    pub fn new(registry: &Registry) -> Self {
        let events = CounterVec::new(
            Opts::new(
                "app_events_total",
                "Client events received, by event, carrier, region, reason and convergence side (sampled events weighted by 1/sample_rate).",
            ),
            &["event", "isp", "region", "reason", "convergence"],
        )
        .unwrap();
        let reports = IntCounterVec::new(
            Opts::new(
                "app_event_reports_total",
                "Client events as received (unweighted), by event, carrier and region: the reports the weighted app_events_total rests on.",
            ),
            &["event", "isp", "region"],
        )
        .unwrap();
        registry.register(Box::new(reports.clone())).expect("event metric registered once");
        let requests_by_host = CounterVec::new(
            Opts::new(
                "app_requests_by_host_total",
                "Sampled app requests by unified CDN host and outcome (weighted).",
            ),
            &["host", "outcome"],
        )
        .unwrap();
        let duration_sum = CounterVec::new(
            Opts::new(
                "app_event_duration_seconds_total",
                "Sum of the durations client events carried (fallback time, request latency), by event, carrier and region.",
            ),
            &["event", "isp", "region"],
        )
        .unwrap();
        let duration_count = CounterVec::new(
            Opts::new("app_event_durations_total", "Client events that carried a duration, by event, carrier and region (the divisor of app_event_duration_seconds_total)."),
            &["event", "isp", "region"],
        )
        .unwrap();
        let rejected = IntCounterVec::new(
            Opts::new(
                "app_events_rejected_total",
                "Event batches (or events, for stale) refused, by reason.",
            ),
            &["reason"],
        )
        .unwrap();
        let flush_errors = IntCounter::new(
            "app_event_flush_errors_total",
            "Flushes (or retention prunes) of event minutes in the store that failed.",
        )
        .unwrap();
        let minutes_dropped = IntCounter::new(
            "app_event_minutes_dropped_total",
            "Minutes of events dropped unflushed: the store was unreachable longer than the minutes kept in memory.",
        )
        .unwrap();
        for c in [&events, &requests_by_host, &duration_sum, &duration_count] {
            registry.register(Box::new(c.clone())).expect("event metric registered once");
        }
        registry.register(Box::new(rejected.clone())).expect("event metric registered once");
        registry.register(Box::new(flush_errors.clone())).expect("event metric registered once");
        registry.register(Box::new(minutes_dropped.clone())).expect("event metric registered once");
        let unknown_values = IntCounterVec::new(
            Opts::new(
                "app_event_unknown_values_total",
                "Event field values this server does not know (a newer app's), counted under reason \"other\", by field.",
            ),
            &["field"],
        )
        .unwrap();
        registry.register(Box::new(unknown_values.clone())).expect("event metric registered once");
        let weight_capped = IntCounter::new(
            "app_events_weight_capped_total",
            "Events of unsigned batches whose sample_rate was below 1/100, counted as standing for 100 events.",
        )
        .unwrap();
        registry.register(Box::new(weight_capped.clone())).expect("event metric registered once");
        for f in ["fallback_reason", "reason", "outcome", "network"] {
            unknown_values.with_label_values(&[f]);
        }
        for r in ["invalid", "rate_limited", "too_large", "unauthenticated", "stale"] {
            rejected.with_label_values(&[r]);
        }
        // One zero series of each family, so a replica that has received no event yet still
        // exports them (dashboards and rules find the names; a zero never fires a rule).
        events.with_label_values(&["request", "unknown", "unknown", "ok", "unknown"]);
        reports.with_label_values(&["request", "unknown", "unknown"]);
        requests_by_host.with_label_values(&["other", "ok"]);
        duration_sum.with_label_values(&["request", "unknown", "unknown"]);
        duration_count.with_label_values(&["request", "unknown", "unknown"]);
        Self {
            events,
            reports,
            requests_by_host,
            duration_sum,
            duration_count,
            rejected,
            flush_errors,
            minutes_dropped,
            unknown_values,
            weight_capped,
        }
    }
}

/// The unknown values seen most recently, for operators: at most [`UNKNOWN_SAMPLE`] distinct
/// (field, value) pairs with their counts; a new pair past that replaces the least counted.
#[derive(Debug, Default)]
struct UnknownSample {
    seen: Vec<(&'static str, String, u64)>,
}

/// Distinct unknown values kept.
pub const UNKNOWN_SAMPLE: usize = 32;

impl UnknownSample {
    fn note(&mut self, field: &'static str, value: &str) {
        if let Some(e) = self.seen.iter_mut().find(|(f, v, _)| *f == field && v == value) {
            e.2 += 1;
            return;
        }
        if self.seen.len() >= UNKNOWN_SAMPLE {
            let least = (0..self.seen.len()).min_by_key(|&i| self.seen[i].2).expect("full");
            self.seen.swap_remove(least);
        }
        self.seen.push((field, value.to_owned(), 1));
    }

    fn json(&self) -> serde_json::Value {
        let mut list: Vec<_> = self.seen.iter().collect();
        list.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (a.0, &a.1).cmp(&(b.0, &b.1))));
        serde_json::Value::Array(
            list.into_iter()
                .map(|(f, v, n)| serde_json::json!({"field": f, "value": v, "count": n}))
                .collect(),
        )
    }
}

/// One event ready to count: its key (labels already bounded) and what it adds.
#[derive(Debug, Clone)]
pub struct Counted {
    pub key: EventKey,
    pub counts: EventCounts,
}

/// The event intake's shared state.
#[derive(Debug)]
pub struct EventHub {
    settings: EventSettings,
    /// This process's name in the store's rows (random per start: a restarted replica's rows
    /// are new rows, never a rewrite of the old process's minutes).
    replica: String,
    // A blocking mutex: one short update per batch, never held across an await.
    aggregator: Mutex<Aggregator>,
    pub metrics: EventMetrics,
    // Serialises flushes (the loop, and the admin API's flush before it reads).
    flushing: tokio::sync::Mutex<i64>,
    /// Unknown values seen by this replica (a blocking mutex: one short update per batch).
    unknown: Mutex<UnknownSample>,
}

/// Minutes kept unflushed at most (an hour of store outage).
const MAX_MINUTES: usize = 60;

impl EventHub {
    pub fn new(settings: EventSettings, registry: &Registry) -> Self {
        Self {
            replica: httpdns_auth::instance_id(),
            aggregator: Mutex::new(Aggregator::new(settings.max_label_pairs, MAX_MINUTES)),
            metrics: EventMetrics::new(registry),
            flushing: tokio::sync::Mutex::new(0),
            unknown: Mutex::default(),
            settings,
        }
    }

    pub fn settings(&self) -> &EventSettings {
        &self.settings
    }

    /// The unknown values this replica saw most recently, most counted first, as JSON
    /// (`[{"field", "value", "count"}]`) for operators.
    pub fn unknown_values(&self) -> serde_json::Value {
        self.unknown.lock().json()
    }

    /// Counts values of enumerated fields this server does not know, and keeps a sample.
    pub fn note_unknown<'a>(&self, values: impl IntoIterator<Item = &'a (&'static str, String)>) {
        let mut sample = None;
        for (field, value) in values {
            self.metrics.unknown_values.with_label_values(&[field]).inc();
            sample.get_or_insert_with(|| self.unknown.lock()).note(field, value);
        }
    }

    /// Counts a batch in the current minute and in the Prometheus series, under one lock. The
    /// carrier and region of each key are bounded here (past the cap: `other`).
    pub fn record(&self, mut batch: Vec<Counted>) {
        let minute = now_minute();
        {
            let mut agg = self.aggregator.lock();
            for c in &mut batch {
                (c.key.isp, c.key.region) = agg.labels(&c.key.isp, &c.key.region);
                agg.add(minute, c.key.clone(), &c.counts);
            }
        }
        for c in &batch {
            let k = &c.key;
            self.metrics
                .events
                .with_label_values(&[&k.event, &k.isp, &k.region, &k.reason, &k.group])
                .inc_by(c.counts.count);
            self.metrics.reports.with_label_values(&[&k.event, &k.isp, &k.region]).inc();
            if k.event == "request" {
                self.metrics.requests_by_host.with_label_values(&[&k.host, &k.reason]).inc_by(c.counts.count);
            }
            if c.counts.duration_count > 0.0 {
                let labels = [k.event.as_str(), &k.isp, &k.region];
                self.metrics
                    .duration_sum
                    .with_label_values(&labels)
                    .inc_by(c.counts.duration_ms_sum / 1000.0);
                self.metrics.duration_count.with_label_values(&labels).inc_by(c.counts.duration_count);
            }
        }
    }

    /// Writes the minutes changed since the last flush; returns the rows written. Also prunes
    /// the store past the retention, at most once an hour.
    pub async fn flush(&self, store: &Store) -> Result<usize, StoreError> {
        let mut last_prune = self.flushing.lock().await;
        let (rows, reports) = self.aggregator.lock().take_dirty_reported();
        if !rows.is_empty() {
            if let Err(e) = store.save_reported_event_minutes(&self.replica, &rows, &reports).await {
                self.aggregator.lock().failed(&rows);
                self.metrics.flush_errors.inc();
                return Err(e);
            }
        }
        let now = now_minute();
        {
            let mut agg = self.aggregator.lock();
            agg.forget_before(now - 1);
            let dropped = agg.dropped_minutes;
            self.metrics.minutes_dropped.inc_by(dropped.saturating_sub(self.metrics.minutes_dropped.get()));
        }
        if now - *last_prune >= 60 {
            // A failed prune is retried next time; it never fails the flush that saved rows.
            let keep = (self.settings.retention.as_secs() / 60) as i64;
            match store.prune_event_minutes(now - keep).await {
                Ok(pruned) => {
                    if pruned > 0 {
                        tracing::info!(rows = pruned, "Pruned event minutes past the retention.");
                    }
                    *last_prune = now;
                }
                Err(e) => {
                    self.metrics.flush_errors.inc();
                    tracing::warn!(error = %e, "Could not prune event minutes past the retention.");
                }
            }
        }
        Ok(rows.len())
    }

    /// Flushes every [`EventSettings::flush_interval`] until `shutdown`, then once more (a
    /// clean stop loses nothing).
    pub async fn run(self: std::sync::Arc<Self>, store: Store, shutdown: CancellationToken) {
        let every = self.settings.flush_interval;
        httpdns_store::behind::flush_every(every, shutdown, "event minutes", || self.flush(&store)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unknown_sample_keeps_the_most_counted_and_is_bounded() {
        let hub = EventHub::new(EventSettings::default(), &Registry::new());
        // A value seen often, then more distinct ones than the sample holds.
        let often = [("fallback_reason", "HTTPDNS_5XX".to_owned())];
        for _ in 0..5 {
            hub.note_unknown(&often);
        }
        let many: Vec<(&'static str, String)> =
            (0..UNKNOWN_SAMPLE + 8).map(|i| ("reason", format!("NEW_{i}"))).collect();
        hub.note_unknown(&many);
        let sample = hub.unknown_values();
        let list = sample.as_array().unwrap();
        assert_eq!(list.len(), UNKNOWN_SAMPLE, "bounded");
        assert_eq!(
            list[0],
            serde_json::json!({"field": "fallback_reason", "value": "HTTPDNS_5XX", "count": 5})
        );
        // New values replace the least counted, never the value seen most: the newest is in.
        let last = format!("NEW_{}", UNKNOWN_SAMPLE + 7);
        assert!(list.iter().any(|e| e["value"] == last.as_str()), "{sample}");
        // Every value is counted in the series, sampled or not.
        let counted: u64 = ["fallback_reason", "reason"]
            .iter()
            .map(|f| hub.metrics.unknown_values.with_label_values(&[f]).get())
            .sum();
        assert_eq!(counted, 5 + UNKNOWN_SAMPLE as u64 + 8);
    }
}
