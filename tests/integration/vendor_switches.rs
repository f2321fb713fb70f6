//! The vendors' server-side switches (docs/api.md, "Vendor switches"): set once through the
//! admin API, carried by `/ss` and `/{account}/ss` (Alibaba's `service_status`) and by `/conf`
//! in every form (Tencent's `log` and `domain`), on every replica and after a restart.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{env, eventually, Db, Process, Server, TOKEN};

const TENCENT_KEY: &str = "dnspodpass123456";

/// A replica on the shared database `db_url`, listing 127.0.0.9 (a default-port IPv4 address,
/// the kind Tencent's SDKs can use) in `/ss` and `/conf`.
fn replica_env(dir: &std::path::Path, db_url: &str) -> HashMap<String, String> {
    let mut e = env(dir, &Db::Sqlite);
    e.insert("HTTPDNS_DATABASE_URL".into(), db_url.into());
    e.insert("HTTPDNS_PUBLIC_ADDRS".into(), "127.0.0.9".into());
    e
}

/// What a base URL answers: `/ss`'s `service_status` for `path` (null when absent).
async fn status(http: &reqwest::Client, base: &str, path: &str) -> Value {
    let resp = http.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["service_ip"], json!(["127.0.0.9"]), "the list is unchanged: {v}");
    v.get("service_status").cloned().unwrap_or(Value::Null)
}

/// `/conf` as the SDKs read it: plain, or decrypted with account 42's key.
async fn conf(http: &reqwest::Client, base: &str, alg: Option<&str>) -> String {
    let query = alg.map(|a| format!("?id=42&alg={a}")).unwrap_or_default();
    let resp = http.get(format!("{base}/conf{query}")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "/conf{query}");
    let body = resp.text().await.unwrap();
    match alg {
        None => body,
        Some("des") => httpdns_auth::decrypt(httpdns_auth::Alg::Des, TENCENT_KEY, &body).unwrap(),
        Some(_) => httpdns_auth::decrypt(httpdns_auth::Alg::Aes, TENCENT_KEY, &body).unwrap(),
    }
}

