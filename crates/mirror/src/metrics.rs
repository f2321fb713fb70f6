//! Path-dimension monitoring (seed §4.2): every figure per rule, never per raw path, so the
//! label set is as small as the rule table. The same counters feed the JSON report.

use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};
use serde::Serialize;

use crate::error::Side;
use crate::rule::Rule;

/// A rule's request and served-bytes series ([`MirrorMetrics::series`]).
#[derive(Debug, Clone)]
pub struct RuleSeries {
    /// By [`Outcome::ALL`] order.
    requests: [IntCounter; Outcome::ALL.len()],
    served: IntCounter,
}

impl RuleSeries {
    pub fn request(&self, outcome: Outcome) {
        let i = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.requests[i].inc();
    }

    pub fn served(&self, bytes: u64) {
        self.served.inc_by(bytes);
    }
}

/// How a request was answered: the `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    Miss,
    Coalesced,
    Stale,
    Variant,
    NotFound,
    Error,
}

impl Outcome {
    pub const ALL: [Outcome; 7] = [
        Outcome::Hit,
        Outcome::Miss,
        Outcome::Coalesced,
        Outcome::Stale,
        Outcome::Variant,
        Outcome::NotFound,
        Outcome::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Coalesced => "coalesced",
            Outcome::Stale => "stale",
            Outcome::Variant => "variant",
            Outcome::NotFound => "not_found",
            Outcome::Error => "error",
        }
    }
}

const STATUS_CLASSES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "timeout"];

/// The mirror's Prometheus metrics.
#[derive(Debug, Clone)]
pub struct MirrorMetrics {
    requests: IntCounterVec,
    origin_fetches: IntCounterVec,
    origin_status: IntCounterVec,
    bytes_served: IntCounterVec,
    bytes_from_origin: IntCounterVec,
    fill_seconds: HistogramVec,
    fills_failed: IntCounterVec,
    renders: IntCounterVec,
    variants_not_stored: IntCounterVec,
    /// Failed requests by the side that failed, pre-resolved in `Side::ALL` order.
    errors: [IntCounter; 4],
}

