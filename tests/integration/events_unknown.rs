//! A newer app's values of enumerated event fields: counted as `other`, kept for operators,
//! never a refused batch (an app version's events would all be lost on an older server).

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{env, Db, Server};

#[tokio::test]
async fn a_batch_with_a_new_reason_is_taken_and_the_value_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_with(env(tmp.path(), &Db::Sqlite), Some("[events]\nflush_ms = 200\n")).await;
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "shanghai"})).await;
    let t = httpdns_core::clock::unix_s();
    let batch = json!({"events": [
        {"event": "dns_fallback", "timestamp": t, "fallback_reason": "HTTPDNS_5XX", "fallback_duration_ms": 90},
        {"event": "dns_fallback", "timestamp": t, "fallback_reason": "HTTPDNS_5XX", "fallback_duration_ms": 90},
        {"event": "dns_fallback", "timestamp": t, "fallback_reason": "HTTPDNS_TIMEOUT", "fallback_duration_ms": 90},
        {"event": "host_switch", "timestamp": t, "from": "cdn1.example.com", "reason": "tls_error"},
        {"event": "request", "timestamp": t, "host": "cdn1.example.com", "outcome": "ok", "latency_ms": 9,
         "network": "satellite"},
    ]});
    let resp = s.http.post(s.url("/app/events")).json(&batch).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    assert_eq!(resp.json::<Value>().await.unwrap()["accepted"], 5);

    let (status, summary) = s.admin(Method::GET, "/admin/v1/events/summary?window=1h", None).await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    let unknown = summary["unknown_values"].as_array().unwrap();
    let count = |field: &str, value: &str| {
        unknown
            .iter()
            .find(|u| u["field"] == field && u["value"] == value)
            .map(|u| u["count"].as_u64().unwrap())
    };
    assert_eq!(count("fallback_reason", "HTTPDNS_5XX"), Some(2), "{summary}");
    assert_eq!(count("reason", "tls_error"), Some(1), "{summary}");
    assert_eq!(count("network", "satellite"), Some(1), "{summary}");
    assert_eq!(unknown.len(), 3, "{summary}");

    let metrics = s.text("/metrics").await;
    assert!(metrics.contains("app_event_unknown_values_total{field=\"fallback_reason\"} 2"), "{metrics}");
    assert!(
        metrics.lines().any(|l| l.starts_with("httpdns_app_events_total{")
            && l.contains("event=\"dns_fallback\"")
            && l.contains("reason=\"other\"")
            && l.ends_with(" 2")),
        "{metrics}"
    );
    // The wrong JSON type is still a malformed event: the batch is refused, naming it.
    let bad = json!({"events": [{"event": "dns_fallback", "timestamp": t, "fallback_reason": 5,
        "fallback_duration_ms": 1}]});
    let resp = s.http.post(s.url("/app/events")).json(&bad).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(resp.json::<Value>().await.unwrap()["field"], "events[0].fallback_reason");
}
