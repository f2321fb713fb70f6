//! Guarded rollouts (issue 42) on the real server with a short tick: one promotes itself on
//! good events, one rolls itself back on bad ones (events posted by the test per side).

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{Db, Server, TOKEN};

async fn start() -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_CONTROL_TICK_MS".into(), "200".into());
    (Server::start_with(env, None).await, tmp)
}

async fn publish(s: &Server, host: &str) -> i64 {
    let doc = json!({"mergeHostConfigs": [], "hostListConfig": [{"host": host, "rate": 1}],
        "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []});
    let resp = s
        .http
        .put(s.url("/admin/v1/config/cdn"))
        .bearer_auth(TOKEN)
        .header("if-match", "*")
        .body(doc.to_string());
    let resp = resp.send().await.unwrap();
    assert!(resp.status().is_success());
    resp.json::<Value>().await.unwrap()["configVersion"].as_i64().unwrap()
}

/// The versions 200 devices get from the per-device POST.
async fn versions(s: &Server) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..200 {
        let body = json!({"module": "cdn", "deviceId": format!("device-{i}")});
        let resp = s.http.post(s.url("/app/config-center/module-config")).json(&body).send().await.unwrap();
        out.push(resp.json::<Value>().await.unwrap()["configVersion"].as_i64().unwrap());
    }
    out
}

/// `n` request events of devices on `version`, `bad` of them timing out.
async fn events(s: &Server, version: i64, n: usize, bad: usize) {
    let now = httpdns_core::clock::unix_s();
    let list: Vec<Value> = (0..n)
        .map(|i| {
            json!({"event": "request", "timestamp": now, "host": "a.example.com",
                "outcome": if i < bad { "timeout" } else { "ok" }, "latency_ms": 20, "config_version": version})
        })
        .collect();
    let resp = s.http.post(s.url("/app/events")).json(&json!({ "events": list })).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
}

async fn rollout(s: &Server) -> Value {
    let (status, body) = s.admin(Method::GET, "/admin/v1/config/cdn/rollout", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

const SPEC: &str = r#"{"steps": [0.5, 1], "step_seconds": 1, "max_error_rate": 0.05, "max_fallback_rate": 0.05, "min_requests": 20}"#;

#[tokio::test]
async fn a_rollout_promotes_itself_on_good_events() {
    let (s, _tmp) = start().await;
    let v1 = publish(&s, "a.example.com").await;
    let (status, body) = s.put("/admin/v1/config/cdn/rollout", serde_json::from_str(SPEC).unwrap()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        (body["state"].as_str(), body["waiting_for_publish"].as_bool()),
        (Some("running"), Some(true))
    );
    let v2 = publish(&s, "b.example.com").await;

    // Half the devices (by their bucket) get the new version; the rest and the GET keep v1.
    let got = versions(&s).await;
    let new = got.iter().filter(|v| **v == v2).count();
    assert!((70..=130).contains(&new), "{new} of 200 on the new version");
    assert!(got.iter().all(|v| *v == v1 || *v == v2));
    assert_eq!(versions(&s).await, got, "a device stays on its side");
    let plain = s.get("/app/config-center/module-config?module=cdn").await;
    assert_eq!(plain.headers()["x-config-version"], v1.to_string().as_str());

    // Good events on both sides: each step ends after a second with evidence, then done.
    let deadline = Instant::now() + Duration::from_secs(20);
    let last = loop {
        events(&s, v2, 30, 0).await;
        events(&s, v1, 30, 0).await;
        let r = rollout(&s).await;
        if r["state"] == "done" || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(last["state"], "done", "{last}");
    assert_eq!(last["share"], 1.0);
    assert!(versions(&s).await.iter().all(|v| *v == v2), "every device on the new version");
    assert!(
        crate::support::eventually(Duration::from_secs(2), || async {
            s.get("/app/config-center/module-config?module=cdn").await.headers()["x-config-version"]
                == v2.to_string().as_str()
        })
        .await
    );
    let (_, audit) = s.admin(Method::GET, "/admin/v1/audit?after=0&limit=100", None).await;
    let steps = audit["items"].as_array().unwrap().iter().filter(|i| i["actor"] == "rollout").count();
    assert_eq!(steps, 2, "one entry per automatic step: {audit}");
}

#[tokio::test]
async fn a_rollout_rolls_itself_back_on_bad_events_and_says_why() {
    let (s, _tmp) = start().await;
    let v1 = publish(&s, "a.example.com").await;
    s.put_ok("/admin/v1/config/cdn/rollout", serde_json::from_str(SPEC).unwrap()).await;
    let v2 = publish(&s, "b.example.com").await;
    // An operator may pause and resume; the wrong action for the state is a 409 naming it.
    let (status, body) = s.admin(Method::POST, "/admin/v1/config/cdn/rollout/pause", None).await;
    assert_eq!((status, body["state"].as_str()), (StatusCode::OK, Some("paused")));
    let (status, body) = s.admin(Method::POST, "/admin/v1/config/cdn/rollout/pause", None).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::CONFLICT, Some("state")));
    let (status, body) = s.admin(Method::POST, "/admin/v1/config/cdn/rollout/resume", None).await;
    assert_eq!((status, body["state"].as_str()), (StatusCode::OK, Some("running")));

    // The new side times out a third of its requests; the old side is fine.
    let deadline = Instant::now() + Duration::from_secs(20);
    let last = loop {
        events(&s, v2, 30, 10).await;
        events(&s, v1, 30, 0).await;
        let r = rollout(&s).await;
        if r["state"] == "rolled_back" || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(last["state"], "rolled_back", "{last}");
    let reason = last["reason"].as_str().unwrap();
    assert!(reason.contains("error rate") && reason.contains("unknown/unknown"), "{reason}");
    assert!(last["new"]["error_rate"].as_f64().unwrap() > 0.05 && last["old"]["error_rate"] == 0.0, "{last}");

    // The previous content, as a new, higher version, for everyone.
    let (_, history) = s.admin(Method::GET, "/admin/v1/config/cdn/versions", None).await;
    let newest = &history["items"][0];
    assert_eq!(
        (newest["author"].as_str(), newest["rollback_of"].as_i64()),
        (Some("rollout"), Some(v1)),
        "{history}"
    );
    let v3 = newest["version"].as_i64().unwrap();
    assert!(v3 > v2);
    assert!(versions(&s).await.iter().all(|v| *v == v3));
    let (_, audit) = s.admin(Method::GET, "/admin/v1/audit?limit=1", None).await;
    assert_eq!(audit["items"][0]["actor"], "rollout");
    assert_eq!(
        (audit["items"][0]["revision_before"].as_i64(), audit["items"][0]["revision_after"].as_i64()),
        (Some(v2), Some(v3))
    );
    // Finished: the operator's actions are refused by state.
    let (status, _) = s.admin(Method::POST, "/admin/v1/config/cdn/rollout/promote", None).await;
    assert_eq!(status, StatusCode::CONFLICT);
}
