//! Request authentication: DNSPod DES/AES `id=` requests, Alibaba signed endpoints, accounts.

use std::time::Duration;

use httpdns_auth::{alibaba_signature, decrypt, encrypt, Alg};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{Db, Server};

async fn server(auth_required: bool) -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_AUTH_REQUIRED".into(), auth_required.to_string());
    let s = Server::start_with(env, None).await;
    s.seed().await;
    s.put_ok("/admin/v1/domains/www.dnspod.cn", json!({"pool": "edge", "ttl": 120})).await;
    s.put_ok("/admin/v1/accounts/42", json!({"secret": "dnspodpass"})).await;
    s.put_ok("/admin/v1/accounts/7", json!({"secret": "another-secret", "rate_limit_qps": 2})).await;
    (s, tmp)
}

fn now() -> u64 {
    httpdns_core::clock::unix_s()
}

#[tokio::test]
async fn dnspod_des_and_aes_requests() {
    let (s, _tmp) = server(false).await;
    // The documented vector: www.dnspod.cn encrypted with "dnspodpass".
    let ip = encrypt(Alg::Des, "dnspodpass", b"1.0.1.7").unwrap();
    let resp = s.get(&format!("/d?dn=87ae992c1321f299da3c0210a9900ae7&id=42&ip={ip}&ttl=1&clientip=1")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.text().await.unwrap();
    assert!(body.bytes().all(|b| b.is_ascii_hexdigit()), "{body}");
    assert_eq!(decrypt(Alg::Des, "dnspodpass", &body).unwrap(), "1.1.1.1;1.1.1.2,120|1.0.1.7");

    let dn = encrypt(Alg::Aes, "dnspodpass", b"www.dnspod.cn,www.example.com").unwrap();
    let ip = encrypt(Alg::Aes, "dnspodpass", b"1.0.2.7").unwrap();
    let body = s.text(&format!("/d?dn={dn}&ip={ip}&id=42&alg=AES&ttl=1")).await;
    assert_eq!(
        decrypt(Alg::Aes, "dnspodpass", &body).unwrap(),
        "www.dnspod.cn.:2.2.2.1;2.2.2.2,120\nwww.example.com.:2.2.2.1;2.2.2.2,60"
    );

    for (path, status, field) in [
        ("/d?dn=87ae992c1321f299da3c0210a9900ae7&id=43".to_owned(), 401, "id"),
        ("/d?dn=87ae992c1321f299da3c0210a9900ae7&id=abc".to_owned(), 401, "id"),
        ("/d?dn=nothex&id=42".to_owned(), 400, "dn"),
        (format!("/d?dn={}&id=7", "87ae992c1321f299da3c0210a9900ae7"), 400, "dn"),
        ("/d?dn=87ae992c1321f299da3c0210a9900ae7&id=42&alg=rc4".to_owned(), 400, "alg"),
    ] {
        let resp = s.get(&path).await;
        assert_eq!(resp.status().as_u16(), status, "{path}");
        assert_eq!(resp.json::<Value>().await.unwrap()["field"], field, "{path}");
    }
}

#[tokio::test]
async fn alibaba_signed_endpoints() {
    let (s, _tmp) = server(false).await;
    let t = (now() + 600).to_string();
    let sig = alibaba_signature("www.example.com", "dnspodpass", &t);
    let resp = s.get(&format!("/42/sign_d?host=www.example.com&t={t}&s={sig}&ip=1.0.2.7")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"host": "www.example.com", "client_ip": "1.0.2.7", "ips": ["2.2.2.1", "2.2.2.2"], "ttl": 60, "origin_ttl": 60})
    );

    let hosts = "www.example.com,www.dnspod.cn";
    let sig = alibaba_signature(hosts, "dnspodpass", &t);
    let body: Value =
        s.get(&format!("/42/sign_resolve?host={hosts}&t={t}&s={sig}&ip=1.0.1.7")).await.json().await.unwrap();
    assert_eq!(body["dns"].as_array().unwrap().len(), 2);
    assert_eq!(body["dns"][1]["ips"], json!(["1.1.1.1", "1.1.1.2"]));

    // Unsigned account endpoints are open unless auth is required.
    let body: Value = s.get("/42/d?host=www.example.com&ip=1.0.1.7").await.json().await.unwrap();
    assert_eq!(body["ips"], json!(["1.1.1.1", "1.1.1.2"]));

    let expired = (now() - 1).to_string();
    let too_long = (now() + 3 * 86_400).to_string();
    let cases = [
        (
            format!(
                "/42/sign_d?host=www.example.com&t={expired}&s={}",
                alibaba_signature("www.example.com", "dnspodpass", &expired)
            ),
            403,
            "SignatureExpired",
        ),
        (
            format!("/42/sign_d?host=www.example.com&t={t}&s=00000000000000000000000000000000"),
            403,
            "InvalidSignature",
        ),
        (
            format!(
                "/42/sign_d?host=www.dnspod.cn&t={t}&s={}",
                alibaba_signature("www.example.com", "dnspodpass", &t)
            ),
            403,
            "InvalidSignature",
        ),
        (
            format!(
                "/42/sign_d?host=www.example.com&t={too_long}&s={}",
                alibaba_signature("www.example.com", "dnspodpass", &too_long)
            ),
            403,
            "InvalidDuration",
        ),
        (format!("/99/sign_d?host=www.example.com&t={t}&s=x"), 403, "InvalidAccount"),
        ("/42/sign_d?host=www.example.com".to_owned(), 400, "MissingArgument"),
        (format!("/42/d?host={hosts}"), 400, "TooManyHosts"),
    ];
    for (path, status, code) in cases {
        let resp = s.get(&path).await;
        assert_eq!(resp.status().as_u16(), status, "{path}");
        assert_eq!(resp.json::<Value>().await.unwrap()["code"], code, "{path}");
    }

    // A signature replayed after its expiry is refused.
    let soon = (now() + 1).to_string();
    let sig = alibaba_signature("www.example.com", "dnspodpass", &soon);
    let path = format!("/42/sign_d?host=www.example.com&t={soon}&s={sig}");
    assert_eq!(s.get(&path).await.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let resp = s.get(&path).await;
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "SignatureExpired");
}

