//! Prometheus metrics of the API listener. Every label is bounded: routes are the router's
//! matched paths, outcomes and endpoints are fixed enums.

use std::time::Duration;

use httpdns_core::snapshot::AnswerStatus;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Resolution front-ends, a label value each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    D,
    Resolve,
    V2,
}

impl Endpoint {
    pub const ALL: [Endpoint; 3] = [Endpoint::D, Endpoint::Resolve, Endpoint::V2];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Endpoint::D => "d",
            Endpoint::Resolve => "resolve",
            Endpoint::V2 => "v2",
        }
    }
}

/// The route label of `http_*` metrics: a fixed set, never the raw path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    D,
    Resolve,
    /// `/v2/d`.
    V2,
    /// `/ss` and `/{account}/ss`.
    ServiceIps,
    Healthz,
    Readyz,
    Metrics,
    Admin,
    Config,
    Feedback,
    /// `/app/events`.
    Events,
    Other,
}

impl Route {
    pub const ALL: [Route; 12] = [
        Route::D,
        Route::Resolve,
        Route::V2,
        Route::ServiceIps,
        Route::Healthz,
        Route::Readyz,
        Route::Metrics,
        Route::Admin,
        Route::Config,
        Route::Feedback,
        Route::Events,
        Route::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Route::D => "/d",
            Route::Resolve => "/resolve",
            Route::V2 => "/v2/d",
            Route::ServiceIps => "/ss",
            Route::Healthz => "/healthz",
            Route::Readyz => "/readyz",
            Route::Metrics => "/metrics",
            Route::Admin => "/admin",
            Route::Config => "/app/config-center",
            Route::Feedback => "/feedback",
            Route::Events => "/app/events",
            Route::Other => "other",
        }
    }

    /// The route of a request path.
    pub fn of_path(path: &str) -> Self {
        match path {
            "/d" => Route::D,
            "/resolve" => Route::Resolve,
            "/v2/d" => Route::V2,
            "/ss" => Route::ServiceIps,
            "/healthz" => Route::Healthz,
            "/readyz" => Route::Readyz,
            "/metrics" => Route::Metrics,
            "/feedback" => Route::Feedback,
            "/app/events" => Route::Events,
            p if p.starts_with("/admin/") => Route::Admin,
            p if p.starts_with("/app/config-center/") => Route::Config,
            _ => Route::Other,
        }
    }
}

const STATUS_CLASSES: [&str; 4] = ["2xx", "3xx", "4xx", "5xx"];
/// The results the upstream resolver counts (`httpdns_dns::upstream::Upstream::cache_counts`).
const UPSTREAM_RESULTS: [&str; 5] = ["hit", "miss", "coalesced", "stale", "error"];

/// The `status` label values of `config_requests_total`.
const CONFIG_STATUSES: [&str; 6] = ["200", "304", "400", "404", "5xx", "other"];

/// How an app asked the config center.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigMethod {
    Get,
    Post,
}

impl ConfigMethod {
    fn label(self) -> &'static str {
        match self {
            ConfigMethod::Get => "get",
            ConfigMethod::Post => "post",
        }
    }
}

/// Outcome of one name in one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    FailOpen,
    NoRecord,
    NoHealthyNode,
    NotManaged,
    /// Not managed here, answered through the upstream resolver.
    Upstream,
    /// Not managed here; upstreams failed and an expired cached answer was served.
    UpstreamStale,
    /// Not managed here and the upstream resolver failed.
    UpstreamError,
}

impl Outcome {
    /// In order of preference when one name has two families.
    pub const ALL: [Outcome; 8] = [
        Outcome::Ok,
        Outcome::Upstream,
        Outcome::FailOpen,
        Outcome::UpstreamStale,
        Outcome::NoRecord,
        Outcome::NoHealthyNode,
        Outcome::NotManaged,
        Outcome::UpstreamError,
    ];

    /// Position in [`Outcome::ALL`]: lower is better.
    pub fn rank(self) -> usize {
        Outcome::ALL.iter().position(|x| *x == self).unwrap_or(usize::MAX)
    }

    /// The label and the `X-Httpdns-Status` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::FailOpen => "fail-open",
            Outcome::NoRecord => "no-record",
            Outcome::NoHealthyNode => "no-healthy-node",
            Outcome::NotManaged => "not-managed",
            Outcome::Upstream => "upstream",
            Outcome::UpstreamStale => "upstream-stale",
            Outcome::UpstreamError => "upstream-error",
        }
    }

    pub fn from_status(s: AnswerStatus) -> Self {
        match s {
            AnswerStatus::Ok => Outcome::Ok,
            AnswerStatus::FailOpen => Outcome::FailOpen,
            AnswerStatus::NoRecord => Outcome::NoRecord,
            AnswerStatus::NoHealthyNode => Outcome::NoHealthyNode,
        }
    }
}

