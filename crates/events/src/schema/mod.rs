//! The event schema of `POST /app/events`, parsed at the edge into values that cannot be
//! invalid. Pure: no IO, the clock passed in.
//!
//! A batch is `{"events": [...]}`. Every event has `event` and `timestamp` (Unix seconds);
//! optional on every event: `convergence` (the device's side of the `convergenceRate` switch),
//! `network` (`wifi`, `cellular`, `unknown`), `sample_rate` (0 < r ≤ 1: the event stands for
//! `1 / r` events) and `isp`/`region` (believed only from a signed batch). The rest depends on
//! the type; a field the type does not have is refused by name, like an unknown type, so a
//! client's typo is an error and not a silent zero.

use std::net::IpAddr;

use httpdns_config::Host;
use httpdns_core::{DomainName, Token};
use serde_json::{Map, Value};

/// At most this many addresses per answer in a `localdns_compare`.
pub const MAX_COMPARE_IPS: usize = 32;
/// Durations and latencies above this are refused (ten minutes).
pub const MAX_DURATION_MS: u64 = 600_000;
/// A timestamp this far past the server's clock is refused as not seconds (milliseconds, most
/// likely). Less than that is a device clock running fast: the event still counts (in the
/// minute it arrives, like every event), since devices' clocks are often wrong.
pub const MAX_FUTURE_S: i64 = 366 * 24 * 3600;

/// The event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    /// Resolution fell back from HTTPDNS to LocalDNS (or a stale answer).
    DnsFallback,
    /// A request moved from one unified CDN host to the next.
    HostSwitch,
    /// A disabled host answered its revive probe.
    HostRevive,
    /// A sampled request's outcome and latency, by unified host.
    Request,
    /// The system resolver's answer beside HTTPDNS's, for the LocalDNS map.
    LocalDnsCompare,
}

impl EventType {
    pub const ALL: [EventType; 5] = [
        EventType::DnsFallback,
        EventType::HostSwitch,
        EventType::HostRevive,
        EventType::Request,
        EventType::LocalDnsCompare,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::DnsFallback => "dns_fallback",
            EventType::HostSwitch => "host_switch",
            EventType::HostRevive => "host_revive",
            EventType::Request => "request",
            EventType::LocalDnsCompare => "localdns_compare",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The fields of this type besides the common ones, and whether each is required.
    fn fields(self) -> &'static [(&'static str, bool)] {
        match self {
            EventType::DnsFallback => {
                &[("fallback_reason", true), ("fallback_duration_ms", true), ("host", false)]
            }
            EventType::HostSwitch => {
                &[("from", true), ("to", false), ("reason", true), ("duration_ms", false)]
            }
            EventType::HostRevive => &[("host", true), ("down_ms", false)],
            EventType::Request => &[("host", true), ("outcome", true), ("latency_ms", true)],
            EventType::LocalDnsCompare => &[("host", true), ("localdns", true), ("httpdns", true)],
        }
    }
}

/// Fields every event may carry.
const COMMON: [&str; 9] = [
    "event",
    "timestamp",
    "convergence",
    "network",
    "sample_rate",
    "isp",
    "region",
    "httpdns_enabled",
    "config_version",
];

macro_rules! label_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident => $label:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $label),+ }
            }

            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }

            pub fn expected() -> String {
                let all: Vec<String> = Self::ALL.iter().map(|v| format!("\"{}\"", v.as_str())).collect();
                format!("must be one of {}", all.join(", "))
            }
        }
    };
}

label_enum!(
    /// Why resolution left HTTPDNS (seed 004 §3.3's `fallback_reason`).
    FallbackReason {
        Timeout => "HTTPDNS_TIMEOUT",
        Unreachable => "HTTPDNS_UNREACHABLE",
        Error => "HTTPDNS_ERROR",
        Empty => "HTTPDNS_EMPTY",
        Refused => "HTTPDNS_REFUSED",
        Sniffing => "HTTPDNS_SNIFFING",
        Other => "other",
    }
);

label_enum!(
    /// Why a request left a host.
    SwitchReason {
        Status5xx => "5xx",
        ConnectError => "connect_error",
        Timeout => "timeout",
        Other => "other",
    }
);

label_enum!(
    /// How a sampled request ended.
    RequestOutcome {
        Ok => "ok",
        Status4xx => "4xx",
        Status5xx => "5xx",
        ConnectError => "connect_error",
        Timeout => "timeout",
        DnsError => "dns_error",
        Other => "other",
    }
);

label_enum!(
    /// The device's side of the global convergence switch.
    Side {
        On => "on",
        Off => "off",
        Unknown => "unknown",
    }
);

label_enum!(
    /// The network the device was on.
    Network {
        Wifi => "wifi",
        Cellular => "cellular",
        Unknown => "unknown",
        Other => "other",
    }
);

