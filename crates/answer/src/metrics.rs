//! The engine's Prometheus series: names answered by front-end and outcome, the time to
//! answer, and answers by the client's carrier and region. Every label is bounded.

use std::time::Duration;

use httpdns_core::ClientView;
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};

use crate::outcome::{Endpoint, Outcome};

/// At most this many (ISP, region) label pairs; later ones count as `other`. Networks and
/// GeoIP regions are operator data, but a bound keeps a bad import from exploding the series.
pub const MAX_CLIENT_LABELS: usize = 512;

/// `answers_total`, `answer_duration_seconds` and `answers_by_client_total`.
#[derive(Debug)]
pub struct AnswerMetrics {
    /// Pre-resolved children of `answers_total`, so the hot path does no label hashing.
    answers: [[IntCounter; Outcome::ALL.len()]; Endpoint::ALL.len()],
    duration: [Histogram; Endpoint::ALL.len()],
    /// `/d` and `/resolve` answers by the client's carrier and region.
    by_client: ByClient,
}

#[derive(Debug)]
struct ByClient {
    vec: IntCounterVec,
    // Hashed on every answer: foldhash, not std's SipHash.
    children: parking_lot::RwLock<foldhash::HashMap<ClientView, IntCounter>>,
    other: IntCounter,
}

impl AnswerMetrics {
    /// Registers the series into `registry`.
    pub fn new(registry: &Registry) -> Self {
        let answers = IntCounterVec::new(
            Opts::new("answers_total", "Names answered, by front-end and outcome."),
            &["endpoint", "outcome"],
        )
        .expect("valid metric");
        let hist = HistogramVec::new(
            HistogramOpts::new(
                "answer_duration_seconds",
                "Time to compute an answer (parse, classify, choose, format), by front-end.",
            )
            .buckets(vec![0.000_002, 0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.0001, 0.00025, 0.001, 0.01]),
            &["endpoint"],
        )
        .expect("valid metric");
        let by_client_vec = IntCounterVec::new(
            Opts::new("answers_by_client_total", "/d and /resolve answers by the client's ISP and region."),
            &["isp", "region"],
        )
        .expect("valid metric");
        let fast =
            Endpoint::ALL.map(|e| Outcome::ALL.map(|o| answers.with_label_values(&[e.label(), o.as_str()])));
        let duration = Endpoint::ALL.map(|e| hist.with_label_values(&[e.label()]));
        let by_client = ByClient {
            other: by_client_vec.with_label_values(&["other", "other"]),
            vec: by_client_vec.clone(),
            children: Default::default(),
        };
        let collectors: Vec<Box<dyn prometheus::core::Collector>> =
            vec![Box::new(by_client_vec), Box::new(answers), Box::new(hist)];
        for c in collectors {
            registry.register(c).expect("unique metric");
        }
        Self { answers: fast, duration, by_client }
    }

    /// Counts one name answered by `endpoint` with `outcome`.
    pub fn answer(&self, endpoint: Endpoint, outcome: Outcome) {
        let o = Outcome::ALL.iter().position(|x| *x == outcome).unwrap_or(0);
        self.answers[endpoint as usize][o].inc();
    }

    pub fn answer_time(&self, endpoint: Endpoint, took: Duration) {
        self.duration[endpoint as usize].observe(took.as_secs_f64());
    }

    /// Counts an answer for a client of this carrier and region (`unknown` when unclassified).
    pub fn client_answer(&self, view: &ClientView) {
        if let Some(c) = self.by_client.children.read().get(view) {
            c.inc();
            return;
        }
        let mut children = self.by_client.children.write();
        if children.len() >= MAX_CLIENT_LABELS && !children.contains_key(view) {
            self.by_client.other.inc();
            return;
        }
        let label = |t: &Option<httpdns_core::Token>| {
            t.as_ref().map_or_else(|| "unknown".to_owned(), ToString::to_string)
        };
        children
            .entry(view.clone())
            .or_insert_with(|| {
                self.by_client.vec.with_label_values(&[&label(&view.isp), &label(&view.region)])
            })
            .inc();
    }
}
