//! The events a [`Reporter`](super::Reporter) sends and the feedback reports of live scoring,
//! with the JSON the server's schemas take.

use std::net::IpAddr;
use std::time::Duration;

use serde_json::{json, Value};

/// Why resolution left HTTPDNS. In sniff mode (the service skipped after every address
/// failed) the reason is the failure that started it; `Sniffing` is for SDKs that do not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    Timeout,
    Unreachable,
    Error,
    Empty,
    Refused,
    Sniffing,
}

impl FallbackReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackReason::Timeout => "HTTPDNS_TIMEOUT",
            FallbackReason::Unreachable => "HTTPDNS_UNREACHABLE",
            FallbackReason::Error => "HTTPDNS_ERROR",
            FallbackReason::Empty => "HTTPDNS_EMPTY",
            FallbackReason::Refused => "HTTPDNS_REFUSED",
            FallbackReason::Sniffing => "HTTPDNS_SNIFFING",
        }
    }
}

/// Why a request left a host, or how a sampled request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Status5xx,
    ConnectError,
    Timeout,
}

impl Failure {
    fn as_str(self) -> &'static str {
        match self {
            Failure::Status5xx => "5xx",
            Failure::ConnectError => "connect_error",
            Failure::Timeout => "timeout",
        }
    }
}

/// How a sampled request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    Ok,
    Status4xx,
    Failed(Failure),
    DnsError,
}

impl RequestOutcome {
    fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Ok => "ok",
            RequestOutcome::Status4xx => "4xx",
            RequestOutcome::Failed(f) => f.as_str(),
            RequestOutcome::DnsError => "dns_error",
        }
    }
}

/// One thing the app saw.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    DnsFallback { host: String, reason: FallbackReason, duration: Duration },
    HostSwitch { from: String, to: Option<String>, reason: Failure, duration: Duration },
    HostRevive { host: String },
    Request { host: String, outcome: RequestOutcome, latency: Duration, sample_rate: f64 },
    LocalDnsCompare { host: String, localdns: Vec<IpAddr>, httpdns: Vec<IpAddr> },
}

fn ms(d: Duration) -> u64 {
    (d.as_millis() as u64).min(600_000)
}

impl ClientEvent {
    pub(super) fn to_json(&self, timestamp: u64, side: Option<bool>) -> Value {
        let mut v = match self {
            ClientEvent::DnsFallback { host, reason, duration } => json!({"event": "dns_fallback",
                "host": host, "fallback_reason": reason.as_str(), "fallback_duration_ms": ms(*duration)}),
            ClientEvent::HostSwitch { from, to, reason, duration } => json!({"event": "host_switch",
                "from": from, "to": to, "reason": reason.as_str(), "duration_ms": ms(*duration)}),
            ClientEvent::HostRevive { host } => json!({"event": "host_revive", "host": host}),
            ClientEvent::Request { host, outcome, latency, sample_rate } => json!({"event": "request",
                "host": host, "outcome": outcome.as_str(), "latency_ms": ms(*latency), "sample_rate": sample_rate}),
            ClientEvent::LocalDnsCompare { host, localdns, httpdns } => json!({"event": "localdns_compare",
                "host": host, "localdns": localdns, "httpdns": httpdns}),
        };
        let o = v.as_object_mut().expect("an object");
        o.retain(|_, v| !v.is_null());
        o.insert("timestamp".into(), json!(timestamp));
        if let Some(side) = side {
            o.insert("convergence".into(), json!(side));
        }
        v
    }
}

/// One connection's outcome for the server's live scores (`POST /feedback`,
/// docs/live-scores.md), as the Android SDK's `eventListenerFactory` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackReport {
    /// The node connected to.
    pub ip: IpAddr,
    /// The name it was resolved for.
    pub domain: String,
    pub ok: bool,
    /// The connection's set-up time (TCP, and TLS for HTTPS), when it succeeded.
    pub connect: Option<Duration>,
    /// `wifi` or `cellular`, from the network key's prefix; `None` otherwise.
    pub network: Option<&'static str>,
}

impl FeedbackReport {
    /// The server's schema: `{"ip", "domain", "ok", "connect_ms", "network"}`, `connect_ms`
    /// only for a success (0 to 60,000), `network` only when known.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"ip": self.ip.to_string(), "domain": self.domain, "ok": self.ok});
        if let (true, Some(c)) = (self.ok, self.connect) {
            v["connect_ms"] = json!((c.as_millis() as u64).min(60_000));
        }
        if let Some(n) = self.network {
            v["network"] = json!(n);
        }
        v
    }

    /// `wifi` / `cellular` from a network key (`"wifi:home"`, `"cellular:46001"`).
    pub fn network_of(key: &str) -> Option<&'static str> {
        if key.starts_with("wifi") {
            Some("wifi")
        } else if key.starts_with("cellular") {
            Some("cellular")
        } else {
            None
        }
    }
}
