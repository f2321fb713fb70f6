//! The schema's cases: every type, every field refused by name, the limits.

use super::*;

const NOW: i64 = 1_672_531_300;

fn one(event: &Value) -> Result<Event, SchemaError> {
    let body = serde_json::to_vec(&serde_json::json!({ "events": [event] })).unwrap();
    parse_batch(&body, NOW, 100).map(|mut v| v.remove(0))
}

#[test]
fn the_seed_event_parses() {
    // Seed 004 §3.3's event, as written there.
    let e = one(&serde_json::json!({"event": "dns_fallback", "timestamp": 1672531200, "region": "cn-east-1",
        "isp": "unicom", "fallback_reason": "HTTPDNS_TIMEOUT", "fallback_duration_ms": 120}))
    .unwrap();
    assert_eq!(
        e.detail,
        Detail::DnsFallback { reason: FallbackReason::Timeout, duration_ms: 120, host: None }
    );
    assert_eq!(e.region.as_ref().map(Token::as_str), Some("cn-east-1"));
    assert_eq!((e.side, e.weight), (Side::Unknown, 1.0));
}

#[test]
fn every_type_parses() {
    let e = one(&serde_json::json!({"event": "host_switch", "timestamp": NOW, "from": "cdn1.example.com",
        "to": "cdn2.example.com:8443", "reason": "5xx", "convergence": true}))
    .unwrap();
    assert!(matches!(e.detail, Detail::HostSwitch { reason: SwitchReason::Status5xx, .. }));
    assert_eq!(e.side, Side::On);
    let e = one(&serde_json::json!({"event": "request", "timestamp": NOW, "host": "127.0.0.21:8080",
        "outcome": "ok", "latency_ms": 35, "sample_rate": 0.01}))
    .unwrap();
    assert!((e.weight - 100.0).abs() < 1e-9);
    let e =
        one(&serde_json::json!({"event": "localdns_compare", "timestamp": NOW, "host": "www.example.com",
        "localdns": ["10.0.0.1"], "httpdns": ["1.1.1.1", "::ffff:2.2.2.2"]}))
        .unwrap();
    let Detail::LocalDnsCompare { httpdns, .. } = e.detail else { panic!() };
    assert_eq!(httpdns[1], "2.2.2.2".parse::<IpAddr>().unwrap(), "mapped addresses canonical");
    one(&serde_json::json!({"event": "host_revive", "timestamp": NOW, "host": "cdn1.example.com"})).unwrap();
}

#[test]
fn every_event_may_say_its_policy_side_and_config_version() {
    let e =
        one(&serde_json::json!({"event": "host_switch", "timestamp": NOW, "from": "a.b", "reason": "5xx",
        "httpdns_enabled": false, "config_version": 7}))
        .unwrap();
    assert_eq!((e.httpdns_enabled, e.config_version), (Some(false), Some(7)));
    let field = |v: Value| one(&v).unwrap_err().field;
    assert_eq!(
        field(
            serde_json::json!({"event": "host_revive", "timestamp": NOW, "host": "a.b", "config_version": -1})
        ),
        "events[0].config_version"
    );
    assert_eq!(
        field(
            serde_json::json!({"event": "host_revive", "timestamp": NOW, "host": "a.b", "httpdns_enabled": 1})
        ),
        "events[0].httpdns_enabled"
    );
}

#[test]
fn unknown_values_of_enumerated_fields_count_as_other_and_are_kept() {
    let e =
        one(&serde_json::json!({"event": "dns_fallback", "timestamp": NOW, "fallback_reason": "HTTPDNS_5XX",
        "fallback_duration_ms": 1, "network": "satellite"}))
        .unwrap();
    assert!(matches!(e.detail, Detail::DnsFallback { reason: FallbackReason::Other, .. }));
    assert_eq!(e.network, Network::Other);
    assert_eq!(
        e.unknown,
        vec![("network", "satellite".to_owned()), ("fallback_reason", "HTTPDNS_5XX".to_owned())]
    );
    let long = "\u{4e2d}".repeat(40);
    let e = one(&serde_json::json!({"event": "request", "timestamp": NOW, "host": "a.b", "outcome": long,
        "latency_ms": 1}))
    .unwrap();
    assert!(matches!(e.detail, Detail::Request { outcome: RequestOutcome::Other, .. }));
    assert!(e.unknown[0].1.len() <= MAX_UNKNOWN_VALUE && long.starts_with(&e.unknown[0].1));
    let e =
        one(&serde_json::json!({"event": "host_switch", "timestamp": NOW, "from": "a.b", "reason": "dns"}))
            .unwrap();
    assert!(matches!(e.detail, Detail::HostSwitch { reason: SwitchReason::Other, .. }));
}

#[test]
fn bad_events_name_the_field() {
    let field = |v: Value| one(&v).unwrap_err().field;
    assert_eq!(field(serde_json::json!({"event": "dns_fallbak", "timestamp": NOW})), "events[0].event");
    assert_eq!(
        field(
            serde_json::json!({"event": "dns_fallback", "timestamp": NOW, "fallback_reason": "HTTPDNS_TIMEOUT",
            "fallback_duration_ms": 1, "latency_ms": 3})
        ),
        "events[0].latency_ms",
        "a field of another type"
    );
    assert_eq!(
        field(serde_json::json!({"event": "dns_fallback", "timestamp": NOW, "fallback_reason": 5,
            "fallback_duration_ms": 1})),
        "events[0].fallback_reason",
        "a value of the wrong JSON type"
    );
    assert_eq!(
        field(
            serde_json::json!({"event": "dns_fallback", "timestamp": NOW, "fallback_reason": "HTTPDNS_TIMEOUT"})
        ),
        "events[0].fallback_duration_ms"
    );
    assert_eq!(
        field(
            serde_json::json!({"event": "request", "timestamp": NOW * 1000, "host": "a.b", "outcome": "ok",
            "latency_ms": 1})
        ),
        "events[0].timestamp",
        "milliseconds are in the future"
    );
    assert_eq!(
        field(serde_json::json!({"event": "request", "timestamp": NOW, "host": "a.b", "outcome": "ok",
            "latency_ms": -1})),
        "events[0].latency_ms"
    );
    assert_eq!(
        field(serde_json::json!({"event": "request", "timestamp": NOW, "host": "a.b", "outcome": "ok",
            "latency_ms": 1, "sample_rate": 0})),
        "events[0].sample_rate"
    );
    assert_eq!(
        field(serde_json::json!({"event": "localdns_compare", "timestamp": NOW, "host": "a.b",
            "localdns": ["nope"], "httpdns": []})),
        "events[0].localdns[0]"
    );
    assert_eq!(
        field(
            serde_json::json!({"event": "host_revive", "timestamp": NOW, "host": "a.b", "isp": "China Unicom"})
        ),
        "events[0].isp"
    );
    assert_eq!(parse_batch(br#"{"events":[],"x":1}"#, NOW, 10).unwrap_err().field, "x");
    assert_eq!(parse_batch(br#"{"events":[]}"#, NOW, 10).unwrap_err().field, "events");
    assert_eq!(parse_batch(b"[]", NOW, 10).unwrap_err().field, "body");
    let ok = serde_json::json!({"event": "host_revive", "timestamp": NOW, "host": "a.b"});
    let two = serde_json::to_vec(&serde_json::json!({"events": [ok.clone(), ok]})).unwrap();
    assert_eq!(parse_batch(&two, NOW, 1).unwrap_err().field, "events", "over the batch limit");
}
