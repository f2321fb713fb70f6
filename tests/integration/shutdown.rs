//! SIGTERM while 200 requests are in flight: 100 `/d` requests waiting on a slow upstream DNS
//! server and 100 mirror requests waiting on a slow origin. None may fail, and the process
//! exits cleanly.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::origin::{Mode, RunningOrigin};
use crate::support::{env, eventually, Db, Process, TOKEN};
use crate::upstream::{fake_upstream, Seen};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_during_200_in_flight_requests_loses_none() {
    let seen: Seen = Arc::default();
    let (up, _dns) =
        fake_upstream("127.0.0.1:0".parse().unwrap(), 300, Duration::from_millis(600), seen.clone()).await;
    let origin = RunningOrigin::start().await;
    for i in 0..100 {
        origin.origin.put(&format!("/o/{i}.bin"), vec![i as u8; 4096 + i], "application/octet-stream");
        origin.origin.mode(&format!("/o/{i}.bin"), Mode::Stall(Duration::from_millis(600)));
    }
    origin.origin.put("/o/warm.bin", b"warm".to_vec(), "application/octet-stream");

    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    e.insert("HTTPDNS_UPSTREAMS".into(), up.to_string());
    let p = Process::spawn(&e, tmp.path());
    let mirror = format!("http://{}", p.mirror.expect("mirror listener"));
    let http = httpdns_test_support::http::client();
    let resp = http
        .put(format!("{}/admin/v1/mirror/rules/files", p.base))
        .bearer_auth(TOKEN)
        .body(json!({"path_prefix": "/files", "origin": format!("{}/o", origin.url())}).to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    assert!(
        eventually(Duration::from_secs(5), || async {
            http.get(format!("{mirror}/files/warm.bin")).send().await.is_ok_and(|r| r.status() == 200)
        })
        .await,
        "the rule is in force"
    );

    let mut tasks = Vec::new();
    for i in 0..100 {
        let (c, url) = (http.clone(), format!("{}/d?dn=n{i}.partner.example&ip=1.0.2.7", p.base));
        tasks.push(tokio::spawn(async move {
            let r = c.get(url).send().await.map_err(|e| e.to_string())?;
            let (status, body) = (r.status(), r.text().await.map_err(|e| e.to_string())?);
            if status == 200 && body == "9.9.9.1" {
                Ok(())
            } else {
                Err(format!("/d: {status} {body:?}"))
            }
        }));
        let (c, url) = (http.clone(), format!("{mirror}/files/{i}.bin"));
        tasks.push(tokio::spawn(async move {
            let r = c.get(url).send().await.map_err(|e| e.to_string())?;
            let (status, body) = (r.status(), r.bytes().await.map_err(|e| e.to_string())?);
            if status == 200 && body.len() == 4096 + i && body.iter().all(|b| *b == i as u8) {
                Ok(())
            } else {
                Err(format!("mirror: {status}, {} bytes", body.len()))
            }
        }));
    }
    // Every request has reached its slow upstream or origin: all 200 are in flight.
    let (seen2, origin2) = (seen.clone(), origin.origin.clone());
    assert!(
        eventually(Duration::from_secs(10), || {
            let (s, o) = (seen2.clone(), origin2.clone());
            async move { s.lock().len() >= 100 && (0..100).all(|i| o.requests(&format!("/o/{i}.bin")) >= 1) }
        })
        .await,
        "all requests in flight"
    );
    let pid = p.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());

    let mut failures = Vec::new();
    for t in tasks {
        if let Err(e) = t.await.unwrap() {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 200 in-flight requests failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let status = tokio::task::spawn_blocking(move || p.terminate()).await.unwrap();
    assert!(status.success(), "clean exit: {status:?}");
}
