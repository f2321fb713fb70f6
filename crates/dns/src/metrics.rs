//! Counts of every DNS front-end: plain DNS over UDP and TCP, DNS over TLS, DNS over HTTPS
//! (wire format) and its JSON API, by response code, with the time from a message's arrival
//! to its answer (upstream waits included).

use std::time::Instant;

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
        Self {
            queries: Frontend::ALL.map(|f| RCODES.map(|r| queries.with_label_values(&[f.label(), r]))),
            duration: Frontend::ALL.map(|f| duration.with_label_values(&[f.label()])),
        }
    }

    /// One message of `frontend`, answered with `rcode` (`None`: not answered), that arrived
    /// at `started`.
    pub fn observe(&self, frontend: Frontend, rcode: Option<ResponseCode>, started: Instant) {
        let f = frontend as usize;
        self.queries[f][slot(rcode)].inc();
        self.duration[f].observe(started.elapsed().as_secs_f64());
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
}
