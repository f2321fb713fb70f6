//! Adoption (issue 42): distinct devices per config version, from the per-device POSTs, within
//! the sketch's stated error; devices counted twice (two polls, two replicas) count once.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{backends, Server};

async fn poll(s: &Server, device: &str, version: i64) {
    let body = json!({"module": "cdn", "deviceId": device, "configVersion": version, "platform": "android"});
    let resp = s.http.post(s.url("/app/config-center/module-config")).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn devices_per_version_are_counted_once_within_the_stated_error() {
    for (db, _guard) in backends("adoption").await {
        let (a, b) = (Server::start(&db).await, Server::start(&db).await);
        let doc = json!({"mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.xxx.com", "rate": 1}],
            "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []});
        for _ in 0..2 {
            let resp = a
                .http
                .put(a.url("/admin/v1/config/cdn"))
                .bearer_auth(crate::support::TOKEN)
                .header("if-match", "*")
                .body(doc.to_string())
                .send()
                .await
                .unwrap();
            assert!(resp.status().is_success());
        }
        // 300 devices on version 1, 120 on version 2; each polls twice, on both replicas when
        // they share a database; made-up versions are not counted.
        let shared = matches!(db, crate::support::Db::Postgres(_));
        for i in 0..300 {
            poll(&a, &format!("dev-{i}"), 1).await;
            poll(if shared { &b } else { &a }, &format!("dev-{i}"), 1).await;
        }
        for i in 300..420 {
            poll(&a, &format!("dev-{i}"), 2).await;
            poll(&a, &format!("dev-{i}"), 2).await;
        }
        poll(&a, "liar", 99).await;
        poll(&a, "new-install", 0).await;
        if shared {
            // B's sketches reach the store on its flush (every 10 s) or when B is read.
            let (status, _) = b.admin(Method::GET, "/admin/v1/config/cdn/adoption", None).await;
            assert_eq!(status, StatusCode::OK);
        }
        let (status, body) = a.admin(Method::GET, "/admin/v1/config/cdn/adoption?window=1h", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let err = body["standard_error"].as_f64().unwrap();
        assert!((0.01..0.02).contains(&err));
        let devices = |v: i64| -> f64 {
            body["versions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["version"] == v)
                .map_or(0.0, |x| x["devices"].as_f64().unwrap())
        };
        // Within four standard errors (deterministic for these ids).
        for (v, n) in [(1, 300.0), (2, 120.0)] {
            assert!(
                (devices(v) - n).abs() <= (n * 4.0 * err).max(2.0),
                "version {v}: {} of {n}: {body}",
                devices(v)
            );
        }
        assert_eq!(devices(99), 0.0);
        assert_eq!(body["versions"].as_array().unwrap().len(), 2, "{body}");
        assert_eq!(body["current_version"], 2);
        let total = body["devices"].as_f64().unwrap();
        assert!((total - 420.0).abs() <= 420.0 * 4.0 * err, "{total}");
        let (status, body): (StatusCode, Value) =
            a.admin(Method::GET, "/admin/v1/config/cdn/adoption?window=30s", None).await;
        assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("window")));
    }
}
