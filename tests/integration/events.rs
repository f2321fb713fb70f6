//! Client events (`POST /app/events`): strict intake, per-minute aggregation flushed to the
//! store, the fleet view across replicas, the shipped 1% alert rules evaluated by `promtool`
//! on series the server exported, and the LocalDNS map fed by the real client library behind
//! a lying LocalDNS (a second httpdns answering the name with a portal address).

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{backends, env, Db, Server};

fn now_s() -> u64 {
    httpdns_core::clock::unix_s()
}

/// A server whose loopback clients are unicom in shanghai, flushing events often.
async fn server(db: &Db, tmp: &std::path::Path, extra: &[(&str, &str)]) -> Server {
    let mut e = env(tmp, db);
    for (k, v) in extra {
        e.insert((*k).into(), (*v).into());
    }
    let s = Server::start_with(e, Some("[events]\nflush_ms = 200\n")).await;
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "shanghai"})).await;
    s
}

async fn post(s: &Server, query: &str, body: Vec<u8>, encoding: Option<&str>) -> (StatusCode, Value) {
    let mut req = s.http.post(s.url(&format!("/app/events{query}"))).body(body);
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn batch(events: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({ "events": events })).unwrap()
}

fn requests(n: usize, outcome: &str) -> Vec<Value> {
    (0..n)
        .map(|_| {
            json!({"event": "request", "timestamp": now_s(), "host": "cdn1.example.com", "outcome": outcome,
                "latency_ms": 40, "convergence": true})
        })
        .collect()
}

fn fallbacks(n: usize, reason: &str) -> Vec<Value> {
    (0..n)
        .map(|_| {
            json!({"event": "dns_fallback", "timestamp": now_s(), "fallback_reason": reason,
                "fallback_duration_ms": 120, "convergence": true})
        })
        .collect()
}

