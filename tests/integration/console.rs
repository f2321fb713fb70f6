//! The admin console in a real headless browser: Debian's chromium driven by playwright-core
//! (`tests/console/console.mjs`) against a server started here with a mirror, an origin, events
//! and a LocalDNS report to show, and a past hour of events for the charts. Screenshots of every
//! page and of each chart go to `HTTPDNS_CONSOLE_SCREENSHOTS` (docs/console/ when regenerating
//! the documentation), else a temporary directory.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::origin::RunningOrigin;
use crate::support::{env, Db, Server, TOKEN};

/// Why the browser suite cannot run here, if it cannot.
fn missing_tools(dir: &Path) -> Option<String> {
    if Command::new("node").arg("--version").output().is_err() {
        return Some("node is not installed".into());
    }
    if !dir.join("node_modules/playwright-core").exists() {
        return Some(format!("playwright-core is not installed: npm ci --prefix {}", dir.display()));
    }
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        return Some(format!("{chromium} is missing: apt-get install chromium"));
    }
    None
}

/// Another replica's rows of the 59 minutes before this one: requests, errors, fallbacks and
/// host switches for the four places the test posts from (fallback rates around the 1% alert
/// level), and LocalDNS verdicts for a few more provinces.
async fn seed_history(url: &str) {
    use httpdns_store::events::{EventCounts, EventKey, EventRow};
    let store = httpdns_store::Store::connect(url).await.unwrap();
    let now = (httpdns_core::clock::unix_s() / 60) as i64;
    let row = |minute: i64, event: &str, isp: &str, region: &str, reason: &str, count: f64| EventRow {
        minute,
        key: EventKey {
            event: event.into(),
            isp: isp.into(),
            region: region.into(),
            reason: reason.into(),
            host: if event == "request" { "cdn.example.com".into() } else { String::new() },
            group: "on".into(),
            cohort: "unknown".into(),
        },
        counts: EventCounts { count, duration_ms_sum: 0.0, duration_count: 0.0 },
    };
    let mut rows = Vec::new();
    for (p, (isp, region, requests)) in [
        ("unicom", "shanghai", 900.0),
        ("telecom", "guangdong", 700.0),
        ("mobile", "beijing", 400.0),
        ("unicom", "sg", 120.0),
    ]
    .into_iter()
    .enumerate()
    {
        for i in 1..60i64 {
            let minute = now - i;
            // A slow wave per place, one of them climbing past 1% in the last quarter hour.
            let wave = ((i as f64 + 7.0 * p as f64) / 6.0).sin();
            let fallback = requests * (0.005 + 0.003 * wave + if p == 1 && i < 15 { 0.012 } else { 0.0 });
            let errors = (requests * (0.002 + 0.0015 * wave.abs())).round();
            let switches = (requests * 0.001 * (1.0 + wave)).round();
            for (event, reason, n) in [
                ("request", "ok", requests - errors),
                ("request", "timeout", errors),
                ("dns_fallback", "HTTPDNS_TIMEOUT", fallback.round()),
                ("host_switch", "5xx", switches),
            ] {
                if n > 0.0 {
                    rows.push(row(minute, event, isp, region, reason, n));
                }
            }
        }
    }
    for (isp, region, consistent, hijacked, cross) in [
        ("telecom", "zhejiang", 300.0, 0.0, 2.0),
        ("unicom", "sichuan", 200.0, 30.0, 0.0),
        ("mobile", "hubei", 150.0, 6.0, 4.0),
        ("telecom", "jiangsu", 250.0, 1.0, 0.0),
        ("cernet", "us", 40.0, 0.0, 0.0),
    ] {
        for (verdict, n) in [("consistent", consistent), ("hijacked", hijacked), ("cross_carrier", cross)] {
            if n > 0.0 {
                rows.push(row(now - 5, "localdns_compare", isp, region, verdict, n));
            }
        }
    }
    store.save_event_minutes("history", &rows).await.unwrap();

    // The policy page's place: unicom/shanghai's devices split by cohort over the hour, an
    // outage of the ramped side from 40 to 25 minutes ago, and the controller's steps.
    let mut split = Vec::new();
    for i in 1..60i64 {
        let outage = (25..40).contains(&i);
        for (cohort, requests, fallbacks) in
            [("on", 300.0, if outage { 90.0 } else { 1.0 }), ("off", 200.0, 0.0)]
        {
            let mut r = row(now - i, "request", "unicom", "shanghai", "ok", requests);
            r.key.cohort = cohort.into();
            split.push(r);
            if fallbacks > 0.0 {
                let mut f = row(now - i, "dns_fallback", "unicom", "shanghai", "HTTPDNS_TIMEOUT", fallbacks);
                f.key.cohort = cohort.into();
                split.push(f);
            }
        }
    }
    store.save_event_minutes("history-split", &split).await.unwrap();
    use httpdns_store::policy::{PlaceRow, StepRow};
    let ms = |minutes_ago: i64| (now - minutes_ago) * 60_000;
    let step = |ago: i64, from: &str, to: &str, from_share: f64, to_share: f64, why: &str| StepRow {
        at: ms(ago),
        isp: "unicom".into(),
        region: "shanghai".into(),
        from_state: from.into(),
        to_state: to.into(),
        from_share,
        to_share,
        reason: why.into(),
        versions: "cdn:2".into(),
    };
    let steps = [
        step(
            38,
            "healthy",
            "degraded",
            1.0,
            0.01,
            "failure rate 30.00% of 300 requests passed the place's threshold 5.00%",
        ),
        step(20, "degraded", "recovering", 0.01, 0.05, "the probe share succeeds again"),
        step(10, "recovering", "recovering", 0.05, 0.25, "the 5.00% step held"),
    ];
    let place = PlaceRow {
        isp: "unicom".into(),
        region: "shanghai".into(),
        state: "recovering".into(),
        step: 2,
        share: 0.25,
        since: ms(10),
        threshold: 0.05,
        rates: "{}".into(),
        updated_at: ms(0),
    };
    store.policy_save(&[place], &steps).await.unwrap();
}