/// What an event says beyond the common fields.
#[derive(Debug, Clone, PartialEq)]
pub enum Detail {
    DnsFallback { reason: FallbackReason, duration_ms: u64, host: Option<DomainName> },
    HostSwitch { from: Host, to: Option<Host>, reason: SwitchReason, duration_ms: Option<u64> },
    HostRevive { host: Host, down_ms: Option<u64> },
    Request { host: Host, outcome: RequestOutcome, latency_ms: u64 },
    LocalDnsCompare { host: DomainName, localdns: Vec<IpAddr>, httpdns: Vec<IpAddr> },
}

impl Detail {
    pub fn kind(&self) -> EventType {
        match self {
            Detail::DnsFallback { .. } => EventType::DnsFallback,
            Detail::HostSwitch { .. } => EventType::HostSwitch,
            Detail::HostRevive { .. } => EventType::HostRevive,
            Detail::Request { .. } => EventType::Request,
            Detail::LocalDnsCompare { .. } => EventType::LocalDnsCompare,
        }
    }
}

/// One valid event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Unix seconds, by the device's clock.
    pub timestamp: i64,
    pub detail: Detail,
    pub side: Side,
    pub network: Network,
    /// How many events this one stands for: `1 / sample_rate`.
    pub weight: f64,
    /// The carrier and region the device says it is in (used only from signed batches).
    pub isp: Option<Token>,
    pub region: Option<Token>,
    /// The device's side of its place's `httpdnsRate` (CONTRACT: the policy's cohorts).
    pub httpdns_enabled: Option<bool>,
    /// The config version the device runs (rollouts compare the two sides by it).
    pub config_version: Option<u64>,
    /// Values of enumerated fields this server does not know (a newer app's), counted as
    /// `other`: the field's name and the value, cut to [`MAX_UNKNOWN_VALUE`] bytes.
    pub unknown: Vec<(&'static str, String)>,
}

/// The longest unknown value kept for operators.
pub const MAX_UNKNOWN_VALUE: usize = 64;

/// A refused batch: the field (`events[3].fallback_reason`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> SchemaError {
    SchemaError { field: field.into(), message: message.into() }
}

/// Parses a batch. `now_s` is the server's clock (Unix seconds); `max_events` bounds the
/// batch. All or nothing: the first bad event refuses the batch.
pub fn parse_batch(body: &[u8], now_s: i64, max_events: usize) -> Result<Vec<Event>, SchemaError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| err("body", format!("not JSON: {e}")))?;
    let Value::Object(mut top) = value else {
        return Err(err("body", "expected {\"events\": [...]}"));
    };
    let list = match top.remove("events") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(err("events", "must be an array")),
        None => return Err(err("events", "required: {\"events\": [...]}")),
    };
    if let Some(k) = top.keys().next() {
        return Err(err(k.clone(), "unknown field; a batch is {\"events\": [...]}"));
    }
    if list.is_empty() || list.len() > max_events {
        return Err(err("events", format!("1 to {max_events} events per batch")));
    }
    list.into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Object(o) => parse_event(&format!("events[{i}]"), &o, now_s),
            _ => Err(err(format!("events[{i}]"), "must be an object")),
        })
        .collect()
}

