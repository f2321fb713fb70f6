//! Prometheus metrics of the API listener. Every label is bounded: routes are the router's
//! matched paths and status classes are fixed sets. The answers' own series (outcomes by
//! front-end, answer time, answers by client) are the engine's (`httpdns_answer::metrics`),
//! `rate_limited_total` the guards' (`httpdns_guard`).

use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

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
/// The results the upstream resolver counts (`httpdns_upstream::Upstream::cache_counts`).
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

/// All metrics of the process's API side.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    /// Pre-resolved children by [`Route`] and status class: the hot path does no label hashing.
    http_requests: [[IntCounter; 4]; Route::ALL.len()],
    http_duration: [Histogram; Route::ALL.len()],
    pub geoip_loaded: IntGaugeVec,
    pub node_reports: IntCounter,
    pub feedback_reports: IntCounterVec,
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
    /// Every DNS front-end (UDP, TCP, DoT, DoH, the JSON API), shared with the listeners.
    pub dns: std::sync::Arc<httpdns_dns::DnsMetrics>,
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
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(upstream_cache.clone()),
            Box::new(config_requests),
            Box::new(node_reports.clone()),
            Box::new(config_waiters.clone()),
            Box::new(audit_write_errors.clone()),
            Box::new(feedback_reports.clone()),
            Box::new(health_probes.clone()),
            Box::new(health_transitions.clone()),
            Box::new(nodes_by_health.clone()),
            Box::new(http_requests),
            Box::new(http_duration),
            Box::new(geoip_loaded.clone()),
            Box::new(geoip_reload_errors.clone()),
        ];
        for c in collectors {
            registry.register(c).expect("unique metric");
        }
        Self {
            registry,
            http_requests: http_requests_fast,
            http_duration: http_duration_fast,
            geoip_loaded,
            geoip_reload_errors,
            config_requests: config_requests_fast,
            node_reports,
            feedback_reports,
            health_probes,
            health_transitions,
            nodes_by_health,
            config_waiters,
            audit_write_errors,
            upstream_cache,
            dns,
        }
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

    /// The Prometheus text exposition.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding");
        out
    }
}