#[tokio::test]
async fn the_console_signs_in_changes_answers_configs_and_copies_and_refuses_forgeries() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console");
    if let Some(why) = missing_tools(&dir) {
        httpdns_test_support::skipped("the console in a browser", &why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    let s = Server::start_with(e, None).await;
    s.put_ok("/admin/v1/networks/1.0.2.0%2F24", json!({"isp": "unicom", "region": "shanghai"})).await;
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "shanghai"})).await;

    // A stored copy for the mirror page to find and purge.
    let origin = RunningOrigin::start().await;
    origin.origin.put("/bucket/a.txt", b"hello from the origin".to_vec(), "text/plain");
    s.put_ok(
        "/admin/v1/mirror/rules/image",
        json!({"path_prefix": "/image", "origin": format!("{}/bucket", origin.url())}),
    )
    .await;
    let got = s.http.get(s.mirror_url("/image/a.txt")).send().await.unwrap();
    assert_eq!(got.status(), StatusCode::OK);
    assert_eq!(got.text().await.unwrap(), "hello from the origin");
    // Two more rules for the mirror chart: one served from its copy, one whose origin fails.
    origin.origin.mode("/bucket/broken.txt", crate::origin::Mode::Status(500));
    for (rule, prefix) in [("docs", "/docs"), ("assets", "/assets")] {
        s.put_ok(
            &format!("/admin/v1/mirror/rules/{rule}"),
            json!({"path_prefix": prefix, "origin": format!("{}/bucket", origin.url())}),
        )
        .await;
    }
    for path in [
        "/image/a.txt",
        "/docs/a.txt",
        "/docs/a.txt",
        "/docs/a.txt",
        "/assets/broken.txt",
        "/assets/broken.txt",
    ] {
        s.http.get(s.mirror_url(path)).send().await.unwrap().bytes().await.unwrap();
    }
    let (status, _) = s.admin(reqwest::Method::GET, "/admin/v1/mirror/objects/image/a.txt", None).await;
    assert_eq!(status, StatusCode::OK, "the copy is stored before the page looks");

    // Events for the events and LocalDNS pages, from four places (by the client's address):
    // three provinces of the map and one region the map does not place.
    for (net, isp, region) in [
        ("127.0.0.2%2F32", "telecom", "guangdong"),
        ("127.0.0.3%2F32", "mobile", "beijing"),
        ("127.0.0.4%2F32", "unicom", "sg"),
    ] {
        s.put_ok(&format!("/admin/v1/networks/{net}"), json!({"isp": isp, "region": region})).await;
    }
    let now = httpdns_core::clock::unix_s();
    let compare = |localdns: &str| json!({"event": "localdns_compare", "timestamp": now, "host": "www.example.com", "localdns": [localdns], "httpdns": ["1.1.1.1"]});
    let requests = |n: usize, outcome: &str| -> Vec<serde_json::Value> {
        (0..n)
            .map(|_| json!({"event": "request", "timestamp": now, "host": "cdn.example.com", "outcome": outcome, "latency_ms": 30}))
            .collect()
    };
    let fallback = json!({"event": "dns_fallback", "timestamp": now, "fallback_reason": "HTTPDNS_TIMEOUT", "fallback_duration_ms": 120});
    let mut shanghai = vec![fallback.clone(), compare("1.1.1.1")];
    shanghai.extend(requests(20, "ok"));
    let mut guangdong = vec![fallback.clone(), fallback, compare("8.8.8.8"), compare("1.1.1.1")];
    guangdong.extend(requests(27, "ok"));
    guangdong.extend(requests(3, "timeout"));
    let mut beijing = requests(10, "ok");
    beijing.push(compare("1.1.1.1"));
    let mut sg = requests(5, "ok");
    sg.push(compare("8.8.8.8"));
    for (n, events) in [(1u8, shanghai), (2, guangdong), (3, beijing), (4, sg)] {
        let client = httpdns_test_support::http::client_builder()
            .local_address(std::net::IpAddr::from([127, 0, 0, n]))
            .build()
            .unwrap();
        let posted = client
            .post(s.url("/app/events"))
            .body(json!({ "events": events }).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(posted.status(), StatusCode::ACCEPTED, "from 127.0.0.{n}");
    }
    // And the past hour as another replica wrote it, for the chart to show time: the rows a
    // replica flushes, into the same database.
    seed_history(&format!("sqlite://{}", tmp.path().join("httpdns.db").display())).await;

    let shots = std::env::var("HTTPDNS_CONSOLE_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().join("shots"));
    let (status, viewer) = s.put("/admin/v1/tokens/viewer-1", json!({"role": "viewer"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let viewer = viewer["token"].as_str().unwrap().to_owned();
    let base = s.base.clone();
    let script = dir.join("console.mjs");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .env("BASE", base)
            .env("TOKEN", TOKEN)
            .env("VIEWER", viewer)
            .env("SHOTS", &shots)
            .output()
            .unwrap()
    });
    let out = tokio::time::timeout(Duration::from_secs(240), out)
        .await
        .expect("the browser run is bounded")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the browser run failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("console: all checks passed"), "{stdout}");

    // What the page did, read back through the API.
    let (status, node) = s.admin(reqwest::Method::GET, "/admin/v1/nodes/edge-1", None).await;
    assert_eq!((status, node["ip"].as_str()), (StatusCode::OK, Some("1.1.1.1")), "{node}");
    let (_, cfg) = s.admin(reqwest::Method::GET, "/admin/v1/config/cdn", None).await;
    assert_eq!(
        cfg["configVersion"], 5,
        "three publishes from the page (one a rollback), one concurrent, one under the rollout armed in the page: {cfg}"
    );
    let (_, rollout) = s.admin(reqwest::Method::GET, "/admin/v1/config/cdn/rollout", None).await;
    assert_eq!(
        (rollout["state"].as_str(), rollout["version"].as_i64()),
        (Some("running"), Some(5)),
        "{rollout}"
    );
    // Purged through the page (the page saw it gone), then filled again by its prefetch.
    let (status, _) = s.admin(reqwest::Method::GET, "/admin/v1/mirror/objects/image/a.txt", None).await;
    assert_eq!(status, StatusCode::OK, "prefetched through the page");
}