async fn summary(s: &Server, query: &str) -> Value {
    let (status, v) = s.admin(Method::GET, &format!("/admin/v1/events/summary{query}"), None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v
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
async fn events_are_checked_counted_and_summed_across_replicas() {
    for (db, _guard) in backends("events_summary").await {
        let tmp = tempfile::tempdir().unwrap();
        let a = server(&db, tmp.path(), &[]).await;
        a.put_ok(
            "/admin/v1/config/cdn",
            json!({"mergeHostConfigs": [], "hostListConfig": [{"host": "cdn1.example.com", "rate": 1}],
                "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []}),
        )
        .await;
        a.put_ok("/admin/v1/accounts/139450", json!({"secret": "s3cr3t-secret"})).await;

        // Refused whole, with the field named: nothing of the batch is counted.
        let mut bad = requests(3, "ok");
        bad.push(json!({"event": "dns_fallback", "timestamp": now_s(), "fallback_reason": "HTTPDNS_TIMEOUT",
            "fallback_duration_ms": 120, "latency_ms": 1}));
        let (status, body) = post(&a, "", batch(&bad), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["field"], "events[3].latency_ms");
        let (status, body) =
            post(&a, "", batch(&[json!({"event": "app_crash", "timestamp": now_s()})]), None).await;
        assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("events[0].event")));
        let (status, body) = post(&a, "", b"{\"events\": [".to_vec(), None).await;
        assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("body")));
        let (status, _) = post(&a, "", batch(&requests(1, "ok")), Some("br")).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let (status, _) = post(&a, "", vec![b' '; 2 << 20], None).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        // A gzip bomb: small on the wire, past the limit inflated.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![b' '; 4 << 20]).unwrap();
        let (status, _) = post(&a, "", gz.finish().unwrap(), Some("gzip")).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        let v = summary(&a, "?window=5m").await;
        assert_eq!(v["events"], json!([]), "refused batches count nothing: {v}");

        // 200 requests (one batch gzipped), 3 fallbacks: 1.5% of requests fell back. An
        // unsigned batch claiming another carrier is counted where its address is.
        let mut first = requests(100, "ok");
        first.extend(fallbacks(2, "HTTPDNS_TIMEOUT"));
        first.push(
            json!({"event": "dns_fallback", "timestamp": now_s(), "fallback_reason": "HTTPDNS_TIMEOUT",
            "fallback_duration_ms": 300, "isp": "telecom", "region": "beijing"}),
        );
        let (status, body) = post(&a, "", batch(&first), None).await;
        assert_eq!((status, body["accepted"].as_u64()), (StatusCode::ACCEPTED, Some(103)), "{body}");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&batch(&requests(100, "ok"))).unwrap();
        let (status, _) = post(&a, "", gz.finish().unwrap(), Some("gzip")).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        // A device back from days offline: counted as stale, not in today's rates.
        let old = json!({"event": "request", "timestamp": now_s() - 3 * 86400, "host": "cdn1.example.com",
            "outcome": "5xx", "latency_ms": 1});
        let (_, body) = post(&a, "", batch(&[old]), None).await;
        assert_eq!((body["accepted"].as_u64(), body["stale"].as_u64()), (Some(0), Some(1)));

        // A signed batch may say where the device is, and weights a sampled request.
        let signed = batch(&[
            json!({"event": "request", "timestamp": now_s(), "host": "other.example.org", "outcome": "timeout",
                "latency_ms": 2000, "sample_rate": 0.5, "isp": "telecom", "region": "beijing", "convergence": false}),
            json!({"event": "host_switch", "timestamp": now_s(), "from": "cdn1.example.com", "to": "cdn2.example.com",
                "reason": "5xx", "isp": "telecom", "region": "beijing"}),
        ]);
        let t = now_s() + 600;
        let digest: String = {
            use sha2::Digest as _;
            sha2::Sha256::digest(&signed).iter().map(|b| format!("{b:02x}")).collect()
        };
        let sig = {
            use md5::Digest as _;
            let d = md5::Md5::digest(format!("{digest}-s3cr3t-secret-{t}").as_bytes());
            d.iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let (status, body) = post(&a, &format!("?account=139450&t={t}&s={sig}"), signed.clone(), None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let (status, _) =
            post(&a, &format!("?account=139450&t={t}&s={}", "0".repeat(32)), signed, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "a wrong signature");

        // A second replica on the same database: the fleet view sums both.
        let tmp_b = tempfile::tempdir().unwrap();
        let db_b = match &db {
            Db::Sqlite => vec![(
                "HTTPDNS_DATABASE_URL",
                format!("sqlite://{}", tmp.path().join("httpdns.db").display()),
            )],
            Db::Postgres(_) => vec![],
        };
        let extra: Vec<(&str, &str)> = db_b.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let b = server(&db, tmp_b.path(), &extra).await;
        let (status, _) = post(&b, "", batch(&fallbacks(1, "HTTPDNS_UNREACHABLE")), None).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        // b flushes on its own every 200 ms; a reads the store.
        let mut v = Value::Null;
        for _ in 0..50 {
            v = summary(&a, "?window=5m").await;
            if v["replicas"] == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(v["replicas"], 2, "{v}");
        let sh = place(&v, "unicom", "shanghai");
        assert_eq!(sh["requests"], 200.0, "{sh}");
        assert_eq!(sh["fallbacks"], 4.0, "three on a, one on b (the forged carrier ignored): {sh}");
        assert_eq!(sh["fallback_rate"], 0.02);
        assert_eq!(sh["top_fallback_reason"], "HTTPDNS_TIMEOUT");
        assert_eq!(sh["alert"], true, "2% of 200 requests is past 1%");
        assert_eq!(
            sh["alert_fallback_reasons"],
            json!(["HTTPDNS_TIMEOUT"]),
            "1.5% timeouts, 0.5% unreachable"
        );
        let bj = place(&v, "telecom", "beijing");
        assert_eq!(
            (bj["requests"].as_f64(), bj["errors"].as_f64()),
            (Some(2.0), Some(2.0)),
            "weighted: {bj}"
        );
        assert_eq!(bj["alert"], false, "too few requests to judge");
        let sides: BTreeMap<String, f64> = v["convergence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["convergence"].as_str().unwrap().to_owned(), s["error_rate"].as_f64().unwrap()))
            .collect();
        assert_eq!(sides.get("off"), Some(&1.0), "the switch-off side's errors apart: {v}");
        assert_eq!(sides.get("on"), Some(&0.0));
        let rows = v["events"].as_array().unwrap();
        let switch = rows.iter().find(|r| r["event"] == "host_switch").unwrap();
        assert_eq!(
            (switch["host"].as_str(), switch["reason"].as_str()),
            (Some("cdn1.example.com"), Some("5xx"))
        );
        let timeout = rows.iter().find(|r| r["reason"] == "timeout").unwrap();
        assert_eq!(timeout["host"], "other", "a host outside hostListConfig is no label: {timeout}");
        assert_eq!(timeout["mean_duration_ms"], 2000.0);

        // Filters and bad windows.
        let only = summary(&a, "?window=1h&event=host_switch").await;
        assert!(only["events"].as_array().unwrap().iter().all(|r| r["event"] == "host_switch"), "{only}");
        let (status, body) = a.admin(Method::GET, "/admin/v1/events/summary?window=30s", None).await;
        assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("window")));
        let (status, body) = a.admin(Method::GET, "/admin/v1/events/summary?event=nope", None).await;
        assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("event")));
        let unauth = a.http.get(a.url("/admin/v1/events/summary")).send().await.unwrap();
        assert_eq!(unauth.status(), StatusCode::UNAUTHORIZED);
    }
}

