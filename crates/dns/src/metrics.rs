//! Counts of every DNS front-end: plain DNS over UDP and TCP, DNS over TLS, DNS over HTTPS
//! (wire format) and its JSON API, by response code, with the time from a message's arrival
//! to its answer (upstream waits included).

use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};

/// Where a DNS question came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    Udp,
    Tcp,
    /// DNS over TLS (RFC 7858).
    Dot,
    /// DNS over HTTPS, wire format (RFC 8484).
    Doh,
    /// The JSON API (`/dns-query?name=`, `/resolve?name=`).
    DohJson,
}

impl Frontend {
    pub const ALL: [Frontend; 5] =
        [Frontend::Udp, Frontend::Tcp, Frontend::Dot, Frontend::Doh, Frontend::DohJson];

    pub fn label(self) -> &'static str {
        match self {
            Frontend::Udp => "udp",
            Frontend::Tcp => "tcp",
            Frontend::Dot => "dot",
            Frontend::Doh => "doh",
            Frontend::DohJson => "doh_json",
        }
    }
}

/// The `rcode` label values: the codes this server answers, `other` for any other, and `none`
/// for messages that got no answer (not a query, or too short to carry an id).
const RCODES: [&str; 9] =
    ["noerror", "formerr", "servfail", "nxdomain", "notimp", "refused", "badvers", "other", "none"];

fn slot(rcode: Option<ResponseCode>) -> usize {
    match rcode {
        Some(ResponseCode::NoError) => 0,
        Some(ResponseCode::FormErr) => 1,
        Some(ResponseCode::ServFail) => 2,
        Some(ResponseCode::NXDomain) => 3,
        Some(ResponseCode::NotImp) => 4,
        Some(ResponseCode::Refused) => 5,
        Some(ResponseCode::BADVERS) => 6,
        Some(_) => 7,
        None => 8,
    }
}

/// `dns_queries_total{frontend, rcode}` and `dns_query_duration_seconds{frontend}`, with
/// every child resolved up front so the hot path does no label hashing.
#[derive(Debug)]
pub struct DnsMetrics {
    queries: [[IntCounter; RCODES.len()]; Frontend::ALL.len()],
    duration: [Histogram; Frontend::ALL.len()],
    /// Per-domain counts of every front-end, DNS and HTTP (`httpdns_answer::tally`): here because this
    /// set is the one every front-end is handed.
    pub domains: std::sync::Arc<httpdns_answer::tally::DomainTally>,
}

impl DnsMetrics {
    pub fn new(registry: &Registry) -> Self {
        let queries = IntCounterVec::new(
            Opts::new("dns_queries_total", "DNS messages answered, by front-end and response code."),
            &["frontend", "rcode"],
        )
        .expect("valid metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "dns_query_duration_seconds",
                "Time from a DNS message's arrival to its answer (upstream waits included), by front-end.",
            )
            .buckets(vec![
                0.000_01, 0.000_025, 0.000_05, 0.0001, 0.00025, 0.001, 0.005, 0.025, 0.1, 0.5, 2.0,
            ]),
            &["frontend"],
        )
        .expect("valid metric");
        registry.register(Box::new(queries.clone())).expect("registered once");
        registry.register(Box::new(duration.clone())).expect("registered once");
        let domains = std::sync::Arc::new(httpdns_answer::tally::DomainTally::default());
        registry
            .register(Box::new(httpdns_answer::tally::BusiestDomains::new(domains.clone())))
            .expect("registered once");
        Self {
            queries: Frontend::ALL.map(|f| RCODES.map(|r| queries.with_label_values(&[f.label(), r]))),
            duration: Frontend::ALL.map(|f| duration.with_label_values(&[f.label()])),
            domains,
        }
    }

    /// One message of `frontend`, answered with `rcode` (`None`: not answered), that arrived
    /// at `started`.
    pub fn observe(&self, frontend: Frontend, rcode: Option<ResponseCode>, started: Instant) {
        let f = frontend as usize;
        self.queries[f][slot(rcode)].inc();
        self.duration[f].observe(started.elapsed().as_secs_f64());
    }

    /// Counts kept by one thread and added here once per batch ([`Tally::flush`]): the UDP
    /// thread answers tens of messages a batch, and per message the shared counters' atomics
    /// and a clock read cost more than the fast path's own work.
    pub fn tally(&self, frontend: Frontend) -> Tally<'_> {
        Tally {
            metrics: self,
            frontend,
            counts: [0; RCODES.len()],
            duration: self.duration[frontend as usize].local(),
        }
    }
}

