//! An event's `sample_rate` is believed whole only from a signed batch: one unsigned event
//! "sampled at 1e-6" is not a million requests, and no place is judged on a handful of reports
//! whatever they claim to stand for (docs/observability.md, "Aggregation").

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{env, Db, Server};

fn now_s() -> u64 {
    httpdns_core::clock::unix_s()
}

fn failed_requests(n: usize, sample_rate: f64, place: Option<(&str, &str)>) -> Value {
    let events: Vec<Value> = (0..n)
        .map(|_| {
            let mut e = json!({"event": "request", "timestamp": now_s(), "host": "cdn1.example.com",
                "outcome": "5xx", "latency_ms": 40, "sample_rate": sample_rate});
            if let Some((isp, region)) = place {
                e["isp"] = json!(isp);
                e["region"] = json!(region);
            }
            e
        })
        .collect();
    json!({ "events": events })
}

fn place<'a>(summary: &'a Value, isp: &str, region: &str) -> &'a Value {
    summary["rates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["isp"] == isp && r["region"] == region)
        .unwrap_or_else(|| panic!("no {isp}/{region} in {summary}"))
}

#[tokio::test]
async fn an_unsigned_event_sampled_at_one_in_a_million_trips_no_alert() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_with(env(tmp.path(), &Db::Sqlite), Some("[events]\nflush_ms = 200\n")).await;
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "shanghai"})).await;
    s.put_ok("/admin/v1/accounts/7", json!({"secret": "k-secret-key"})).await;
    let post = |query: String, body: Value| {
        let req = s.http.post(s.url(&format!("/app/events{query}"))).body(body.to_string());
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::ACCEPTED, "{}", resp.text().await.unwrap());
        }
    };
    let signed = |body: &Value| {
        use md5::Digest as _;
        let t = now_s() + 600;
        let digest: String =
            sha2::Sha256::digest(body.to_string().as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        let sig: String = md5::Md5::digest(format!("{digest}-k-secret-key-{t}").as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("?account=7&t={t}&s={sig}")
    };

    // Anyone: one failed request claiming to stand for a million.
    post(String::new(), failed_requests(1, 1e-6, None)).await;
    // An app of account 7: one such event (its weight believed, but one report), and a place
    // with enough reports that each stand for a thousand.
    let one = failed_requests(1, 1e-6, Some(("telecom", "beijing")));
    post(signed(&one), one).await;
    let many = failed_requests(25, 1e-3, Some(("mobile", "guangzhou")));
    post(signed(&many), many).await;

    let (status, v) = s.admin(Method::GET, "/admin/v1/events/summary?window=5m", None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["alert_min_reports"], 20.0, "{v}");
    let sh = place(&v, "unicom", "shanghai");
    assert_eq!((sh["requests"].as_f64(), sh["reports"].as_f64()), (Some(100.0), Some(1.0)), "capped: {sh}");
    assert_eq!(sh["alert"], false, "one unsigned report: {sh}");
    let bj = place(&v, "telecom", "beijing");
    assert_eq!(bj["requests"].as_f64(), Some(1e6), "a signed batch keeps its declared weight: {bj}");
    assert_eq!(bj["alert"], false, "but one report is not enough to judge: {bj}");
    let gz = place(&v, "mobile", "guangzhou");
    assert_eq!((gz["requests"].as_f64(), gz["reports"].as_f64()), (Some(25_000.0), Some(25.0)), "{gz}");
    assert_eq!(gz["alert"], true, "25 signed reports of 5xx: {gz}");
    assert_eq!(gz["alert_errors"], json!(["5xx"]), "{gz}");

    let metrics = s.text("/metrics").await;
    assert!(metrics.contains("httpdns_app_events_weight_capped_total 1"), "{metrics}");
}
