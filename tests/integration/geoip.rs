use std::time::Duration;

use httpdns_test_support::mmdb::Writer;
use serde_json::json;

use crate::support::{eventually, Db, Server};

fn write_dbs(dir: &std::path::Path, unicom_block_asn: u32) {
    Writer::new("GeoLite2-City")
        .insert("36.0.0.0/8", Writer::city("CN", "Beijing", "Beijing"))
        .insert("58.0.0.0/8", Writer::city("CN", "Shanghai", "Shanghai"))
        .insert("2408:8000::/20", Writer::city("CN", "Shanghai", "Shanghai"))
        .write_to(&dir.join("city.mmdb"));
    Writer::new("GeoLite2-ASN")
        .insert("36.0.0.0/8", Writer::asn(4134, "CHINANET-BACKBONE"))
        .insert("58.0.0.0/8", Writer::asn(unicom_block_asn, "some carrier"))
        .insert("2408:8000::/20", Writer::asn(4837, "CHINA UNICOM China169 Backbone"))
        .write_to(&dir.join("asn.mmdb"));
}

/// The client subnet scope of a DoH answer for `www.example.com` asked for `ip/prefix`.
async fn ecs_scope(s: &Server, ip: &str, prefix: u8) -> u8 {
    use base64::Engine;
    use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    let q = httpdns_dns::build_query(
        1,
        "www.example.com.",
        hickory_proto::rr::RecordType::A,
        Some((ip.parse().unwrap(), prefix)),
    )
    .unwrap();
    let path = format!("/dns-query?dns={}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&q));
    let m = hickory_proto::op::Message::from_vec(&s.get(&path).await.bytes().await.unwrap()).unwrap();
    match m.edns.as_ref().and_then(|e| e.option(EdnsCode::Subnet)) {
        Some(EdnsOption::Subnet(ecs)) => ecs.scope_prefix(),
        other => panic!("no client subnet in the answer: {other:?}"),
    }
}

#[tokio::test]
async fn classifies_by_geoip_and_reloads_without_restart() {
    let tmp = tempfile::tempdir().unwrap();
    write_dbs(tmp.path(), 4837);
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_GEOIP_CITY_DB".into(), tmp.path().join("city.mmdb").display().to_string());
    env.insert("HTTPDNS_GEOIP_ASN_DB".into(), tmp.path().join("asn.mmdb").display().to_string());
    let s = Server::start_with(env, Some("[geoip]\nreload_interval_ms = 100\n")).await;
    s.seed().await;

    // 36/8: AS4134 -> telecom, Beijing.
    assert_eq!(s.text("/d?dn=www.example.com&ip=36.1.2.3").await, "1.1.1.1;1.1.1.2");
    // 58/8: AS4837 -> unicom, Shanghai.
    assert_eq!(s.text("/d?dn=www.example.com&ip=58.1.2.3").await, "2.2.2.1;2.2.2.2");
    // IPv6 client of China Unicom.
    assert_eq!(s.text("/d?dn=www.example.com&ip=2408:8001::1").await, "2.2.2.1;2.2.2.2");

    // DNS answers carry the GeoIP network's prefix as their client subnet scope, so a
    // resolver caches them for the whole /8 (or /20), not per client.
    assert_eq!(ecs_scope(&s, "58.1.2.3", 32).await, 8);
    assert_eq!(ecs_scope(&s, "2408:8001::1", 128).await, 20);
    assert_eq!(ecs_scope(&s, "58.1.2.0", 24).await, 8);

    // An operator network overrides GeoIP.
    s.put_ok("/admin/v1/networks/58.1.0.0%2F16", json!({"isp": "telecom"})).await;
    assert_eq!(
        s.text("/d?dn=www.example.com&ip=58.1.2.3").await,
        "1.1.1.2;1.1.1.1",
        "telecom, still Shanghai"
    );
    assert_eq!(ecs_scope(&s, "58.1.2.3", 32).await, 16, "the operator network decided the carrier");
    // Outside it but in the same /8, the block clear of it is what decided.
    assert_eq!(ecs_scope(&s, "58.2.0.1", 32).await, 15);

    // The operator replaces the ASN database: 58/8 becomes China Telecom CN2 (AS4809).
    write_dbs(tmp.path(), 4809);
    let reloaded = eventually(Duration::from_secs(5), || async {
        s.text("/d?dn=www.example.com&ip=58.200.0.1").await == "1.1.1.2;1.1.1.1"
    })
    .await;
    assert!(reloaded, "the new database is used without a restart");
    let ready: serde_json::Value = s.get("/readyz").await.json().await.unwrap();
    assert_eq!((ready["geoip_city"].as_bool(), ready["geoip_asn"].as_bool()), (Some(true), Some(true)));
}

#[tokio::test]
async fn sighup_reloads_geoip_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    write_dbs(tmp.path(), 4837);
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_GEOIP_CITY_DB".into(), tmp.path().join("city.mmdb").display().to_string());
    env.insert("HTTPDNS_GEOIP_ASN_DB".into(), tmp.path().join("asn.mmdb").display().to_string());
    // File changes alone would be noticed only after an hour.
    let config = tmp.path().join("httpdns.toml");
    std::fs::write(&config, "[geoip]\nreload_interval_ms = 3600000\n").unwrap();
    let p = crate::support::Process::spawn_with_args(
        &env,
        tmp.path(),
        &["--config", config.to_str().unwrap(), "serve"],
    );
    let http = httpdns_test_support::http::client();
    for (path, body) in [
        (
            "/admin/v1/nodes/t-sh",
            json!({"ip": "1.1.1.2", "pool": "edge", "isp": "telecom", "region": "shanghai"}),
        ),
        (
            "/admin/v1/nodes/u-sh",
            json!({"ip": "2.2.2.2", "pool": "edge", "isp": "unicom", "region": "shanghai"}),
        ),
        ("/admin/v1/domains/www.example.com", json!({"pool": "edge", "ttl": 60})),
    ] {
        let r =
            http.put(format!("{}{path}", p.base)).bearer_auth(crate::support::TOKEN).body(body.to_string());
        assert!(r.send().await.unwrap().status().is_success());
    }
    let answer = || {
        let url = format!("{}/d?dn=www.example.com&ip=58.200.0.1", p.base);
        let http = http.clone();
        async move { http.get(url).send().await.unwrap().text().await.unwrap() }
    };
    assert!(
        eventually(Duration::from_secs(5), || async { answer().await == "2.2.2.2" }).await,
        "unicom by AS4837"
    );
    // The ASN database is replaced: nothing changes until the signal...
    write_dbs(tmp.path(), 4809);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(answer().await, "2.2.2.2");
    let pid = p.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    // ...then the new data is in force, and the process is still serving.
    assert!(
        eventually(Duration::from_secs(5), || async { answer().await == "1.1.1.2" }).await,
        "telecom by AS4809"
    );
    assert_eq!(p.terminate().code(), Some(0));
}