/// All metrics of the process's API side.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    /// Pre-resolved children by [`Route`] and status class: the hot path does no label hashing.
    http_requests: [[IntCounter; 4]; Route::ALL.len()],
    http_duration: [Histogram; Route::ALL.len()],
    /// Pre-resolved children of `answers`, so the hot path does no label hashing.
    answers_fast: [[IntCounter; 8]; Endpoint::ALL.len()],
    answer_duration: [Histogram; Endpoint::ALL.len()],
    pub geoip_loaded: IntGaugeVec,
    pub node_reports: IntCounter,
    pub feedback_reports: IntCounterVec,
    /// Requests answered 429, by who was over the limit (`account`, `client`).
    pub rate_limited: IntCounterVec,
    pub health_probes: IntCounterVec,
    pub health_transitions: IntCounterVec,
    pub nodes_by_health: IntGaugeVec,
    /// By [`ConfigMethod`] and status slot (see `config_request`), pre-resolved.
    config_requests: [[IntCounter; 6]; 2],
    /// Config GETs held by a long poll (`wait=`) right now.
    pub config_waiters: prometheus::IntGauge,
    /// Changes made whose audit entry could not be written.
    pub audit_write_errors: IntCounter,
    pub geoip_reload_errors: IntCounter,
    /// Upstream resolver cache results, copied from its counters at scrape time.
    upstream_cache: IntCounterVec,
    /// `/d` and `/resolve` answers by the client's carrier and region.
    by_client: ByClient,
    /// Every DNS front-end (UDP, TCP, DoT, DoH, the JSON API), shared with the listeners.
    pub dns: std::sync::Arc<httpdns_dns::DnsMetrics>,
}

/// At most this many (ISP, region) label pairs; later ones count as `other`. Networks and
/// GeoIP regions are operator data, but a bound keeps a bad import from exploding the series.
pub const MAX_CLIENT_LABELS: usize = 512;

#[derive(Debug)]
struct ByClient {
    vec: IntCounterVec,
    // Hashed on every answer: foldhash, not std's SipHash.
    children: std::sync::RwLock<foldhash::HashMap<httpdns_core::ClientView, IntCounter>>,
    other: IntCounter,
}

