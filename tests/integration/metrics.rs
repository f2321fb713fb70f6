use crate::support::{Db, Server};

#[tokio::test]
async fn metrics_scrape_parses_and_counts_answers() {
    let s = Server::start(&Db::Sqlite).await;
    s.seed().await;
    s.text("/d?dn=www.example.com&ip=1.0.1.7").await;
    s.text("/d?dn=www.example.com,nothing.example.com&ip=1.0.1.7").await;
    s.get("/resolve?host=www.example.com").await;
    let resp = s.get("/metrics").await;
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = resp.text().await.unwrap();

    let value = |series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("series {series} missing in\n{text}"))
    };
    assert_eq!(value(r#"httpdns_answers_total{endpoint="d",outcome="ok"}"#), 2.0);
    assert_eq!(value(r#"httpdns_answers_total{endpoint="d",outcome="not-managed"}"#), 1.0);
    assert_eq!(value(r#"httpdns_answers_total{endpoint="resolve",outcome="ok"}"#), 1.0);
    assert_eq!(value(r#"httpdns_answer_duration_seconds_count{endpoint="d"}"#), 2.0);
    assert!(value(r#"httpdns_http_requests_total{route="/admin",status="2xx"}"#) >= 8.0);
    assert_eq!(value(r#"httpdns_snapshot_objects{kind="domains"}"#), 1.0);
    assert_eq!(value(r#"httpdns_snapshot_objects{kind="nodes"}"#), 5.0);
    assert!(value("httpdns_snapshot_revision") >= 8.0);
    assert!(value("httpdns_snapshot_built_timestamp_seconds") > 1.7e9);
    let age = value("httpdns_snapshot_age_seconds");
    assert!((0.0..60.0).contains(&age), "{age}");
    assert_eq!(value("httpdns_store_up"), 1.0);

    // Every sample line is `name{labels} value` with a number, and every family has HELP/TYPE.
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let v = line.rsplit(' ').next().unwrap();
        assert!(v.parse::<f64>().is_ok() || v == "+Inf", "bad sample line {line:?}");
        let name = line.split(['{', ' ']).next().unwrap();
        let family = name.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count");
        assert!(
            text.contains(&format!("# TYPE {family} ")) || text.contains(&format!("# TYPE {name} ")),
            "{name}"
        );
    }
}

#[tokio::test]
async fn health_endpoints() {
    let s = Server::start(&Db::Sqlite).await;
    assert_eq!(s.get("/healthz").await.status(), 200);
    let resp = s.get("/readyz").await;
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    assert_eq!(body["backend"], "sqlite");
}