#[tokio::test]
async fn only_signed_events_when_auth_is_required_and_unsigned_ones_are_rate_limited() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(&Db::Sqlite, tmp.path(), &[("HTTPDNS_AUTH_REQUIRED", "true")]).await;
    let (status, body) = post(&s, "", batch(&requests(1, "ok")), None).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::FORBIDDEN, Some("UnsignedInterfaceDisabled")));

    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_API_ADDR".into(), "127.0.0.1:0".into());
    let s = Server::start_with(e, Some("[events]\nrate_per_client = 0.01\nburst = 2\n")).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(post(&s, "", batch(&requests(1, "ok")), None).await.0);
    }
    assert_eq!(statuses, [StatusCode::ACCEPTED, StatusCode::ACCEPTED, StatusCode::TOO_MANY_REQUESTS]);
    let metrics = s.text("/metrics").await;
    assert!(metrics.contains(r#"httpdns_app_events_rejected_total{reason="rate_limited"} 1"#), "{metrics}");
}

fn app_series(metrics: &str) -> HashMap<String, f64> {
    crate::promtool::app_samples(metrics)
}

#[tokio::test]
async fn the_shipped_1_percent_rules_fire_on_series_the_server_exported() {
    // Six one-minute rounds of real traffic, scraped after each: unicom/shanghai has 3% of its
    // requests falling back (HTTPDNS_TIMEOUT); telecom/beijing (a signed batch) has none;
    // mobile/guangzhou sends a few reports that weigh a million each.
    let tmp = tempfile::tempdir().unwrap();
    let s = server(&Db::Sqlite, tmp.path(), &[]).await;
    s.put_ok("/admin/v1/accounts/7", json!({"secret": "k-secret-key"})).await;
    let sign = |body: &[u8]| {
        // md5's and sha2's `Digest` are the same trait.
        use md5::Digest as _;
        let t = now_s() + 600;
        let digest: String = sha2::Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect();
        let sig: String = md5::Md5::digest(format!("{digest}-k-secret-key-{t}").as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("?account=7&t={t}&s={sig}")
    };
    let mut scrapes = vec![app_series(&s.text("/metrics").await)];
    for _ in 0..6 {
        let mut sh = requests(100, "ok");
        sh.extend(fallbacks(3, "HTTPDNS_TIMEOUT"));
        assert_eq!(post(&s, "", batch(&sh), None).await.0, StatusCode::ACCEPTED);
        let bj: Vec<Value> = requests(100, "ok")
            .into_iter()
            .map(|mut e| {
                e["isp"] = json!("telecom");
                e["region"] = json!("beijing");
                e
            })
            .collect();
        let body = batch(&bj);
        assert_eq!(post(&s, &sign(&body), body, None).await.0, StatusCode::ACCEPTED);
        // mobile/guangzhou: one failed request and one fallback a round, each signed as sampled
        // at 1e-6 (a million apiece): weight past every floor, but 6 reports of each in all, so
        // neither rule may fire for it.
        let heavy: Vec<Value> = requests(1, "timeout")
            .into_iter()
            .chain(fallbacks(1, "HTTPDNS_TIMEOUT"))
            .map(|mut e| {
                e["isp"] = json!("mobile");
                e["region"] = json!("guangzhou");
                e["sample_rate"] = json!(1e-6);
                e
            })
            .collect();
        let body = batch(&heavy);
        assert_eq!(post(&s, &sign(&body), body, None).await.0, StatusCode::ACCEPTED);
        scrapes.push(app_series(&s.text("/metrics").await));
    }
    assert!(scrapes.last().unwrap().len() >= 3, "{scrapes:?}");
    // Written out by hand (not computed): 3 of every 100 requests, the reason, the place.
    let expected = crate::promtool::Expected {
        labels: [
            ("severity", "page"),
            ("isp", "unicom"),
            ("region", "shanghai"),
            ("reason", "HTTPDNS_TIMEOUT"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        value: 0.03,
    };
    let checked = crate::promtool::check(
        tmp.path(),
        &scrapes,
        "_",
        "HttpdnsAppFallbackRateHigh",
        &[expected],
        &["HttpdnsAppErrorRateHigh", "HttpdnsLocalDnsHijacking"],
    );
    match checked {
        Ok(true) => {}
        Ok(false) => return,
        Err(report) => panic!("{report}"),
    }

    // The same figures through the fleet view.
    let v = summary(&s, "?window=10m").await;
    let sh = place(&v, "unicom", "shanghai");
    assert_eq!((sh["fallback_rate"].as_f64(), sh["alert"].as_bool()), (Some(0.03), Some(true)), "{sh}");
    assert_eq!(place(&v, "telecom", "beijing")["alert"], false);
}

#[tokio::test]
async fn the_localdns_map_names_the_carrier_whose_resolver_lies() {
    // The service: www.example.com and img.example.com on pool edge (node 127.0.0.21), its
    // loopback clients unicom in shanghai. The LocalDNS: another httpdns that answers
    // www.example.com with a "portal" 127.0.0.99 and img.example.com truthfully.
    let tmp = tempfile::tempdir().unwrap();
    let s = server(&Db::Sqlite, tmp.path(), &[("HTTPDNS_ALLOW_PRIVATE_NODE_IPS", "true")]).await;
    let node = json!({"ip": "127.0.0.21", "pool": "edge", "isp": "unicom", "region": "shanghai"});
    s.put_ok("/admin/v1/nodes/n1", node).await;
    for d in ["www.example.com", "img.example.com"] {
        s.put_ok(&format!("/admin/v1/domains/{d}"), json!({"pool": "edge", "ttl": 60})).await;
    }
    let ltmp = tempfile::tempdir().unwrap();
    let mut le = env(ltmp.path(), &Db::Sqlite);
    le.insert("HTTPDNS_DNS_ADDR".into(), "127.0.0.1:0".into());
    le.insert("HTTPDNS_ALLOW_PRIVATE_NODE_IPS".into(), "true".into());
    let local = Server::start_with(le, None).await;
    local
        .put_ok(
            "/admin/v1/nodes/portal",
            json!({"ip": "127.0.0.99", "pool": "portal", "isp": "any", "region": "any"}),
        )
        .await;
    local
        .put_ok(
            "/admin/v1/nodes/real",
            json!({"ip": "127.0.0.21", "pool": "real", "isp": "any", "region": "any"}),
        )
        .await;
    local.put_ok("/admin/v1/domains/www.example.com", json!({"pool": "portal"})).await;
    local.put_ok("/admin/v1/domains/img.example.com", json!({"pool": "real"})).await;

    let mut o = httpdns_client::ClientOptions { device_id: "device-0001".into(), ..Default::default() };
    o.resolver.service.servers = vec![s.base.parse().unwrap()];
    o.resolver.local_dns = httpdns_client::LocalDns::Servers(vec![local.dns.unwrap()]);
    o.resolver.allow_private = true;
    o.events = Some(httpdns_client::EventOptions {
        localdns_sample_rate: 1.0,
        request_sample_rate: 1.0,
        ..Default::default()
    });
    let client = httpdns_client::CdnClient::new(o).unwrap();
    for name in ["www.example.com", "img.example.com"] {
        let r = client.resolver().resolve(name).await.unwrap();
        assert_eq!(r.path, httpdns_client::Path::HttpDns);
    }
    let reporter = client.events().unwrap();
    // The comparisons run on tasks of their own; wait (bounded) until both are queued.
    for _ in 0..50 {
        if reporter.stats().recorded >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(reporter.flush().await.unwrap(), 2, "{:?}", reporter.stats());

    let (status, map) = s.admin(Method::GET, "/admin/v1/localdns/map?window=1h", None).await;
    assert_eq!(status, StatusCode::OK, "{map}");
    let sh =
        map["map"].as_array().unwrap().iter().find(|p| p["isp"] == "unicom" && p["region"] == "shanghai");
    let sh = sh.unwrap_or_else(|| panic!("{map}"));
    assert_eq!(
        (sh["reports"].as_f64(), sh["hijacked"].as_f64(), sh["consistent"].as_f64()),
        (Some(2.0), Some(1.0), Some(1.0)),
        "{sh}"
    );
    assert_eq!(sh["hijacked_rate"], 0.5);
    let metrics = s.text("/metrics").await;
    assert!(
        metrics.contains(
            r#"httpdns_app_events_total{convergence="unknown",event="localdns_compare",isp="unicom",reason="hijacked",region="shanghai"} 1"#
        ),
        "{metrics}"
    );
    let (status, _) = s.admin(Method::GET, "/admin/v1/localdns/map?window=0h", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

// The promtool helper's own arithmetic (shared with the drill).
#[test]
fn go_percentages() {
    assert_eq!(crate::promtool::humanize_percentage(0.03), "3%");
    assert_eq!(crate::promtool::humanize_percentage(0.030000000000000002), "3%");
    assert_eq!(crate::promtool::humanize_percentage(0.153846), "15.38%");
    assert_eq!(crate::promtool::humanize_percentage(1.0), "100%");
    assert_eq!(crate::promtool::humanize_percentage(0.0123456), "1.235%");
}

#[test]
fn the_rule_arithmetic() {
    let mut last = HashMap::new();
    let s = |event: &str, isp: &str, reason: &str| {
        format!(
            r#"httpdns_app_events_total{{convergence="on",event="{event}",isp="{isp}",reason="{reason}",region="r"}}"#
        )
    };
    last.insert(s("request", "a", "ok"), 100.0);
    last.insert(s("dns_fallback", "a", "HTTPDNS_TIMEOUT"), 2.0);
    last.insert(s("dns_fallback", "a", "HTTPDNS_ERROR"), 1.0);
    last.insert(s("request", "b", "ok"), 50.0);
    last.insert(s("dns_fallback", "b", "HTTPDNS_TIMEOUT"), 25.0);
    // Place c: a million weighted requests, half falling back, from 19 reports: too few.
    last.insert(s("request", "c", "ok"), 1e6);
    last.insert(s("dns_fallback", "c", "HTTPDNS_TIMEOUT"), 5e5);
    let reports = |isp: &str, n: f64| {
        (format!(r#"httpdns_app_event_reports_total{{event="request",isp="{isp}",region="r"}}"#), n)
    };
    last.extend([reports("a", 100.0), reports("b", 50.0), reports("c", 19.0)]);
    let alerts = crate::promtool::fallback_alerts(&last);
    assert_eq!(alerts.len(), 1, "1% exactly does not fire; 50 requests are too few; 19 reports are too few");
    assert_eq!(alerts[0].labels["reason"], "HTTPDNS_TIMEOUT");
    assert_eq!(alerts[0].value, 0.02);
}

#[tokio::test]
async fn the_series_gives_each_place_its_minutes_the_busiest_first_and_folds_the_rest() {
    for (db, _guard) in backends("events_series").await {
        let tmp = tempfile::tempdir().unwrap();
        let s = server(&db, tmp.path(), &[]).await;
        s.put_ok("/admin/v1/networks/127.0.0.2%2F32", json!({"isp": "telecom", "region": "beijing"})).await;
        s.put_ok("/admin/v1/networks/127.0.0.3%2F32", json!({"isp": "mobile", "region": "guangdong"})).await;
        let from = |n: u8| {
            httpdns_test_support::http::client_builder()
                .local_address(std::net::IpAddr::from([127, 0, 0, n]))
                .build()
                .unwrap()
        };
        let send = |client: reqwest::Client, events: Vec<Value>| {
            let url = s.url("/app/events");
            async move {
                let resp = client.post(url).body(batch(&events)).send().await.unwrap();
                assert_eq!(resp.status(), StatusCode::ACCEPTED);
            }
        };
        // unicom/shanghai: 100 requests, 2 fallbacks, a host switch; telecom/beijing: 50
        // requests, 10 of them timeouts; mobile/guangdong: 10 requests.
        let mut sh = requests(100, "ok");
        sh.extend(fallbacks(2, "HTTPDNS_TIMEOUT"));
        sh.push(json!({"event": "host_switch", "timestamp": now_s(), "from": "cdn1.example.com",
            "to": "cdn2.example.com", "reason": "5xx"}));
        send(from(1), sh).await;
        let mut bj = requests(40, "ok");
        bj.extend(requests(10, "timeout"));
        send(from(2), bj).await;
        send(from(3), requests(10, "ok")).await;

        let get = |q: &'static str| {
            let s = &s;
            async move { s.admin(Method::GET, &format!("/admin/v1/events/series{q}"), None).await }
        };
        let (status, v) = get("?window=1h").await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!((v["step_s"].as_i64(), v["t"].as_array().unwrap().len()), (Some(60), 60), "{v}");
        assert_eq!(v["alert_rate"], 0.01);
        let t = v["t"].as_array().unwrap();
        assert_eq!(t[1].as_i64().unwrap() - t[0].as_i64().unwrap(), 60);
        assert_eq!(v["from"], t[0]);
        let places: Vec<(&str, &str)> = v["places"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["isp"].as_str().unwrap(), p["region"].as_str().unwrap()))
            .collect();
        assert_eq!(
            places,
            [("unicom", "shanghai"), ("telecom", "beijing"), ("mobile", "guangdong")],
            "busiest first"
        );
        assert_eq!(v["others"], Value::Null);
        let sum = |p: &Value, f: &str| -> f64 {
            let series = p["series"][f].as_array().unwrap();
            assert_eq!(series.len(), 60, "one value per bucket");
            series.iter().map(|x| x.as_f64().unwrap()).sum()
        };
        let (shp, bjp) = (&v["places"][0], &v["places"][1]);
        assert_eq!(
            (sum(shp, "requests"), sum(shp, "errors"), sum(shp, "fallbacks"), sum(shp, "host_switches")),
            (100.0, 0.0, 2.0, 1.0),
            "{shp}"
        );
        assert_eq!(
            (sum(bjp, "requests"), sum(bjp, "errors"), bjp["errors"].as_f64()),
            (50.0, 10.0, Some(10.0))
        );
        // Everything landed in the last minute or two (the test may cross a minute).
        let last: f64 =
            shp["series"]["requests"].as_array().unwrap()[58..].iter().map(|x| x.as_f64().unwrap()).sum();
        assert_eq!(last, 100.0);

        // Folded: the third place is summed under `others`.
        let (_, v) = get("?window=1h&top=2").await;
        assert_eq!(v["places"].as_array().unwrap().len(), 2, "{v}");
        assert_eq!((v["others"]["places"].as_i64(), v["others"]["requests"].as_f64()), (Some(1), Some(10.0)));
        // Buckets: given, and chosen to fit the window.
        let (_, v) = get("?window=1h&step=5m").await;
        assert_eq!((v["step_s"].as_i64(), v["t"].as_array().unwrap().len()), (Some(300), 12));
        assert_eq!(v["places"][0]["series"]["requests"].as_array().unwrap().len(), 12);
        let (_, v) = get("?window=1d").await;
        assert_eq!((v["step_s"].as_i64(), v["t"].as_array().unwrap().len()), (Some(900), 96));
        let (_, v) = get("?window=7d").await;
        assert_eq!((v["step_s"].as_i64(), v["t"].as_array().unwrap().len()), (Some(10800), 56));
        // Bounded: refused with the field named.
        for (q, field) in [
            ("?window=7d&step=1m", "step"),
            ("?window=1h&step=2h", "step"),
            ("?window=1h&step=30s", "step"),
            ("?top=0", "top"),
            ("?top=21", "top"),
            ("?window=30s", "window"),
        ] {
            let (status, body) = get(q).await;
            assert_eq!(
                (status, body["field"].as_str()),
                (StatusCode::BAD_REQUEST, Some(field)),
                "{q}: {body}"
            );
        }
    }
}
