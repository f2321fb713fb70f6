//! The client commands of the `httpdns` binary against a running `httpdns serve`.

use std::collections::HashMap;
use std::process::Command;

use serde_json::json;

use crate::support::{Db, Process, TOKEN};

fn run(args: &[&str]) -> (bool, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_httpdns")).args(args).env_remove("RUST_BACKTRACE").output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn resolve_and_get_against_a_running_server() {
    let tmp = tempfile::tempdir().unwrap();
    let env: HashMap<String, String> = crate::support::env(tmp.path(), &Db::Sqlite);
    let server = Process::spawn(&env, tmp.path());
    let http = httpdns_test_support::http::client();
    let put = |path: &str, body: serde_json::Value| {
        let req = http.put(format!("{}{path}", server.base)).bearer_auth(TOKEN).body(body.to_string());
        async move { assert!(req.send().await.unwrap().status().is_success()) }
    };
    put(
        "/admin/v1/nodes/n1",
        json!({"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing"}),
    )
    .await;
    put("/admin/v1/domains/www.example.com", json!({"pool": "edge", "ttl": 60})).await;
    let host = server.base.trim_start_matches("http://").to_owned();
    put(
        "/admin/v1/config/cdn",
        json!({"mergeHostConfigs": [], "hostListConfig": [{"host": host, "rate": 1}],
            "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []}),
    )
    .await;
    // Writes reach the answering snapshot within the sync interval.
    let mut out = String::new();
    for _ in 0..100 {
        let (ok, stdout, _) = run(&["resolve", "--server", &server.base, "www.example.com"]);
        out = stdout;
        if ok && out.contains("1.1.1.1") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(out.trim(), "www.example.com\t1.1.1.1\tttl=60s\tpath=httpdns");

    // A loopback answer from LocalDNS is dropped for a public client...
    let (ok, _, err) = run(&["resolve", "--server", "http://127.0.0.1:1", "localhost"]);
    assert!(!ok && err.contains("no usable address"), "{err}");
    // ...and accepted in intranet mode, saying which path answered.
    let (ok, out, _) = run(&["resolve", "--server", "http://127.0.0.1:1", "--allow-private", "localhost"]);
    assert!(ok && out.contains("path=localdns"), "{out}");

    // `get` through the config's host list: the body on stdout, the route on stderr.
    let (ok, out, err) = run(&[
        "get",
        "--config-url",
        &server.base,
        "--device-id",
        "device-0001",
        &format!("{}/healthz", server.base),
    ]);
    assert!(ok, "{err}");
    assert_eq!(out, r#"{"status":"ok"}"#);
    assert!(err.contains(&format!("served by {host} (Unified route), status 200")), "{err}");

    // What `get` reported, sent before it exits and counted by the server.
    let (ok, _, err) = run(&[
        "get",
        "--server",
        &server.base,
        "--config-url",
        &server.base,
        &format!("{}/healthz", server.base),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("events: recorded 1 (request 1), sent 1, queued 0"), "{err}");
    let summary: serde_json::Value = http
        .get(format!("{}/admin/v1/events/summary?window=5m&event=request", server.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let row = &summary["events"][0];
    assert_eq!(
        (row["reason"].as_str(), row["host"].as_str()),
        (Some("ok"), Some(host.as_str())),
        "{summary}"
    );
}
