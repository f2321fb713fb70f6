//! Hostile and impatient clients against the real binary (issue: hostile and failing clients).
//! Each test here failed before its fix.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{env, Admin, Db, Process};
use crate::upstream::{fake_upstream, Seen};

/// A client that hangs up while its name is being resolved upstream must not leave the name
/// poisoned: the next client gets the answer as soon as the upstream gives it.
#[tokio::test]
async fn a_client_that_hangs_up_mid_lookup_poisons_nothing() {
    let seen: Seen = Arc::default();
    let (up, _task) =
        fake_upstream("127.0.0.1:0".parse().unwrap(), 300, Duration::from_millis(1500), seen.clone()).await;
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_UPSTREAMS".into(), up.to_string());
    let p = Process::spawn(&e, tmp.path());

    for (route, name) in [("/d?dn=", "slow.partner.example"), ("/resolve?host=", "slow2.partner.example")] {
        let url = format!("{}{route}{name}&ip=1.0.2.7", p.base);
        let impatient =
            httpdns_test_support::http::client_builder().timeout(Duration::from_millis(300)).build().unwrap();
        assert!(impatient.get(&url).send().await.is_err(), "the first client gives up");
        let started = Instant::now();
        let patient =
            httpdns_test_support::http::client_builder().timeout(Duration::from_secs(10)).build().unwrap();
        let resp = patient.get(&url).send().await.expect("the next client is answered");
        let body = resp.text().await.unwrap();
        assert!(body.contains("9.9.9.1"), "{route}: {body}");
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{route}: the second client joined the query already out ({:?})",
            started.elapsed()
        );
        // And a third, later one is answered from the cache.
        let started = Instant::now();
        let body = patient.get(&url).send().await.unwrap().text().await.unwrap();
        assert!(body.contains("9.9.9.1") && started.elapsed() < Duration::from_millis(500), "{body}");
        let asked = seen.lock().iter().filter(|(n, _)| n == &format!("{name}.")).count();
        assert_eq!(asked, 1, "{route}: one upstream query for all three clients");
    }
}

/// A mirror client that hangs up while its miss is being fetched does not cancel the fill:
/// the next client gets the object as soon as the origin has sent it, from one origin fetch.
#[tokio::test]
async fn a_mirror_client_that_hangs_up_mid_fill_harms_nobody() {
    let origin = crate::origin::RunningOrigin::start().await;
    origin.origin.put("/slow.bin", vec![7u8; 300_000], "application/octet-stream");
    origin.origin.mode("/slow.bin", crate::origin::Mode::Stall(Duration::from_millis(1200)));
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    let p = Process::spawn(&e, tmp.path());
    let admin = Admin::new(&p.base);
    admin
        .put("/admin/v1/mirror/rules/s", serde_json::json!({"path_prefix": "/s", "origin": origin.url()}))
        .await;
    let url = format!("http://{}/s/slow.bin", p.mirror.unwrap());
    let impatient =
        httpdns_test_support::http::client_builder().timeout(Duration::from_millis(200)).build().unwrap();
    assert!(impatient.get(&url).send().await.is_err());
    let started = Instant::now();
    let resp = reqwest::get(&url).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.bytes().await.unwrap().len(), 300_000);
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "joined the fill in progress: {:?}",
        started.elapsed()
    );
    assert_eq!(origin.origin.requests("/slow.bin"), 1);
}

