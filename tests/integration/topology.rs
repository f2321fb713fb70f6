//! The compose topology without Docker: two `httpdns` processes sharing one PostgreSQL and one
//! S3-compatible bucket (s3s-fs), with the smoke test of `deploy/README.md`: a node added on
//! replica A is answered by B, a mirror object filled through A is a hit on B, a config
//! published on A is served by B, and both export what the dashboard and alerts use.
//! Needs `HTTPDNS_TEST_POSTGRES_URL` and s3s-fs (`.ci/run` provides both); says SKIPPED
//! otherwise.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use crate::mirror::S3Server;
use crate::origin::RunningOrigin;
use crate::support::{env, eventually, Db, Process, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_share_postgres_and_the_bucket() {
    let Some(db) =
        httpdns_test_support::postgres::fresh_database("two_replicas_share_postgres_and_the_bucket").await
    else {
        return;
    };
    let Some(s3) = S3Server::start() else { return };
    let origin = RunningOrigin::start().await;
    origin.origin.put("/o/logo.png", vec![7u8; 10_000], "image/png");

    let replica = |dir: &std::path::Path| -> HashMap<String, String> {
        let mut e = env(dir, &Db::Postgres(db.url.clone()));
        e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
        e.insert("HTTPDNS_MIRROR_STORE".into(), "s3://mirror-test/copies".into());
        e.insert("HTTPDNS_MIRROR_S3_ENDPOINT".into(), s3.endpoint.clone());
        e.insert("AWS_ACCESS_KEY_ID".into(), "testkey".into());
        e.insert("AWS_SECRET_ACCESS_KEY".into(), "testsecret".into());
        // One signing key for all replicas, as deploy/.env sets it (not the shipped demo seed,
        // which the server refuses).
        e.insert("HTTPDNS_CONFIG_SIGNING_KEY".into(), "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=".into());
        // A slow poll: changes must arrive through LISTEN/NOTIFY.
        e.insert("HTTPDNS_SYNC_INTERVAL_MS".into(), "5000".into());
        e
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Process::spawn(&replica(dir_a.path()), dir_a.path());
    let b = Process::spawn(&replica(dir_b.path()), dir_b.path());
    let http = httpdns_test_support::http::client();
    let put = |base: &str, path: &str, body: serde_json::Value| {
        let req = http.put(format!("{base}{path}")).bearer_auth(TOKEN).body(body.to_string());
        async move {
            let r = req.send().await.unwrap();
            assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        }
    };
    let get_text = |url: String| {
        let http = http.clone();
        async move { http.get(url).send().await.unwrap().text().await.unwrap() }
    };

    // A node and a domain added on A are answered by B.
    put(
        &a.base,
        "/admin/v1/nodes/n1",
        json!({"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing"}),
    )
    .await;
    put(&a.base, "/admin/v1/domains/www.example.com", json!({"pool": "edge", "ttl": 60})).await;
    let d_on_b = format!("{}/d?dn=www.example.com&ip=1.0.1.7", b.base);
    assert!(
        eventually(Duration::from_secs(3), || {
            let t = get_text(d_on_b.clone());
            async move { t.await == "1.1.1.1" }
        })
        .await,
        "B answers A's node within 3 s (poll interval 5 s)"
    );

    // A mirror object filled through A is a hit on B (one origin fetch for both).
    put(
        &a.base,
        "/admin/v1/mirror/rules/img",
        json!({"path_prefix": "/img", "origin": format!("{}/o", origin.url())}),
    )
    .await;
    let (ma, mb) = (
        format!("http://{}/img/logo.png", a.mirror.unwrap()),
        format!("http://{}/img/logo.png", b.mirror.unwrap()),
    );
    assert!(
        eventually(Duration::from_secs(3), || {
            let http = http.clone();
            let ma = ma.clone();
            async move { http.get(&ma).send().await.is_ok_and(|r| r.status() == 200) }
        })
        .await,
        "A serves the rule"
    );
    // The fill's readers can finish before its commit: wait until A serves its stored copy.
    assert!(
        eventually(Duration::from_secs(5), || {
            let http = http.clone();
            let ma = ma.clone();
            async move {
                http.get(&ma)
                    .send()
                    .await
                    .is_ok_and(|r| r.headers().get("x-cache").is_some_and(|v| v == "HIT"))
            }
        })
        .await,
        "A commits its copy"
    );
    let mut hit_on_b = false;
    for _ in 0..150 {
        let r = http.get(&mb).send().await.unwrap();
        if r.status() == 200 {
            assert_eq!(r.headers()["x-cache"], "HIT", "B serves A's copy from the shared bucket");
            assert_eq!(r.bytes().await.unwrap().len(), 10_000);
            hit_on_b = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(hit_on_b, "B knows the rule");
    assert_eq!(origin.origin.requests("/o/logo.png"), 1, "one origin fetch for both replicas");

    // B now holds the body in memory. A purge through A is seen by B at its next request
    // (each hit asks the bucket), so B fetches the origin's new body instead of the old one.
    origin.origin.put("/o/logo.png", vec![9u8; 12_000], "image/png");
    let purged = http
        .post(format!("{}/admin/v1/mirror/purge", a.base))
        .bearer_auth(TOKEN)
        .body(json!({"path": "/img/logo.png"}).to_string())
        .send()
        .await
        .unwrap();
    assert!(purged.status().is_success());
    let r = http.get(&mb).send().await.unwrap();
    assert_eq!(r.headers()["x-cache"], "MISS", "the purged copy is not served from B's memory");
    assert_eq!(r.bytes().await.unwrap(), vec![9u8; 12_000]);
    assert_eq!(origin.origin.requests("/o/logo.png"), 2);

    // A config published on A is served by B, signed with the shared key.
    put(
        &a.base,
        "/admin/v1/config/cdn",
        json!({"mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.example.com", "rate": 1}],
            "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []}),
    )
    .await;
    let key_a: serde_json::Value = http
        .get(format!("{}/app/config-center/public-key", a.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cfg_on_b = format!("{}/app/config-center/module-config?module=cdn", b.base);
    let mut served = None;
    for _ in 0..150 {
        let r = http.get(&cfg_on_b).send().await.unwrap();
        if r.status() == 200 {
            let sig = r.headers()["x-config-signature"].to_str().unwrap().to_owned();
            served = Some((r.bytes().await.unwrap(), sig));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (body, sig) = served.expect("B serves the module within 3 s");
    assert!(httpdns_config::signing::verify(key_a["public_key"].as_str().unwrap(), &body, &sig));

    // Both replicas export what the dashboard and the alert rules use.
    for p in [&a, &b] {
        let metrics = get_text(format!("{}/metrics", p.base)).await;
        assert!(metrics.contains("httpdns_store_up 1"), "{metrics}");
        let exported = crate::deploy::exported(&metrics);
        // Certificate metrics exist only with a TLS listener on (these replicas have none), a
        // place's policy gauges only once the controller knows a place (these have no events);
        // `deploy::every_metric_of_the_dashboard_and_alerts_is_exported` checks both.
        let missing: Vec<_> = crate::deploy::used_metrics()
            .into_iter()
            .filter(|m| {
                !exported.contains(m)
                    && !m.starts_with("httpdns_tls_")
                    && !m.starts_with("httpdns_policy_place_")
            })
            .collect();
        assert!(missing.is_empty(), "{} does not export {missing:?}", p.base);
    }
}