#[tokio::test]
async fn auth_required_closes_the_open_apis_and_accounts_are_rate_limited() {
    let (s, _tmp) = server(true).await;
    let resp = s.get("/d?dn=www.example.com").await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let resp = s.get("/resolve?host=www.example.com").await;
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "UnsignedInterfaceDisabled");
    let resp = s.get("/42/d?host=www.example.com").await;
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "UnsignedInterfaceDisabled");
    let body = s.text("/d?dn=87ae992c1321f299da3c0210a9900ae7&id=42").await;
    assert_eq!(decrypt(Alg::Des, "dnspodpass", &body).unwrap(), "2.2.2.1;1.1.1.2;1.1.1.1;2.2.2.2");

    // Account 7 allows 2 requests per second. Forged requests naming it (a wrong signature, an
    // unsigned one while signatures are required) are refused without spending its quota.
    let t = (now() + 600).to_string();
    for _ in 0..5 {
        let forged =
            s.get(&format!("/7/sign_d?host=www.example.com&t={t}&s=0123456789abcdef0123456789abcdef")).await;
        assert_eq!(forged.status(), 403);
        assert_eq!(s.get("/v2/d?id=7&dn=www.example.com").await.status(), 403);
    }
    let path = format!(
        "/7/sign_d?host=www.example.com&t={t}&s={}",
        alibaba_signature("www.example.com", "another-secret", &t)
    );
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(s.get(&path).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[tokio::test]
async fn accounts_are_validated() {
    let (s, _tmp) = server(false).await;
    for (path, body, field) in [
        ("/admin/v1/accounts/0", json!({"secret": "long-enough"}), "id"),
        ("/admin/v1/accounts/abc", json!({"secret": "long-enough"}), "id"),
        ("/admin/v1/accounts/007", json!({"secret": "long-enough"}), "id"),
        ("/admin/v1/accounts/5", json!({"secret": "short"}), "secret"),
        ("/admin/v1/accounts/5", json!({"secret": "has a space"}), "secret"),
        ("/admin/v1/accounts/5", json!({"secret": "long-enough", "rate_limit_qps": 0}), "rate_limit_qps"),
    ] {
        let (status, resp) = s.put(path, body).await;
        assert_eq!((status, resp["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{path}");
    }
    let (status, body) = s.admin(reqwest::Method::GET, "/admin/v1/accounts/42", None).await;
    assert_eq!((status, body["secret"].as_str()), (StatusCode::OK, Some("dnspodpass")));
}

/// `HTTPDNS_CLIENT_RATE_LIMIT_QPS`: one client address over its limit gets 429 on every
/// unauthenticated endpoint, counted in the metrics; off by default.
#[tokio::test]
async fn per_address_limits_for_unauthenticated_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_CLIENT_RATE_LIMIT_QPS".into(), "0.5".into());
    let s = Server::start_with(env, Some("[rate_limit]\nclient_burst = 3\n")).await;
    s.seed().await;
    let mut statuses = Vec::new();
    for path in ["/d?dn=www.example.com", "/resolve?host=www.example.com", "/d?dn=www.example.com&ip=1.0.2.7"]
    {
        statuses.push(s.get(path).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200], "the burst");
    let over = s.get("/d?dn=www.example.com&ip=8.8.8.8").await;
    assert_eq!(over.status(), 429, "ip= does not pick another bucket");
    assert_eq!(over.json::<Value>().await.unwrap()["code"], "Throttled");
    assert_eq!(s.get("/resolve?host=www.example.com").await.status(), 429);
    assert_eq!(s.get("/dns-query?name=www.example.com&type=A").await.status(), 429);
    let metrics = s.text("/metrics").await;
    assert!(metrics.contains("httpdns_rate_limited_total{scope=\"client\"} 3"), "{metrics}");

    // Off by default: a burst far beyond that passes.
    let (plain, _tmp2) = {
        let tmp = tempfile::tempdir().unwrap();
        let env = crate::support::env(tmp.path(), &Db::Sqlite);
        (Server::start_with(env, None).await, tmp)
    };
    for _ in 0..20 {
        assert_eq!(plain.get("/d?dn=www.example.com").await.status(), 200);
    }
}

/// The AES-CBC padding oracle of the hostile campaign, refused: every tampered ciphertext
/// answers exactly alike, whether its padding came out valid or not. Flipping the last byte of
/// the block before the last one walks the padding byte through all 256 values; one of them
/// (a one-byte padding) is valid and used to be answered apart (a bad name, a bad JSON object)
/// from the 254 bad paddings, which let a client decrypt a captured `dn` byte by byte.
#[tokio::test]
async fn aes_cbc_decryption_failures_all_answer_alike() {
    let (s, _tmp) = server(false).await;
    s.put_ok(
        "/admin/v1/accounts/100000",
        json!({"secret": "0123456789abcdef0123456789abcdef", "aes_key": "00112233445566778899aabbccddeeff"}),
    )
    .await;
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let unhex = |s: &str| {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<u8>>()
    };
    let answers = |set: Vec<(StatusCode, String)>| {
        let distinct: std::collections::BTreeSet<_> = set.into_iter().collect();
        distinct
    };

    // DNSPod `/d?alg=aes`: IV ‖ one block.
    let wire = unhex(&encrypt(Alg::Aes, "dnspodpass", b"www.dnspod.cn").unwrap());
    let mut seen = Vec::new();
    for x in 1..=255u8 {
        let mut w = wire.clone();
        w[15] ^= x;
        let resp = s.get(&format!("/d?dn={}&id=42&alg=aes", hex(&w))).await;
        seen.push((resp.status(), resp.text().await.unwrap()));
    }
    let distinct = answers(seen);
    assert_eq!(distinct.len(), 1, "/d answers told paddings apart: {distinct:?}");
    let (status, body) = distinct.into_iter().next().unwrap();
    assert_eq!(status, 400);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["field"], "dn");
    // The untampered request is answered.
    assert_eq!(s.get(&format!("/d?dn={}&id=42&alg=aes", hex(&wire))).await.status(), 200);

    // Alibaba `/v2/d?m=1`: IV ‖ two blocks; the first ciphertext block is the second's IV.
    let key = httpdns_auth::aliyun_v2::AesKey::from_hex("00112233445566778899aabbccddeeff").unwrap();
    let sealed = httpdns_auth::aliyun_v2::seal_with_iv(
        httpdns_auth::aliyun_v2::Mode::Cbc,
        &key,
        &[7u8; 16],
        br#"{"dn":"www.example.com"}"#,
    )
    .unwrap();
    assert_eq!(sealed.len(), 48);
    let mut seen = Vec::new();
    for x in 1..=255u8 {
        let mut w = sealed.clone();
        w[31] ^= x;
        let resp = s.get(&format!("/v2/d?id=100000&m=1&enc={}", hex(&w))).await;
        seen.push((resp.status(), resp.text().await.unwrap()));
    }
    let distinct = answers(seen);
    assert_eq!(distinct.len(), 1, "/v2/d answers told paddings apart: {distinct:?}");
    let (status, body) = distinct.into_iter().next().unwrap();
    assert_eq!(status, 400);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["field"], "enc");
    assert_eq!(s.get(&format!("/v2/d?id=100000&m=1&enc={}", hex(&sealed))).await.status(), 200);
}