/// Config requests that claim a newer version than any make this replica reload from the
/// database at most a few times a second, however many arrive and however many hang up.
#[tokio::test]
async fn clients_claiming_future_config_versions_cannot_hammer_the_database() {
    let tmp = tempfile::tempdir().unwrap();
    let p = Process::spawn(&env(tmp.path(), &Db::Sqlite), tmp.path());
    let admin = Admin::new(&p.base);
    admin
        .put(
            "/admin/v1/config/cdn",
            serde_json::json!({"mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.example.com", "rate": 1}],
                "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []}),
        )
        .await;
    let url = format!("{}/app/config-center/module-config", p.base);
    let started = Instant::now();
    let patient =
        httpdns_test_support::http::client_builder().timeout(Duration::from_secs(5)).build().unwrap();
    let impatient =
        httpdns_test_support::http::client_builder().timeout(Duration::from_millis(1)).build().unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (url, c) = (url.clone(), if i % 2 == 0 { impatient.clone() } else { patient.clone() });
        tasks.push(tokio::spawn(async move {
            let r = c.post(&url).body(r#"{"module": "cdn", "configVersion": 999999}"#).send().await;
            (i, r.map(|r| r.status()).map_err(|e| format!("{e:?}")))
        }));
    }
    for t in tasks {
        let (i, status) = t.await.unwrap();
        if i % 2 == 1 {
            assert_eq!(status, Ok(reqwest::StatusCode::OK), "patient request {i}");
        }
    }
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let metrics = reqwest::get(format!("{}/metrics", p.base)).await.unwrap().text().await.unwrap();
    let reloads: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("httpdns_config_client_refreshes_total "))
        .and_then(|v| v.parse().ok())
        .expect("the refresh counter is exported");
    let allowed = 2 + started.elapsed().as_millis() as u64 / 250;
    assert!(reloads >= 1 && reloads <= allowed, "{reloads} reloads in {:?}", started.elapsed());
}

