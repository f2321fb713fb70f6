//! The config push (issue 42): `GET ...&wait=N` with `If-None-Match` is held until a newer
//! version is served, on this replica or (PostgreSQL, `NOTIFY`) another one.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{backends, Db, Server};

fn doc(host: &str) -> Value {
    json!({"mergeHostConfigs": [], "hostListConfig": [{"host": host, "rate": 1}],
        "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []})
}

async fn publish(s: &Server, host: &str) -> i64 {
    let resp = s
        .http
        .put(s.url("/admin/v1/config/cdn"))
        .bearer_auth(crate::support::TOKEN)
        .header("if-match", "*")
        .body(doc(host).to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let v: Value = resp.json().await.unwrap();
    v["configVersion"].as_i64().unwrap()
}

/// A long poll holding `version`, on `s`, for at most `wait` seconds.
fn long_poll(
    s: &Server,
    version: i64,
    wait: u64,
) -> tokio::task::JoinHandle<(StatusCode, Option<i64>, Instant)> {
    let req = s
        .http
        .get(s.url(&format!("/app/config-center/module-config?module=cdn&wait={wait}")))
        .header("if-none-match", format!("\"{version}\""))
        .timeout(Duration::from_secs(wait + 10));
    tokio::spawn(async move {
        let resp = req.send().await.unwrap();
        let at = Instant::now();
        let status = resp.status();
        let served = resp.headers().get("x-config-version").and_then(|v| v.to_str().ok()?.parse().ok());
        (status, served, at)
    })
}

#[tokio::test]
async fn a_long_poll_is_answered_when_a_newer_version_is_published_else_304_after_wait() {
    let s = Server::start(&Db::Sqlite).await;
    let v1 = publish(&s, "a.example.com").await;
    // Offered on every GET answer.
    let plain = s.get("/app/config-center/module-config?module=cdn").await;
    assert_eq!(plain.headers()["x-config-long-poll"], "60");

    // Nothing newer: held for the whole wait, then 304.
    let started = Instant::now();
    let (status, served, at) = long_poll(&s, v1, 1).await.unwrap();
    assert_eq!((status, served), (StatusCode::NOT_MODIFIED, Some(v1)));
    assert!(at - started >= Duration::from_millis(900), "held {:?}", at - started);

    // A publish answers the held request at once.
    let held = long_poll(&s, v1, 30);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "held until a newer version");
    let published = Instant::now();
    let v2 = publish(&s, "b.example.com").await;
    let (status, served, at) = held.await.unwrap();
    assert_eq!((status, served), (StatusCode::OK, Some(v2)));
    assert!(at - published < Duration::from_secs(1), "answered {:?} after the publish", at - published);

    // Already newer: at once. Holding a version newer than served (the new side of a rollout,
    // another replica's): held, not answered with the older one.
    let (status, served, _) = long_poll(&s, v1, 30).await.unwrap();
    assert_eq!((status, served), (StatusCode::OK, Some(v2)));
    let started = Instant::now();
    let (status, _, at) = long_poll(&s, v2 + 5, 1).await.unwrap();
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(at - started >= Duration::from_millis(900));

    // Bad waits name the field.
    let (status, body) =
        s.admin(Method::GET, "/app/config-center/module-config?module=cdn&wait=61", None).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("wait")));
    let metrics = s.text("/metrics").await;
    assert!(metrics.contains("httpdns_config_waiters 0"), "no waiter left behind");
}