impl MirrorMetrics {
    pub fn new(registry: &Registry) -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry.register(Box::new(c.clone())).expect("unique metric");
            c
        };
        let requests = counter(
            "mirror_requests_total",
            "Mirror requests by rule and result (hit, miss, coalesced, stale, variant, not_found, error).",
            &["rule", "result"],
        );
        let origin_fetches =
            counter("mirror_origin_fetches_total", "Back-to-source fetches started, by rule.", &["rule"]);
        let origin_status = counter(
            "mirror_origin_responses_total",
            "Origin answers by rule and status class (2xx, 3xx, 4xx, 5xx, timeout, error).",
            &["rule", "class"],
        );
        let bytes_served =
            counter("mirror_bytes_served_total", "Body bytes sent to clients, by rule.", &["rule"]);
        let bytes_from_origin =
            counter("mirror_bytes_from_origin_total", "Body bytes read from origins, by rule.", &["rule"]);
        let fills_failed =
            counter("mirror_fills_failed_total", "Fills thrown away (nothing stored), by rule.", &["rule"]);
        let renders = counter(
            "mirror_renders_total",
            "Image variants rendered (one per shared render), by rule.",
            &["rule"],
        );
        let variants_not_stored = counter(
            "mirror_variants_not_stored_total",
            "Image variants served but not stored (larger than the store limit), by rule.",
            &["rule"],
        );
        let errors = counter(
            "mirror_errors_total",
            "Failed mirror requests by the side that failed (client, origin, store, internal).",
            &["side"],
        );
        let errors = Side::ALL.map(|side| errors.with_label_values(&[side.label()]));
        let fill_seconds = HistogramVec::new(
            HistogramOpts::new("mirror_fill_seconds", "Time from fill start to committed copy, by rule.")
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]),
            &["rule"],
        )
        .expect("valid metric");
        registry.register(Box::new(fill_seconds.clone())).expect("unique metric");
        Self {
            requests,
            origin_fetches,
            origin_status,
            bytes_served,
            bytes_from_origin,
            fill_seconds,
            fills_failed,
            renders,
            variants_not_stored,
            errors,
        }
    }

    /// Counts a failed request by its side.
    pub fn error(&self, side: Side) {
        self.errors[side as usize].inc();
    }

    /// The per-request series of `rule`, looked up once: counting a hit through them hashes
    /// no labels and takes no lock.
    pub fn series(&self, rule: &str) -> RuleSeries {
        RuleSeries {
            requests: Outcome::ALL.map(|o| self.requests.with_label_values(&[rule, o.label()])),
            served: self.bytes_served.with_label_values(&[rule]),
        }
    }

    /// Creates every series of a rule at zero, so dashboards show it before traffic does.
    pub fn touch(&self, rule: &str) {
        for o in Outcome::ALL {
            self.requests.with_label_values(&[rule, o.label()]);
        }
        for c in STATUS_CLASSES {
            self.origin_status.with_label_values(&[rule, c]);
        }
        self.origin_fetches.with_label_values(&[rule]);
        self.bytes_served.with_label_values(&[rule]);
        self.bytes_from_origin.with_label_values(&[rule]);
        self.fills_failed.with_label_values(&[rule]);
        self.fill_seconds.with_label_values(&[rule]);
        self.renders.with_label_values(&[rule]);
        self.variants_not_stored.with_label_values(&[rule]);
    }

    pub(crate) fn origin_fetch(&self, rule: &Rule) {
        self.origin_fetches.with_label_values(&[&rule.name]).inc();
    }
    pub(crate) fn origin_status(&self, rule: &Rule, class: &str) {
        self.origin_status.with_label_values(&[&rule.name, class]).inc();
    }
    pub(crate) fn origin_bytes(&self, rule: &Rule, n: u64) {
        self.bytes_from_origin.with_label_values(&[&rule.name]).inc_by(n);
    }
    pub(crate) fn fill_done(&self, rule: &Rule, took: Duration) {
        self.fill_seconds.with_label_values(&[&rule.name]).observe(took.as_secs_f64());
    }
    pub(crate) fn render(&self, rule: &str) {
        self.renders.with_label_values(&[rule]).inc();
    }
    pub(crate) fn variant_not_stored(&self, rule: &str) {
        self.variants_not_stored.with_label_values(&[rule]).inc();
    }
    pub(crate) fn fill_failed(&self, rule: &Rule) {
        self.fills_failed.with_label_values(&[&rule.name]).inc();
    }

    /// The per-rule figures since start, for `/admin/v1/mirror/report`.
    pub fn report(&self, rule: &Rule) -> RuleReport {
        let name = rule.name.as_str();
        let req = |o: Outcome| self.requests.with_label_values(&[name, o.label()]).get();
        let requests: u64 = Outcome::ALL.iter().map(|o| req(*o)).sum();
        let hits = req(Outcome::Hit) + req(Outcome::Stale) + req(Outcome::Variant);
        let fill = self.fill_seconds.with_label_values(&[name]);
        RuleReport {
            rule: rule.name.clone(),
            path_prefix: rule.spec.path_prefix.clone(),
            requests,
            hits,
            misses: req(Outcome::Miss),
            coalesced: req(Outcome::Coalesced),
            stale: req(Outcome::Stale),
            variants: req(Outcome::Variant),
            not_found: req(Outcome::NotFound),
            errors: req(Outcome::Error),
            hit_ratio: if requests == 0 { 0.0 } else { hits as f64 / requests as f64 },
            back_to_source: self.origin_fetches.with_label_values(&[name]).get(),
            origin_status: STATUS_CLASSES
                .iter()
                .chain(["error"].iter())
                .map(|c| ((*c).to_owned(), self.origin_status.with_label_values(&[name, c]).get()))
                .filter(|(_, n)| *n > 0)
                .collect(),
            bytes_served: self.bytes_served.with_label_values(&[name]).get(),
            bytes_from_origin: self.bytes_from_origin.with_label_values(&[name]).get(),
            fills_failed: self.fills_failed.with_label_values(&[name]).get(),
            fills_completed: fill.get_sample_count(),
            fill_seconds_total: fill.get_sample_sum(),
        }
    }
}

/// One rule's line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct RuleReport {
    pub rule: String,
    pub path_prefix: String,
    pub requests: u64,
    pub hits: u64,
    pub misses: u64,
    pub coalesced: u64,
    pub stale: u64,
    pub variants: u64,
    pub not_found: u64,
    pub errors: u64,
    pub hit_ratio: f64,
    pub back_to_source: u64,
    pub origin_status: std::collections::BTreeMap<String, u64>,
    pub bytes_served: u64,
    pub bytes_from_origin: u64,
    pub fills_failed: u64,
    pub fills_completed: u64,
    pub fill_seconds_total: f64,
}