#[tokio::test]
async fn switches_reach_ss_and_conf_on_every_replica_and_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}", tmp.path().join("shared.db").display());
    let a = Server::start_with(replica_env(&tmp.path().join("a"), &db_url), None).await;
    for id in ["100000", "100001"] {
        a.put_ok(&format!("/admin/v1/accounts/{id}"), json!({"secret": "0123456789abcdef0123456789abcdef"}))
            .await;
    }
    a.put_ok("/admin/v1/accounts/42", json!({"secret": TENCENT_KEY})).await;
    let http = a.http.clone();

    // Unset: the answers of before.
    let (st, v) = a.admin(Method::GET, "/admin/v1/vendor-switches", None).await;
    assert_eq!((st, v), (StatusCode::OK, json!({"global": {}, "accounts": {}})));
    assert_eq!(status(&http, &a.base, "/100000/ss").await, Value::Null);
    assert_eq!(conf(&http, &a.base, Some("des")).await, "log:0|domain:0|ip:127.0.0.9|ttl:60");

    // Bad bodies are refused whole, naming the field; nothing is stored.
    for (body, field) in [
        (json!({"global": {"alibaba_service_status": "off"}}), "global.alibaba_service_status"),
        (json!({"global": {"kill": true}}), "global.kill"),
        (json!({"accounts": {"777": {"tencent_log": true}}}), "accounts.777"),
        (json!({"accounts": {"x": {}}}), "accounts.x"),
        (json!({"accounts": {"42": {"tencent_domain": 1}}}), "accounts.42.tencent_domain"),
    ] {
        let (st, v) = a.put("/admin/v1/vendor-switches", body.clone()).await;
        assert_eq!((st, v["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{body}: {v}");
    }
    let unauth = http.get(a.url("/admin/v1/vendor-switches")).send().await.unwrap();
    assert_eq!(unauth.status(), StatusCode::UNAUTHORIZED);

    // The kill switch for everyone but account 100001; Tencent's report switch for everyone,
    // and its domain service for account 42.
    let set = json!({
        "global": {"alibaba_service_status": "disable", "tencent_log": true},
        "accounts": {"100001": {"alibaba_service_status": "enable"}, "42": {"tencent_domain": true}},
    });
    let (st, v) = a.put("/admin/v1/vendor-switches", set.clone()).await;
    assert_eq!((st, &v), (StatusCode::OK, &set), "{v}");
    assert_eq!(a.admin(Method::GET, "/admin/v1/vendor-switches", None).await.1, set);
    assert_eq!(status(&http, &a.base, "/100000/ss").await, "disable");
    assert_eq!(status(&http, &a.base, "/ss").await, "disable", "no account: the global scope");
    assert_eq!(status(&http, &a.base, "/100001/ss").await, "enable");
    assert_eq!(conf(&http, &a.base, None).await, "log:1|domain:0|ip:127.0.0.9|ttl:60", "plain: global");
    for alg in ["des", "aes"] {
        assert_eq!(conf(&http, &a.base, Some(alg)).await, "log:1|domain:1|ip:127.0.0.9|ttl:60", "{alg}");
    }

    // Another replica on the same database answers with it from its first request.
    let b = Process::spawn(&replica_env(&tmp.path().join("b"), &db_url), tmp.path());
    assert_eq!(status(&http, &b.base, "/100000/ss").await, "disable");
    assert_eq!(conf(&http, &b.base, Some("aes")).await, "log:1|domain:1|ip:127.0.0.9|ttl:60");

    // Lifted on A: B follows within its heartbeat (2 s).
    let lifted = json!({"global": {"alibaba_service_status": "enable"}, "accounts": {}});
    a.put_ok("/admin/v1/vendor-switches", lifted.clone()).await;
    assert_eq!(status(&http, &a.base, "/100000/ss").await, "enable", "A at once");
    let followed = eventually(Duration::from_secs(10), || {
        let (http, base) = (http.clone(), b.base.clone());
        async move { status(&http, &base, "/100000/ss").await == "enable" }
    })
    .await;
    assert!(followed, "B follows A's change");
    assert_eq!(conf(&http, &b.base, Some("des")).await, "log:0|domain:0|ip:127.0.0.9|ttl:60");

    // A restarted replica answers with the stored setting at once.
    assert!(b.terminate().success());
    a.put_ok("/admin/v1/vendor-switches", set).await;
    let b = Process::spawn(&replica_env(&tmp.path().join("b"), &db_url), tmp.path());
    assert_eq!(status(&http, &b.base, "/100000/ss").await, "disable");
    assert_eq!(status(&http, &b.base, "/100001/ss").await, "enable");
    assert_eq!(conf(&http, &b.base, Some("des")).await, "log:1|domain:1|ip:127.0.0.9|ttl:60");
    let resp =
        http.get(format!("{}/admin/v1/vendor-switches", b.base)).bearer_auth(TOKEN).send().await.unwrap();
    let stored: Value = resp.json().await.unwrap();
    assert_eq!(stored["global"]["alibaba_service_status"], "disable", "{stored}");
}

/// `/conf?token=` over HTTPS (plain body): the token's account's switches.
#[tokio::test]
async fn conf_over_https_with_a_token_carries_its_accounts_switches() {
    if !crate::tls::have_all(&["curl", "openssl"]) {
        httpdns_test_support::skipped("/conf over HTTPS", "curl or openssl is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ca = crate::tls::TestCa::new(tmp.path());
    let (cert, key) = ca.leaf("api", "dns.test", "DNS:dns.test,IP:127.0.0.1", 20);
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_API_TLS_ADDR".into(), "127.0.0.1:0".into());
    e.insert("HTTPDNS_TLS_CERT".into(), cert.display().to_string());
    e.insert("HTTPDNS_TLS_KEY".into(), key.display().to_string());
    e.insert("HTTPDNS_PUBLIC_ADDRS".into(), "127.0.0.9".into());
    let s = Server::start_with(e, None).await;
    s.put_ok("/admin/v1/accounts/42", json!({"secret": TENCENT_KEY, "token": "8086421"})).await;
    s.put_ok("/admin/v1/accounts/43", json!({"secret": TENCENT_KEY, "token": "8086422"})).await;
    s.put_ok(
        "/admin/v1/vendor-switches",
        json!({"global": {"tencent_log": true}, "accounts": {"42": {"tencent_log": false, "tencent_domain": true}}}),
    )
    .await;
    let api = s.running().api_tls_addr.unwrap();
    let ca_file = ca.ca().display().to_string();
    let get = |token: &str| {
        let args = vec![
            "-sS".to_owned(),
            "--cacert".into(),
            ca_file.clone(),
            format!("https://{api}/conf?token={token}"),
        ];
        async move {
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new("timeout").arg("20").arg("curl").args(&args).output().unwrap()
            })
            .await
            .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap()
        }
    };
    assert_eq!(get("8086421").await, "log:0|domain:1|ip:127.0.0.9|ttl:60", "account 42's own");
    assert_eq!(get("8086422").await, "log:1|domain:0|ip:127.0.0.9|ttl:60", "account 43: the global scope");
}