#[tokio::test]
async fn a_long_poll_on_one_replica_is_answered_within_a_second_of_a_publish_on_another() {
    for (db, _guard) in backends("push_replicas").await {
        let Db::Postgres(_) = db else { continue };
        // B's timer is a minute: only A's NOTIFY can wake B's waiters within the second.
        let tmp = tempfile::tempdir().unwrap();
        let mut slow = crate::support::env(tmp.path(), &db);
        slow.insert("HTTPDNS_SYNC_INTERVAL_MS".into(), "60000".into());
        let (a, b) = (Server::start(&db).await, Server::start_with(slow, None).await);
        let v1 = publish(&a, "a.example.com").await;
        assert!(
            crate::support::eventually(Duration::from_secs(5), || async {
                let resp = b.get("/app/config-center/module-config?module=cdn").await;
                resp.headers().get("x-config-version").is_some_and(|v| *v == *v1.to_string())
            })
            .await
        );
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(long_poll(&b, v1, 30));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let published = Instant::now();
        let v2 = publish(&a, "b.example.com").await;
        let mut slowest = Duration::ZERO;
        for h in held {
            let (status, served, at) = h.await.unwrap();
            assert_eq!((status, served), (StatusCode::OK, Some(v2)));
            slowest = slowest.max(at - published);
        }
        assert!(slowest < Duration::from_secs(1), "the slowest was answered {slowest:?} after the publish");
    }
}

async fn client_version(c: &httpdns_client::CdnClient, want: u64, within: Duration) -> bool {
    crate::support::eventually(within, || async { c.config().current().is_some_and(|a| a.version == want) })
        .await
}

#[tokio::test]
async fn the_rust_client_takes_a_publish_through_the_long_poll_and_polls_where_none_is_offered() {
    let s = Server::start(&Db::Sqlite).await;
    publish(&s, "a.example.com").await;
    // configRequestInterval is ten minutes: only the long poll can bring version 2 at once.
    let mut o = httpdns_client::ClientOptions { device_id: "device-0001".into(), ..Default::default() };
    o.config.url = Some(s.url("/app/config-center/module-config?module=cdn").parse().unwrap());
    o.resolver.local_dns = httpdns_client::LocalDns::Servers(vec![]);
    let c = httpdns_client::CdnClient::new(o).unwrap();
    let _bg = c.start().await;
    assert!(client_version(&c, 1, Duration::from_secs(5)).await);
    assert_eq!(c.config().long_poll(), Some(httpdns_client::config_source::LONG_POLL));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let published = Instant::now();
    publish(&s, "b.example.com").await;
    assert!(client_version(&c, 2, Duration::from_secs(2)).await, "the long poll brought version 2");
    assert!(published.elapsed() < Duration::from_secs(2));

    // A server that does not offer the long poll (an older one, or a proxy that strips the
    // header) is polled every interval.
    let signer = httpdns_config::Signer::from_seed([9; 32]);
    let version = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
    let (v, key) = (version.clone(), signer.public_key_base64());
    let app = axum::Router::new().route(
        "/config",
        axum::routing::get(move || {
            let v = v.load(std::sync::atomic::Ordering::SeqCst);
            let body = format!(
                r#"{{"mergeHostConfigs":[],"hostListConfig":[{{"host":"h{v}.example.com","rate":1}}],"reviveProbeInterval":600000,"configRequestInterval":600000,"configVersion":{v},"publicIpList":[]}}"#
            );
            let sig = signer.sign(body.as_bytes());
            async move { ([("x-config-signature", sig)], body) }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let mut o = httpdns_client::ClientOptions { device_id: "device-0001".into(), ..Default::default() };
    o.config.url = Some(format!("http://{addr}/config").parse().unwrap());
    o.config.public_key = Some(key);
    o.config_interval = Some(Duration::from_millis(200));
    o.resolver.local_dns = httpdns_client::LocalDns::Servers(vec![]);
    let plain = httpdns_client::CdnClient::new(o).unwrap();
    let _bg2 = plain.start().await;
    assert!(client_version(&plain, 1, Duration::from_secs(5)).await);
    assert_eq!(plain.config().long_poll(), None, "not offered");
    version.store(2, std::sync::atomic::Ordering::SeqCst);
    assert!(client_version(&plain, 2, Duration::from_secs(3)).await, "polled");
}
