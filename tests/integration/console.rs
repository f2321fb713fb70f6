//! The admin console in a real headless browser: Debian's chromium driven by playwright-core
//! (`tests/console/console.mjs`) against a server started here with a mirror, an origin, events
//! and a LocalDNS report to show. Screenshots of every page go to `HTTPDNS_CONSOLE_SCREENSHOTS`
//! (docs/console/ when regenerating the documentation), else a temporary directory.

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
    let (status, _) = s.admin(reqwest::Method::GET, "/admin/v1/mirror/objects/image/a.txt", None).await;
    assert_eq!(status, StatusCode::OK, "the copy is stored before the page looks");

    // Events for the events and LocalDNS pages.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mut events = vec![
        json!({"event": "dns_fallback", "timestamp": now, "fallback_reason": "HTTPDNS_TIMEOUT", "fallback_duration_ms": 120}),
        json!({"event": "localdns_compare", "timestamp": now, "host": "www.example.com", "localdns": ["1.1.1.1"], "httpdns": ["1.1.1.1"]}),
    ];
    events.extend((0..20).map(|_| json!({"event": "request", "timestamp": now, "host": "cdn.example.com", "outcome": "ok", "latency_ms": 30})));
    let posted =
        s.http.post(s.url("/app/events")).body(json!({ "events": events }).to_string()).send().await.unwrap();
    assert_eq!(posted.status(), StatusCode::ACCEPTED);

    let shots = std::env::var("HTTPDNS_CONSOLE_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().join("shots"));
    let base = s.base.clone();
    let script = dir.join("console.mjs");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .env("BASE", base)
            .env("TOKEN", TOKEN)
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
        cfg["configVersion"], 4,
        "three publishes from the page (one a rollback), one concurrent: {cfg}"
    );
    let (status, _) = s.admin(reqwest::Method::GET, "/admin/v1/mirror/objects/image/a.txt", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "purged through the page");
}
