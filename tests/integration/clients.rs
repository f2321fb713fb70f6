//! The vendors' clients, as independent implementations written from the official SDKs'
//! behaviour (`tests/peers/aliyun_client.py`, `tests/peers/tencent_client.py`): Alibaba's
//! bootstrap through `/{account}/ss` then `/v2/d` in modes 0, 1 and 2, with replica failover;
//! Tencent's `/d` in every cipher and answer shape, read the way the SDKs read it (the
//! Android SDK's single 1024-byte read and regexes, the iOS SDK's line parser).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{eventually, Db, Process, Server};

const ACCOUNT: &str = "100000";
/// The SDKs' signing secret and AES key are hex.
const SECRET: &str = "0123456789abcdef0123456789abcdef";
const AES_KEY: &str = "00112233445566778899aabbccddeeff";
const TENCENT_KEY: &str = "dnspodpass123456";

/// A port that was free a moment ago, for a listener that must know its address before it
/// starts (it announces it in `/ss`).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs a peer script; `None` (after `skipped`) when Python or `cryptography` is missing.
async fn peer(script: &str, args: Vec<String>) -> Option<Value> {
    let have = std::process::Command::new("python3")
        .args(["-c", "import cryptography"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        httpdns_test_support::skipped("SDK client peers", "python3 with cryptography is not installed");
        return None;
    }
    let path = format!("{}/tests/peers/{script}", env!("CARGO_MANIFEST_DIR"));
    // The peer blocks, and in-process servers run on this test's runtime: run it off it.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3").arg(&path).args(&args).output().unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

async fn seed_accounts(s: &Server) {
    s.seed().await;
    s.put_ok(&format!("/admin/v1/accounts/{ACCOUNT}"), json!({"secret": SECRET, "aes_key": AES_KEY})).await;
    // 16 characters: the iOS SDK's AES key is the first 16 bytes of the text (it reads past a
    // shorter one), Android pads a shorter one with '0'.
    s.put_ok("/admin/v1/accounts/42", json!({"secret": TENCENT_KEY})).await;
}

fn announcing(db: &Db, data_dir: &std::path::Path, port: u16) -> HashMap<String, String> {
    let mut env = crate::support::env(data_dir, db);
    env.insert("HTTPDNS_API_ADDR".into(), format!("127.0.0.1:{port}"));
    env.insert("HTTPDNS_PUBLIC_ADDRS".into(), format!("127.0.0.1:{port}"));
    env
}

#[tokio::test]
async fn aliyun_sdk_bootstraps_from_ss_and_resolves_in_every_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let s = Server::start_with(announcing(&Db::Sqlite, tmp.path(), port), None).await;
    seed_accounts(&s).await;
    let boot = format!("127.0.0.1:{port}");

    // The list itself: equal-length port arrays, any SDK's query parameters accepted.
    for path in [
        "/100000/ss?platform=android&sdk_version=2.6.7&region=global&sid=Ab3dEfGh1234",
        "/100000/ss?region=global&platform=ios&sdk_version=3.4.2&sid=x&net=wifi",
        "/100000/ss?region=global&platform=linux&sdkVersion=2.2.5&s=abc&t=1&n=0123456789ab",
        "/100000/ss",
        "/ss",
    ] {
        let v: Value = s.get(path).await.json().await.unwrap();
        assert_eq!(
            v,
            json!({"service_ip": ["127.0.0.1"], "service_ipv6": [], "service_ip_port": [port], "service_ipv6_port": []}),
            "{path}"
        );
    }
    let unknown = s.get("/999/ss").await;
    assert_eq!(unknown.status(), 403);
    assert_eq!(unknown.json::<Value>().await.unwrap()["code"], "InvalidAccount");

    for (mode, signed) in [(0, false), (0, true), (1, true), (2, true), (1, false)] {
        let mut a = args(&[
            "--boot",
            &boot,
            "--account",
            ACCOUNT,
            "--aes-key",
            AES_KEY,
            "--mode",
            &mode.to_string(),
            "--hosts",
            "www.example.com,WWW.Example.COM,nx.example.org",
            "--q",
            "4,6",
            "--cip",
            "1.0.1.7",
        ]);
        if signed {
            a.extend(args(&["--secret", SECRET]));
        }
        let Some(r) = peer("aliyun_client.py", a).await else { return };
        assert!(r.get("error").is_none(), "mode {mode}: {r}");
        assert_eq!(r["used"], boot, "{r}");
        let answers = &r["answers"];
        for dn in ["www.example.com", "WWW.Example.COM"] {
            assert_eq!(
                answers[dn]["v4"]["ips"],
                json!(["1.1.1.1", "1.1.1.2"]),
                "mode {mode}, {dn} echoed: {r}"
            );
            assert_eq!(answers[dn]["v6"]["ips"], json!(["2402:4e00::1"]), "mode {mode}: {r}");
            assert_eq!(answers[dn]["v4"]["raw_ttl"], 60, "{r}");
        }
        let nx = &answers["nx.example.org"];
        assert_eq!(nx["v4"]["ips"], json!([]), "{r}");
        assert_eq!(nx["v4"]["no_ip_code"], "RRNotExist", "{r}");
        assert!(nx["v6"]["raw_ttl"].as_u64().unwrap() > 0, "an empty family keeps a TTL: {r}");
    }

    // The v1 API of the Go and C SDKs through the same client: /{account}/d, /resolve and the
    // signed sign_d / sign_resolve (MD5 of host-secret-expiry), single and batch.
    s.put_ok("/admin/v1/domains/img.example.com", json!({"pool": "edge", "ttl": 90})).await;
    for (api, hosts) in [
        ("d", "www.example.com"),
        ("resolve", "www.example.com"),
        ("resolve", "www.example.com,img.example.com"),
        ("sign_d", "www.example.com"),
        ("sign_resolve", "www.example.com,img.example.com"),
    ] {
        let a = args(&[
            "--boot",
            &boot,
            "--account",
            ACCOUNT,
            "--secret",
            SECRET,
            "--api",
            api,
            "--hosts",
            hosts,
            "--q",
            "4,6",
            "--cip",
            "1.0.1.7",
        ]);
        let Some(r) = peer("aliyun_client.py", a).await else { return };
        assert!(r.get("error").is_none(), "{api} {hosts}: {r}");
        for (dn, ttl) in
            [("www.example.com", 60), ("img.example.com", 90)].into_iter().take(hosts.split(',').count())
        {
            let a = &r["answers"][dn];
            assert_eq!(a["v4"]["ips"], json!(["1.1.1.1", "1.1.1.2"]), "{api} {dn}: {r}");
            assert_eq!(a["v6"]["ips"], json!(["2402:4e00::1"]), "{api} {dn}: {r}");
            assert_eq!(a["v4"]["raw_ttl"], ttl, "{api} {dn}: {r}");
            assert_eq!(a["client_ip"], "1.0.1.7", "{api}: {r}");
        }
    }
    for (extra, code) in
        [(&["--tamper"][..], "InvalidSignature"), (&["--exp-offset", "-1000"][..], "SignatureExpired")]
    {
        let mut a = args(&[
            "--boot",
            &boot,
            "--account",
            ACCOUNT,
            "--secret",
            SECRET,
            "--api",
            "sign_d",
            "--hosts",
            "www.example.com",
        ]);
        a.extend(args(extra));
        let Some(r) = peer("aliyun_client.py", a).await else { return };
        assert_eq!((&r["status"], &r["error"]), (&json!(403), &json!(format!("code {code}"))), "{r}");
    }

    // Android leaves q out for IPv4 only: the default is 4, and no v6 object comes back.
    let Some(r) = peer(
        "aliyun_client.py",
        args(&["--boot", &boot, "--account", ACCOUNT, "--hosts", "www.example.com", "--cip", "1.0.2.7"]),
    )
    .await
    else {
        return;
    };
    assert_eq!(
        r["answers"]["www.example.com"],
        json!({"v4": {"ips": ["2.2.2.1", "2.2.2.2"], "ttl": 60, "raw_ttl": 60, "no_ip_code": null}}),
        "{r}"
    );

    // iOS: mode 1 only, data an object in mode 0, answers non-empty.
    for mode in ["0", "1"] {
        let Some(r) = peer(
            "aliyun_client.py",
            args(&[
                "--boot",
                &boot,
                "--account",
                ACCOUNT,
                "--aes-key",
                AES_KEY,
                "--secret",
                SECRET,
                "--mode",
                mode,
                "--ios",
                "--hosts",
                "www.example.com",
                "--q",
                "4",
            ]),
        )
        .await
        else {
            return;
        };
        assert!(r.get("error").is_none(), "iOS mode {mode}: {r}");
    }

    // Refusals the SDKs act on (no retry, no server switch): a non-200 with the code.
    for (extra, code) in [
        (vec!["--secret", SECRET, "--tamper"], "InvalidSignature"),
        (vec!["--secret", SECRET, "--exp-offset", "-30"], "SignatureExpired"),
        (vec!["--secret", SECRET, "--exp-offset", "200000"], "InvalidDuration"),
        (vec!["--hosts", "bad..name"], "InvalidHost"),
    ] {
        let mut a = args(&["--boot", &boot, "--account", ACCOUNT, "--hosts", "www.example.com"]);
        a.extend(args(&extra));
        let Some(r) = peer("aliyun_client.py", a).await else { return };
        assert_eq!(r["error"], format!("code {code}"), "{r}");
        assert_eq!(r["status"], if code == "InvalidHost" { 400 } else { 403 }, "{r}");
    }
}

#[tokio::test]
async fn v2_d_answers_errors_as_the_sdks_expect() {
    let s = Server::start(&Db::Sqlite).await;
    seed_accounts(&s).await;
    let cases: [(&str, u16, &str, Option<&str>); 9] = [
        ("/v2/d?m=0&dn=www.example.com", 400, "MissingArgument", Some("id")),
        ("/v2/d?id=100000&m=0", 400, "MissingArgument", Some("dn")),
        ("/v2/d?id=100000&m=0&dn=a,b,c,d,e,f", 400, "TooManyHosts", Some("dn")),
        ("/v2/d?id=100000&m=7&dn=a.com", 400, "InvalidArgument", Some("m")),
        ("/v2/d?id=100000&m=0&dn=a.com&q=5", 400, "InvalidArgument", Some("q")),
        ("/v2/d?id=100000&m=2&enc=00", 400, "InvalidArgument", Some("enc")),
        ("/v2/d?id=100000&m=1", 400, "MissingArgument", Some("enc")),
        ("/v2/d?id=5&m=0&dn=a.com", 403, "InvalidAccount", Some("id")),
        ("/v2/d?id=42&m=2&enc=00", 403, "EncryptionNotEnabled", Some("m")),
    ];
    for (path, status, code, field) in cases {
        let resp = s.get(path).await;
        assert_eq!(resp.status().as_u16(), status, "{path}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["code"], code, "{path}: {v}");
        assert_eq!(v["field"].as_str(), field, "{path}: {v}");
    }
    let post = s.http.post(s.url("/v2/d?id=100000&dn=a.com")).send().await.unwrap();
    assert_eq!(post.status(), 405);
    // The plain answer: `data` an object, `mode` repeated, `cip` the client.
    let v: Value =
        s.get("/v2/d?id=100000&m=0&dn=www.example.com&cip=1.0.2.7&v=1.0").await.json().await.unwrap();
    assert_eq!(
        v,
        json!({"code": "success", "mode": 0, "data": {"cip": "1.0.2.7", "answers": [
            {"dn": "www.example.com", "v4": {"ips": ["2.2.2.1", "2.2.2.2"], "ttl": 60}}]}})
    );
}

#[tokio::test]
async fn aliyun_clients_fail_over_when_a_replica_dies() {
    let tmp = tempfile::tempdir().unwrap();
    // Two replicas on one database (SQLite in WAL mode takes two processes).
    let shared = format!("sqlite://{}", tmp.path().join("shared.db").display());
    let (pa, pb) = (free_port(), free_port());
    let mut env_a = announcing(&Db::Sqlite, &tmp.path().join("a"), pa);
    env_a.insert("HTTPDNS_DATABASE_URL".into(), shared.clone());
    let a = Server::start_with(env_a, None).await;
    seed_accounts(&a).await;
    let mut env_b = announcing(&Db::Sqlite, &tmp.path().join("b"), pb);
    env_b.insert("HTTPDNS_DATABASE_URL".into(), shared);
    let b = Process::spawn(&env_b, tmp.path());
    let listed = |s: &Server, port: u16| {
        let (http, url) = (s.http.clone(), s.url("/100000/ss"));
        async move {
            let v: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
            v["service_ip_port"].as_array().unwrap().iter().any(|p| p == port)
        }
    };
    assert!(eventually(Duration::from_secs(10), || listed(&a, pb)).await, "A lists B");
    let v: Value = reqwest::get(format!("{}/100000/ss", b.base)).await.unwrap().json().await.unwrap();
    assert_eq!(v["service_ip"].as_array().unwrap().len(), 2, "B lists both: {v}");

    // B dies without a word: it leaves A's list once its row stops changing.
    let killed = Instant::now();
    drop(b);
    assert!(
        eventually(Duration::from_secs(15), || async { !listed(&a, pb).await }).await,
        "A drops the dead replica"
    );
    let gone_after = killed.elapsed();
    assert!(gone_after < Duration::from_secs(12), "dead replica listed for {gone_after:?}");
    eprintln!("a killed replica left /ss after {gone_after:?}");

    // A client that still has B first: B refuses, A answers /ss, and resolution goes to A.
    let boot = format!("127.0.0.1:{pb},127.0.0.1:{pa}");
    let Some(r) = peer(
        "aliyun_client.py",
        args(&["--boot", &boot, "--account", ACCOUNT, "--hosts", "www.example.com", "--cip", "1.0.1.7"]),
    )
    .await
    else {
        return;
    };
    assert_eq!(r["service_ips"], json!([format!("127.0.0.1:{pa}")]), "{r}");
    assert_eq!(r["used"], format!("127.0.0.1:{pa}"), "{r}");
    assert_eq!(r["answers"]["www.example.com"]["v4"]["ips"], json!(["1.1.1.1", "1.1.1.2"]), "{r}");

    // A replica that stops cleanly leaves at once (A's next read).
    let b = Process::spawn(&env_b, tmp.path());
    assert!(eventually(Duration::from_secs(10), || listed(&a, pb)).await, "B is back");
    let stopping = Instant::now();
    assert!(b.terminate().success());
    // Within A's next read (every 2 s), well before the 6 s a dead replica's row takes to expire:
    // a clean stop that failed to delete its row would not pass.
    assert!(eventually(Duration::from_secs(4), || async { !listed(&a, pb).await }).await);
    eprintln!("a stopped replica left /ss after {:?}", stopping.elapsed());
}

#[tokio::test]
async fn tencent_sdks_read_every_answer_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut env = announcing(&Db::Sqlite, tmp.path(), port);
    env.insert("HTTPDNS_PUBLIC_ADDRS".into(), format!("127.0.0.1:{port},127.0.0.9,[::1]"));
    let s = Server::start_with(env, None).await;
    seed_accounts(&s).await;
    let server = format!("127.0.0.1:{port}");
    for sdk in ["android", "ios"] {
        for alg in ["des", "aes", "none"] {
            for qtype in ["a", "aaaa", "addrs"] {
                for hosts in ["www.example.com", "www.example.com,nx.example.org"] {
                    let a = args(&[
                        "--server",
                        &server,
                        "--sdk",
                        sdk,
                        "--alg",
                        alg,
                        "--id",
                        "42",
                        "--key",
                        TENCENT_KEY,
                        "--hosts",
                        hosts,
                        "--type",
                        qtype,
                    ]);
                    let Some(r) = peer("tencent_client.py", a).await else { return };
                    let case = format!("{sdk} {alg} {qtype} {hosts}: {r}");
                    assert!(r.get("error").is_none(), "{case}");
                    let answers = &r["answers"];
                    // Android reads a one-line body as a single answer, keyed "" here.
                    let key = if sdk == "android" && !hosts.contains(',') { "" } else { "www.example.com" };
                    let got = &answers[key];
                    match qtype {
                        "a" => assert!(!got["ips"].as_array().unwrap().is_empty(), "{case}"),
                        "aaaa" => assert_eq!(got["ips"], json!(["2402:4e00::1"]), "{case}"),
                        _ => {
                            assert!(!got["v4"].as_array().unwrap().is_empty(), "{case}");
                            assert_eq!(got["v6"], json!(["2402:4e00::1"]), "{case}");
                        }
                    }
                    if hosts.contains(',') && sdk == "android" {
                        // The unmanaged name's line still parses (its "0" is dropped).
                        let nx = &answers["nx.example.org"];
                        assert!(!nx.is_null(), "{case}");
                    }
                    // No response shape exceeds the SDK's single read; the cip is on every line.
                    let body = r["body"].as_str().unwrap();
                    assert!(body.lines().all(|l| l.contains('|')), "{case}");
                }
            }
        }
    }
    // The Tencent SDK's service-IP config, encrypted like /d.
    let conf = s.text("/conf?id=42&alg=des").await;
    let plain = httpdns_auth::decrypt(httpdns_auth::Alg::Des, TENCENT_KEY, &conf).unwrap();
    // Tencent's SDKs connect to port 80 over IPv4: only such addresses are listed.
    assert_eq!(plain, "log:0|domain:0|ip:127.0.0.9|ttl:60");
    let plain = s.text("/conf").await;
    assert_eq!(plain, "log:0|domain:0|ip:127.0.0.9|ttl:60", "no account: plain");
}

/// A server started with its defaults announces no public address: `/ss` then lists the
/// address the request reached (else the vendors' SDKs stop with an empty list: the official Go
/// SDK's "failed to fetch service IPs"), and an SDK bootstraps from it and resolves. `/conf`
/// lists it too when it is on the default port only (Tencent's SDKs connect on port 80).
#[tokio::test]
async fn a_fresh_server_lists_the_address_it_was_reached_at() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_with(crate::support::env(tmp.path(), &Db::Sqlite), None).await;
    seed_accounts(&s).await;
    let reached: std::net::SocketAddr =
        s.url("").trim_start_matches("http://").trim_end_matches('/').parse().unwrap();
    for path in ["/100000/ss", "/ss"] {
        let v: Value = s.get(path).await.json().await.unwrap();
        assert_eq!(
            v,
            json!({"service_ip": [reached.ip().to_string()], "service_ipv6": [],
                   "service_ip_port": [reached.port()], "service_ipv6_port": []}),
            "{path}"
        );
    }
    // Not on port 80: not for Tencent's SDKs, and no empty `ip:` (the Android SDK's parse
    // fails on it before it reads the switches).
    assert_eq!(s.text("/conf").await, "log:0|domain:0|ttl:60", "not on port 80: not for Tencent's SDKs");
    let boot = reached.to_string();
    let Some(r) = peer(
        "aliyun_client.py",
        args(&[
            "--boot",
            &boot,
            "--account",
            ACCOUNT,
            "--mode",
            "0",
            "--hosts",
            "www.example.com",
            "--cip",
            "1.0.1.7",
        ]),
    )
    .await
    else {
        return;
    };
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(r["used"], boot, "the SDK moved to the listed address: {r}");
    assert_eq!(r["answers"]["www.example.com"]["v4"]["ips"], json!(["1.1.1.1", "1.1.1.2"]), "{r}");
}