/// One thread's counts since its last [`Tally::flush`]; see [`DnsMetrics::tally`].
#[derive(Debug)]
pub struct Tally<'a> {
    metrics: &'a DnsMetrics,
    frontend: Frontend,
    counts: [u64; RCODES.len()],
    duration: prometheus::local::LocalHistogram,
}

impl Tally<'_> {
    /// One message answered with `rcode` (`None`: not answered).
    pub fn count(&mut self, rcode: Option<ResponseCode>) {
        self.counts[slot(rcode)] += 1;
    }

    /// Adds the messages counted since the last flush to the shared metrics, each taking
    /// `elapsed`: the batch's time from its read to its replies' send, which every message
    /// of it waited.
    pub fn flush(&mut self, elapsed: Duration) {
        let f = self.frontend as usize;
        let secs = elapsed.as_secs_f64();
        let mut any = false;
        for (slot, n) in self.counts.iter_mut().enumerate() {
            if *n > 0 {
                self.metrics.queries[f][slot].inc_by(*n);
                for _ in 0..*n {
                    self.duration.observe(secs);
                }
                *n = 0;
                any = true;
            }
        }
        if any {
            self.duration.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_frontend_and_rcode() {
        let registry = Registry::new();
        let m = DnsMetrics::new(&registry);
        m.observe(Frontend::Dot, Some(ResponseCode::BADVERS), Instant::now());
        m.observe(Frontend::Udp, None, Instant::now());
        let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
        assert!(text.contains(r#"dns_queries_total{frontend="dot",rcode="badvers"} 1"#), "{text}");
        assert!(text.contains(r#"dns_queries_total{frontend="udp",rcode="none"} 1"#), "{text}");
        assert!(text.contains(r#"dns_query_duration_seconds_count{frontend="dot"} 1"#), "{text}");
    }

    #[test]
    fn a_tally_reaches_the_shared_counts_when_flushed() {
        let registry = Registry::new();
        let m = DnsMetrics::new(&registry);
        let text = || prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
        let mut tally = m.tally(Frontend::Udp);
        tally.count(Some(ResponseCode::NoError));
        tally.count(Some(ResponseCode::NoError));
        tally.count(None);
        let t = text();
        assert!(
            t.contains(r#"dns_queries_total{frontend="udp",rcode="noerror"} 0"#),
            "counted before the flush: {t}"
        );
        tally.flush(Duration::from_micros(30));
        let t = text();
        assert!(t.contains(r#"dns_queries_total{frontend="udp",rcode="noerror"} 2"#), "{t}");
        assert!(t.contains(r#"dns_queries_total{frontend="udp",rcode="none"} 1"#), "{t}");
        assert!(t.contains(r#"dns_query_duration_seconds_count{frontend="udp"} 3"#), "{t}");
        // 30 us: over the 25 us bucket, within the 50 us one.
        assert!(t.contains(r#"dns_query_duration_seconds_bucket{frontend="udp",le="0.000025"} 0"#), "{t}");
        assert!(t.contains(r#"dns_query_duration_seconds_bucket{frontend="udp",le="0.00005"} 3"#), "{t}");
        // A second flush adds only what was counted since.
        tally.count(Some(ResponseCode::NXDomain));
        tally.flush(Duration::from_micros(30));
        tally.flush(Duration::from_micros(30));
        let t = text();
        assert!(t.contains(r#"dns_queries_total{frontend="udp",rcode="noerror"} 2"#), "{t}");
        assert!(t.contains(r#"dns_queries_total{frontend="udp",rcode="nxdomain"} 1"#), "{t}");
        assert!(t.contains(r#"dns_query_duration_seconds_count{frontend="udp"} 4"#), "{t}");
    }
}