fn parse_event(at: &str, o: &Map<String, Value>, now_s: i64) -> Result<Event, SchemaError> {
    let f = |name: &str| format!("{at}.{name}");
    let kind = match o.get("event") {
        Some(Value::String(s)) => EventType::parse(s).ok_or_else(|| {
            let all: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
            err(f("event"), format!("unknown event type {s:?}; known: {}", all.join(", ")))
        })?,
        Some(_) => return Err(err(f("event"), "must be a string")),
        None => return Err(err(f("event"), "required")),
    };
    let fields = kind.fields();
    for k in o.keys() {
        if !COMMON.contains(&k.as_str()) && !fields.iter().any(|(n, _)| n == k) {
            return Err(err(f(k), format!("unknown field for a {} event", kind.as_str())));
        }
    }
    for (name, required) in fields {
        if *required && o.get(*name).is_none_or(Value::is_null) {
            return Err(err(f(name), format!("required for a {} event", kind.as_str())));
        }
    }
    let get = |name: &str| o.get(name).filter(|v| !v.is_null());

    let timestamp = match get("timestamp") {
        Some(v) => {
            v.as_i64().filter(|t| *t > 0).ok_or_else(|| err(f("timestamp"), "must be Unix seconds"))?
        }
        None => return Err(err(f("timestamp"), "required: Unix seconds")),
    };
    if timestamp > now_s + MAX_FUTURE_S {
        return Err(err(
            f("timestamp"),
            "is more than a year ahead: Unix seconds expected, not milliseconds",
        ));
    }
    let side = match get("convergence") {
        None => Side::Unknown,
        Some(Value::Bool(true)) => Side::On,
        Some(Value::Bool(false)) => Side::Off,
        Some(_) => return Err(err(f("convergence"), "must be true or false")),
    };
    let mut unknown = Vec::new();
    let network = match get("network") {
        None => Network::Unknown,
        v => label(v, "network", &f, Network::parse, Network::Other, &mut unknown)?,
    };
    let weight = match get("sample_rate") {
        None => 1.0,
        Some(v) => {
            let r = v
                .as_f64()
                .filter(|r| r.is_finite() && *r > 0.0 && *r <= 1.0)
                .ok_or_else(|| err(f("sample_rate"), "must be a number above 0 and at most 1"))?;
            // 1/1e-6 at most: a "rate" of 1e-300 must not turn one event into a flood.
            1.0 / r.max(1e-6)
        }
    };
    let token = |name: &str| -> Result<Option<Token>, SchemaError> {
        get(name)
            .map(|v| {
                v.as_str()
                    .and_then(|s| Token::parse(s).ok())
                    .ok_or_else(|| err(f(name), "must be a lowercase token"))
            })
            .transpose()
    };
    let (isp, region) = (token("isp")?, token("region")?);

    let ms = |name: &str| -> Result<Option<u64>, SchemaError> {
        get(name)
            .map(|v| {
                v.as_u64().filter(|x| *x <= MAX_DURATION_MS).ok_or_else(|| {
                    err(
                        f(name),
                        format!("must be a whole number of milliseconds from 0 to {MAX_DURATION_MS}"),
                    )
                })
            })
            .transpose()
    };
    let host = |name: &str| -> Result<Option<Host>, SchemaError> {
        get(name)
            .map(|v| {
                v.as_str()
                    .and_then(|s| Host::parse(s).ok())
                    .ok_or_else(|| err(f(name), "must be a host name or address, with an optional :port"))
            })
            .transpose()
    };
    let name = |field: &str| -> Result<Option<DomainName>, SchemaError> {
        get(field)
            .map(|v| {
                v.as_str()
                    .and_then(|s| DomainName::parse(s).ok())
                    .ok_or_else(|| err(f(field), "must be a domain name"))
            })
            .transpose()
    };
    let ips = |field: &str| -> Result<Vec<IpAddr>, SchemaError> {
        let Some(Value::Array(list)) = get(field) else {
            return Err(err(f(field), "must be an array of IP addresses"));
        };
        if list.len() > MAX_COMPARE_IPS {
            return Err(err(f(field), format!("at most {MAX_COMPARE_IPS} addresses")));
        }
        list.iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .and_then(|s| s.parse::<IpAddr>().ok())
                    .map(|ip| ip.to_canonical())
                    .ok_or_else(|| err(format!("{}[{i}]", f(field)), "must be an IP address"))
            })
            .collect()
    };

    let required = |h: Option<Host>| h.expect("required fields were checked");
    let detail = match kind {
        EventType::DnsFallback => Detail::DnsFallback {
            reason: label(
                get("fallback_reason"),
                "fallback_reason",
                &f,
                FallbackReason::parse,
                FallbackReason::Other,
                &mut unknown,
            )?,
            duration_ms: ms("fallback_duration_ms")?.expect("required fields were checked"),
            host: name("host")?,
        },
        EventType::HostSwitch => Detail::HostSwitch {
            from: required(host("from")?),
            to: host("to")?,
            reason: label(
                get("reason"),
                "reason",
                &f,
                SwitchReason::parse,
                SwitchReason::Other,
                &mut unknown,
            )?,
            duration_ms: ms("duration_ms")?,
        },
        EventType::HostRevive => {
            Detail::HostRevive { host: required(host("host")?), down_ms: ms("down_ms")? }
        }
        EventType::Request => Detail::Request {
            host: required(host("host")?),
            outcome: label(
                get("outcome"),
                "outcome",
                &f,
                RequestOutcome::parse,
                RequestOutcome::Other,
                &mut unknown,
            )?,
            latency_ms: ms("latency_ms")?.expect("required fields were checked"),
        },
        EventType::LocalDnsCompare => Detail::LocalDnsCompare {
            host: name("host")?.expect("required fields were checked"),
            localdns: ips("localdns")?,
            httpdns: ips("httpdns")?,
        },
    };
    let httpdns_enabled = match get("httpdns_enabled") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(err(f("httpdns_enabled"), "must be true or false")),
    };
    let config_version = match get("config_version") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| err(f("config_version"), "must be a whole number from 0"))?),
    };
    Ok(Event {
        timestamp,
        detail,
        side,
        network,
        weight,
        isp,
        region,
        httpdns_enabled,
        config_version,
        unknown,
    })
}

/// An enumerated field's value: a known one, or `other` with the value noted in `unknown`. Not
/// a string: refused.
fn label<T>(
    v: Option<&Value>,
    name: &'static str,
    f: &dyn Fn(&str) -> String,
    parse: fn(&str) -> Option<T>,
    other: T,
    unknown: &mut Vec<(&'static str, String)>,
) -> Result<T, SchemaError> {
    let Some(text) = v.and_then(Value::as_str) else {
        return Err(err(f(name), "must be a string"));
    };
    Ok(parse(text).unwrap_or_else(|| {
        let mut cut = MAX_UNKNOWN_VALUE.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        unknown.push((name, text[..cut].to_owned()));
        other
    }))
}

#[cfg(test)]
mod tests;
