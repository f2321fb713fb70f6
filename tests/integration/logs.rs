//! Structured logs: with `HTTPDNS_LOG_FORMAT=json` every line is a JSON object, and lines
//! logged while serving an admin request carry its request id (the client's `X-Request-Id`
//! when it sent one, else a generated one, returned in the response).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{env, Db, TOKEN};

#[tokio::test]
async fn json_logs_carry_the_request_id() {
    let tmp = tempfile::tempdir().unwrap();
    let log_path = tmp.path().join("stderr.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_httpdns"))
        .arg("serve")
        .envs(env(tmp.path(), &Db::Sqlite))
        .env("HTTPDNS_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let lines = |path: &std::path::Path| -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let api = loop {
        if let Some(addr) = lines(&log_path)
            .iter()
            .find(|l| l["fields"]["message"] == "Listening." && l["fields"]["role"] == "api")
            .and_then(|l| l["fields"]["addr"].as_str().map(str::to_owned))
        {
            break addr;
        }
        assert!(Instant::now() < deadline, "httpdns did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let http = httpdns_test_support::http::client();
    let resp = http
        .put(format!("http://{api}/admin/v1/nodes/n1"))
        .bearer_auth(TOKEN)
        .header("x-request-id", "drill-42")
        .body(r#"{"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "drill-42");
    // Without one, an id is generated and returned.
    let resp = http.get(format!("http://{api}/healthz")).send().await.unwrap();
    let generated = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(!generated.is_empty() && generated != "drill-42");

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let all = lines(&log_path);
        let tagged: Vec<&Value> = all.iter().filter(|l| l["span"]["id"] == "drill-42").collect();
        let write =
            tagged.iter().any(|l| l["fields"]["message"] == "Admin write." && l["fields"]["kind"] == "node");
        let access =
            tagged.iter().any(|l| l["fields"]["message"] == "Admin request." && l["fields"]["status"] == 201);
        if write && access {
            break;
        }
        assert!(Instant::now() < deadline, "tagged lines: {tagged:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}