/// Copies stored by the first layout (where `a.jpg` and `a.jpg/b` collided) move into the
/// current one at start and are served as before, from the store; staging files a crash left
/// behind are removed.
#[tokio::test]
async fn a_restart_migrates_old_copies_and_clears_crashed_fills() {
    let origin = crate::origin::RunningOrigin::start().await;
    origin.origin.put("/a.txt", b"kept across the upgrade".to_vec(), "text/plain");
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    let url = |p: &Process| format!("http://{}/m/a.txt", p.mirror.unwrap());
    {
        let p = Process::spawn(&e, tmp.path());
        Admin::new(&p.base)
            .put("/admin/v1/mirror/rules/m", serde_json::json!({"path_prefix": "/m", "origin": origin.url()}))
            .await;
        assert_eq!(reqwest::get(url(&p)).await.unwrap().text().await.unwrap(), "kept across the upgrade");
        let deadline = Instant::now() + Duration::from_secs(5);
        while reqwest::get(url(&p)).await.unwrap().headers()["x-cache"] != "HIT" {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(p.terminate().success());
    }
    // Put the copy where the first layout kept it: the store path as a file path.
    let mirror = tmp.path().join("mirror");
    let old = mirror.join("objects/o/m/a.txt");
    std::fs::create_dir_all(old.parent().unwrap()).unwrap();
    std::fs::rename(mirror.join("store/o/m/a.txt/~"), &old).unwrap();
    std::fs::remove_dir_all(mirror.join("store")).unwrap();
    // And a fill that a crash interrupted.
    std::fs::write(mirror.join("tmp/fill-crashed"), vec![0u8; 4096]).unwrap();
    let stopped = origin.stop();
    let p = Process::spawn(&e, tmp.path());
    let resp = reqwest::get(url(&p)).await.unwrap();
    assert_eq!(resp.headers()["x-cache"], "HIT", "served from the migrated copy (the origin is gone)");
    assert_eq!(resp.text().await.unwrap(), "kept across the upgrade");
    assert_eq!(stopped.requests("/a.txt"), 1);
    assert!(!mirror.join("objects").exists(), "the old layout is gone");
    assert!(std::fs::read_dir(mirror.join("tmp")).unwrap().next().is_none(), "no staging file is left");
    let log = std::fs::read_to_string(&p.log).unwrap();
    assert!(log.contains("Moved stored copies to the current store layout."), "{log}");
}

/// Mirror rules cannot point at this host or its link in any spelling (unless
/// `HTTPDNS_ALLOW_LOCAL_ORIGINS`), and a name that resolves there is refused at connect.
#[tokio::test]
async fn origins_on_this_host_are_refused_in_every_spelling() {
    let origin = crate::origin::RunningOrigin::start().await;
    origin.origin.put("/secret", b"metadata".to_vec(), "text/plain");
    let port = origin.addr.port();
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    e.insert("HTTPDNS_ALLOW_LOCAL_ORIGINS".into(), "false".into());
    let p = Process::spawn(&e, tmp.path());
    let http = httpdns_test_support::http::client();
    let put = |name: &str, body: serde_json::Value| {
        http.put(format!("{}/admin/v1/mirror/rules/{name}", p.base))
            .bearer_auth(crate::support::TOKEN)
            .body(body.to_string())
            .send()
    };
    for (i, origin_url) in [
        "http://169.254.169.254".to_owned(),
        format!("http://[::1]:{port}"),
        "http://0.0.0.0".to_owned(),
        format!("http://2130706433:{port}"),
        format!("http://0x7f.1:{port}"),
        format!("http://0177.0.0.1:{port}"),
        format!("http://127.1:{port}"),
        format!("http://[::ffff:127.0.0.1]:{port}"),
        "http://[::ffff:a9fe:a9fe]".to_owned(),
        format!("http://localhost:{port}"),
        format!("http://a.b.localhost:{port}"),
        "http://[fe80::1]".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        let resp =
            put(&format!("r{i}"), serde_json::json!({"path_prefix": format!("/r{i}"), "origin": origin_url}))
                .await
                .unwrap();
        assert_eq!(resp.status(), 400, "{origin_url}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["field"], "origin", "{origin_url}: {body}");
        let backup = put(
            &format!("b{i}"),
            serde_json::json!({"path_prefix": "/b", "origin": "http://10.1.2.3", "backup_origin": origin_url}),
        )
        .await
        .unwrap();
        assert_eq!(backup.status(), 400, "backup {origin_url}");
    }
    // Private ranges stay allowed: intranet origins are the normal case.
    let resp = put("intranet", serde_json::json!({"path_prefix": "/i", "origin": "http://10.1.2.3:9000"}))
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    // A name that resolves to loopback is created (names are not resolved then) but never
    // connected to.
    let Some(name) = loopback_name() else {
        httpdns_test_support::skipped("SSRF by DNS answer", "no name in /etc/hosts resolves to 127.0.0.1");
        return;
    };
    let resp =
        put("byname", serde_json::json!({"path_prefix": "/n", "origin": format!("http://{name}:{port}")}))
            .await
            .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let resp = reqwest::get(format!("http://{}/n/secret", p.mirror.unwrap())).await.unwrap();
    assert_eq!(resp.status(), 502);
    assert_eq!(origin.origin.requests("/secret"), 0, "the origin on loopback was never asked");
}

/// A name other than `localhost` that this machine's /etc/hosts maps to 127.0.0.1.
fn loopback_name() -> Option<String> {
    let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
    hosts.lines().find_map(|l| {
        let mut words = l.split('#').next()?.split_whitespace();
        (words.next()? == "127.0.0.1").then(|| words.find(|w| !w.contains("localhost")).map(str::to_owned))?
    })
}

/// With authentication required, feedback must be signed by an account; a signed account gains
/// no weight from reporting through more addresses.
#[tokio::test]
async fn feedback_needs_a_signature_when_auth_is_required_and_weighs_per_account() {
    use md5::Digest as _;
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_AUTH_REQUIRED".into(), "true".into());
    std::fs::write(
        tmp.path().join("httpdns.toml"),
        "[live]\nrefresh_interval_ms = 100\nfeedback_flush_ms = 200\n",
    )
    .unwrap();
    let p = Process::spawn_with_args(
        &e,
        tmp.path(),
        &["--config", tmp.path().join("httpdns.toml").to_str().unwrap(), "serve"],
    );
    let admin = Admin::new(&p.base);
    admin
        .put("/admin/v1/networks/127.0.0.0%2F8", serde_json::json!({"isp": "unicom", "region": "shanghai"}))
        .await;
    admin
        .put("/admin/v1/networks/1.0.2.0%2F24", serde_json::json!({"isp": "unicom", "region": "shanghai"}))
        .await;
    for (id, ip, latency) in [("fast", "2.2.2.1", 10), ("slow", "2.2.2.2", 100)] {
        admin
            .put(
                &format!("/admin/v1/nodes/{id}"),
                serde_json::json!({"ip": ip, "pool": "edge", "isp": "unicom", "region": "shanghai", "latency_ms": latency}),
            )
            .await;
    }
    admin.put("/admin/v1/domains/www.example.com", serde_json::json!({"pool": "edge"})).await;
    admin.put("/admin/v1/accounts/100", serde_json::json!({"secret": "app-secret-100"})).await;
    admin.put("/admin/v1/accounts/200", serde_json::json!({"secret": "app-secret-200"})).await;
    admin.put("/admin/v1/accounts/300", serde_json::json!({"secret": "attacker-secret"})).await;
    let t = (httpdns_core::clock::unix_s() + 600).to_string();
    let sign = |secret: &str, body: &str| {
        let digest = hex(&sha2::Sha256::digest(body.as_bytes()));
        hex(&md5::Md5::digest(format!("{digest}-{secret}-{t}").as_bytes()))
    };
    let send = |from: u8, query: String, body: String| {
        let c = httpdns_test_support::http::client_builder()
            .local_address(std::net::IpAddr::from([127, 0, 0, from]))
            .build()
            .unwrap();
        let url = format!("{}/feedback{query}", p.base);
        async move { c.post(url).body(body).send().await.unwrap() }
    };
    let report = |ms: u32| {
        serde_json::json!([{"ip": "2.2.2.1", "domain": "www.example.com", "ok": true, "connect_ms": ms}])
            .to_string()
    };
    // Unsigned and badly signed feedback is refused.
    let r = send(10, String::new(), report(5)).await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["code"], "UnsignedInterfaceDisabled");
    let r = send(10, format!("?account=100&t={t}&s=00000000000000000000000000000000"), report(5)).await;
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["code"], "InvalidSignature");
    // Two apps' users see the fast node at 10 ms...
    for (account, secret) in [("100", "app-secret-100"), ("200", "app-secret-200")] {
        for from in 20..23u8 {
            let body = report(10);
            let r = send(from, format!("?account={account}&t={t}&s={}", sign(secret, &body)), body).await;
            assert_eq!(r.status(), 202, "{:?}", r.text().await);
        }
    }
    // ...and an account reporting 3000 ms from ten addresses (more than both apps) does not
    // make it slow: the fast node stays first.
    for from in 40..50u8 {
        let body = report(3000);
        let r = send(from, format!("?account=300&t={t}&s={}", sign("attacker-secret", &body)), body).await;
        assert_eq!(r.status(), 202);
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let explain: serde_json::Value = httpdns_test_support::http::client()
        .get(format!("{}/admin/v1/explain?dn=www.example.com&ip=1.0.2.7", p.base))
        .bearer_auth(crate::support::TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let nodes = explain["answers"][0]["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["id"], "fast", "{explain}");
    assert_eq!(nodes[0]["latency_source"], "feedback", "{explain}");
    assert_eq!(nodes[0]["latency_ms"], 10.0, "each account has one say, however many addresses: {explain}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Small faults: If-Match lists, JSON 405s, the store error message, /metrics off the public
/// listener.
#[tokio::test]
async fn if_match_lists_json_405s_and_a_private_metrics_listener() {
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_METRICS_ADDR".into(), "127.0.0.1:0".into());
    let p = Process::spawn(&e, tmp.path());
    let admin = Admin::new(&p.base);
    let doc = serde_json::json!({"mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.example.com", "rate": 1}],
        "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []});
    admin.put("/admin/v1/config/cdn", doc.clone()).await;
    let http = httpdns_test_support::http::client();
    let publish = |if_match: &'static str| {
        http.put(format!("{}/admin/v1/config/cdn", p.base))
            .bearer_auth(crate::support::TOKEN)
            .header("if-match", if_match)
            .body(doc.to_string())
            .send()
    };
    // A list holding the current version matches (RFC 9110 §13.1.1).
    assert_eq!(publish(r#""99", "1""#).await.unwrap().status(), 200);
    for bad in [r#""99", "7""#, r#"W/"2""#, "garbage"] {
        let r = publish(bad).await.unwrap();
        assert_eq!(r.status(), 412, "{bad}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("it is \"2\""), "{bad}: {body}");
    }
    // 405s say so in JSON and list what is allowed.
    let r = http.delete(format!("{}/healthz", p.base)).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert!(r.headers().get("allow").is_some());
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "MethodNotAllowed");
    // /metrics lives on its own listener now, and not on the public one.
    assert_eq!(reqwest::get(format!("{}/metrics", p.base)).await.unwrap().status(), 404);
    let metrics = p.addr_of("metrics").unwrap();
    let text = reqwest::get(format!("http://{metrics}/metrics")).await.unwrap().text().await.unwrap();
    assert!(text.contains("httpdns_connections_open"), "{text}");
}