impl Metrics {
    /// Registers the API's series into the process's `registry` (kept to render it all at
    /// `/metrics`); `dns` is the front-ends' shared set, registered by the caller.
    pub fn new(registry: &Registry, dns: std::sync::Arc<httpdns_dns::DnsMetrics>) -> Self {
        let registry = registry.clone();
        let http_requests = IntCounterVec::new(
            Opts::new("http_requests_total", "HTTP requests on the API listener by route and status class."),
            &["route", "status"],
        )
        .unwrap();
        let http_duration = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "Time to produce an HTTP response, by route.",
            )
            .buckets(vec![0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0, 5.0]),
            &["route"],
        )
        .unwrap();
        let answers = IntCounterVec::new(
            Opts::new("answers_total", "Names answered, by front-end and outcome."),
            &["endpoint", "outcome"],
        )
        .unwrap();
        let answers_fast =
            Endpoint::ALL.map(|e| Outcome::ALL.map(|o| answers.with_label_values(&[e.label(), o.as_str()])));
        let answer_hist = HistogramVec::new(
            HistogramOpts::new(
                "answer_duration_seconds",
                "Time to compute an answer (parse, classify, choose, format), by front-end.",
            )
            .buckets(vec![0.000_002, 0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.0001, 0.00025, 0.001, 0.01]),
            &["endpoint"],
        )
        .unwrap();
        let answer_duration = Endpoint::ALL.map(|e| answer_hist.with_label_values(&[e.label()]));
        let geoip_loaded =
            IntGaugeVec::new(Opts::new("geoip_loaded", "1 when the GeoIP database is loaded."), &["db"])
                .unwrap();
        let geoip_reload_errors =
            IntCounter::new("geoip_reload_errors_total", "GeoIP reloads that failed (old data kept).")
                .unwrap();

        let http_requests_fast =
            Route::ALL.map(|r| STATUS_CLASSES.map(|c| http_requests.with_label_values(&[r.label(), c])));
        let http_duration_fast = Route::ALL.map(|r| http_duration.with_label_values(&[r.label()]));
        let config_requests = IntCounterVec::new(
            Opts::new("config_requests_total", "App requests to the config center, by method and status."),
            &["method", "status"],
        )
        .unwrap();
        let node_reports =
            IntCounter::new("node_reports_total", "Metric reports accepted from node agents.").unwrap();
        let config_waiters = prometheus::IntGauge::new(
            "config_waiters",
            "Config GETs held by a long poll (wait=) on this replica, waiting for a newer version.",
        )
        .unwrap();
        let audit_write_errors = IntCounter::new(
            "audit_write_errors_total",
            "Admin changes that were made but whose audit entry could not be written (logged at error level).",
        )
        .unwrap();
        let feedback_reports = IntCounterVec::new(
            Opts::new(
                "feedback_reports_total",
                "App feedback reports by result (accepted, ignored, rate_limited).",
            ),
            &["result"],
        )
        .unwrap();
        let rate_limited = IntCounterVec::new(
            Opts::new("rate_limited_total", "Requests refused with 429, by scope (account, client)."),
            &["scope"],
        )
        .unwrap();
        for scope in ["account", "client"] {
            rate_limited.with_label_values(&[scope]);
        }
        let health_probes =
            IntCounterVec::new(Opts::new("health_probes_total", "Health probes by result."), &["result"])
                .unwrap();
        let health_transitions = IntCounterVec::new(
            Opts::new("health_transitions_total", "Nodes going down or coming back up."),
            &["to"],
        )
        .unwrap();
        let nodes_by_health =
            IntGaugeVec::new(Opts::new("nodes_health", "Nodes by health state."), &["state"]).unwrap();
        let config_requests_fast = [ConfigMethod::Get, ConfigMethod::Post]
            .map(|m| CONFIG_STATUSES.map(|st| config_requests.with_label_values(&[m.label(), st])));
        let upstream_cache = IntCounterVec::new(
            Opts::new(
                "upstream_cache_total",
                "Upstream resolutions by cache result (hit, miss, coalesced, stale, error).",
            ),
            &["result"],
        )
        .unwrap();
        for r in UPSTREAM_RESULTS {
            upstream_cache.with_label_values(&[r]);
        }
        let by_client_vec = IntCounterVec::new(
            Opts::new("answers_by_client_total", "/d and /resolve answers by the client's ISP and region."),
            &["isp", "region"],
        )
        .unwrap();
        let by_client = ByClient {
            other: by_client_vec.with_label_values(&["other", "other"]),
            vec: by_client_vec.clone(),
            children: Default::default(),
        };
        for c in [
            Box::new(upstream_cache.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(by_client_vec),
            Box::new(config_requests) as Box<dyn prometheus::core::Collector>,
            Box::new(node_reports.clone()),
            Box::new(config_waiters.clone()),
            Box::new(audit_write_errors.clone()),
            Box::new(feedback_reports.clone()),
            Box::new(rate_limited.clone()),
            Box::new(health_probes.clone()),
            Box::new(health_transitions.clone()),
            Box::new(nodes_by_health.clone()),
            Box::new(http_requests) as Box<dyn prometheus::core::Collector>,
            Box::new(http_duration),
            Box::new(answers.clone()),
            Box::new(answer_hist),
            Box::new(geoip_loaded.clone()),
            Box::new(geoip_reload_errors.clone()),
        ] {
            registry.register(c).expect("unique metric");
        }
        Self {
            registry,
            http_requests: http_requests_fast,
            http_duration: http_duration_fast,
            answers_fast,
            answer_duration,
            geoip_loaded,
            geoip_reload_errors,
            config_requests: config_requests_fast,
            node_reports,
            feedback_reports,
            rate_limited,
            health_probes,
            health_transitions,
            nodes_by_health,
            config_waiters,
            audit_write_errors,
            upstream_cache,
            by_client,
            dns,
        }
    }

    /// Counts an answer for a client of this carrier and region (`unknown` when unclassified).
    pub fn client_answer(&self, view: &httpdns_core::ClientView) {
        if let Some(c) = self.by_client.children.read().unwrap_or_else(|e| e.into_inner()).get(view) {
            c.inc();
            return;
        }
        let mut children = self.by_client.children.write().unwrap_or_else(|e| e.into_inner());
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

    /// Copies the upstream resolver's monotonic counters into `upstream_cache_total`.
    pub fn sync_upstream(&self, counts: &[(&str, u64)]) {
        for (result, n) in counts {
            let c = self.upstream_cache.with_label_values(&[result]);
            c.inc_by(n.saturating_sub(c.get()));
        }
    }

    /// Counts one request of an answer route. Their latency is `answer_duration_seconds`;
    /// observing a second histogram per answer would only add cost.
    pub fn http_answer_request(&self, route: Route, status: http::StatusCode) {
        self.http_requests[route as usize][Self::class(status)].inc();
    }

    fn class(status: http::StatusCode) -> usize {
        match status.as_u16() {
            200..=299 => 0,
            300..=399 => 1,
            400..=499 => 2,
            _ => 3,
        }
    }

    /// Records one HTTP request.
    pub fn http_request(&self, route: Route, status: http::StatusCode, took: Duration) {
        self.http_requests[route as usize][Self::class(status)].inc();
        self.http_duration[route as usize].observe(took.as_secs_f64());
    }

    /// Counts an app request to the config center.
    pub fn config_request(&self, method: ConfigMethod, status: http::StatusCode) {
        self.http_answer_request(Route::Config, status);
        let slot = match status.as_u16() {
            200 => 0,
            304 => 1,
            400 => 2,
            404 => 3,
            _ if status.is_server_error() => 4,
            _ => 5,
        };
        self.config_requests[method as usize][slot].inc();
    }

    pub fn answer(&self, endpoint: Endpoint, outcome: Outcome) {
        let e = endpoint as usize;
        let o = Outcome::ALL.iter().position(|x| *x == outcome).unwrap_or(0);
        self.answers_fast[e][o].inc();
    }

    pub fn answer_time(&self, endpoint: Endpoint, took: Duration) {
        self.answer_duration[endpoint as usize].observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding");
        out
    }
}
