//! Scheduling beyond one pool (docs/scheduling.md): the weighted split (ratios over 10,000
//! client addresses, stickiness, the share a weight change moves), backup pools and
//! `when_all_down` while health checks take nodes down, CNAME answers on `dig`/`kdig` and on
//! `/d`, wildcard names, rules by app version and tag, validation, and `apply -f`.

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::live::{node_listener, FAIL, OK};
use crate::support::{eventually, Db, Server, TOKEN};
use crate::upstream::{fake_upstream, Seen};

/// The `n`-th of the test's client addresses (11.0.0.0 up, one per address).
fn client(n: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(11, 0, 0, 0)) + n)
}

/// `/d`'s answer for `name` and each of `clients`, 32 requests in flight.
async fn answers(s: &Server, name: &str, clients: impl Iterator<Item = Ipv4Addr>) -> Vec<String> {
    let urls: Vec<String> = clients.map(|ip| s.url(&format!("/d?dn={name}&ip={ip}"))).collect();
    let http = s.http.clone();
    stream::iter(urls)
        .map(|url| {
            let http = http.clone();
            async move { http.get(url).send().await.unwrap().text().await.unwrap() }
        })
        .buffered(32)
        .collect()
        .await
}

async fn two_vendors(s: &Server) {
    for (id, ip, pool) in [("a1", "1.1.1.1", "vendor-a"), ("b1", "2.2.2.2", "vendor-b")] {
        s.put_ok(
            &format!("/admin/v1/nodes/{id}"),
            json!({"ip": ip, "pool": pool, "isp": "telecom", "region": "beijing"}),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_follows_weights_sticks_and_moves_the_least_on_a_weight_change() {
    let (s, _tmp) = server_with_dns(None).await;
    two_vendors(&s).await;
    let split = |a: u32, b: u32| json!({"split": [{"pool": "vendor-a", "weight": a}, {"pool": "vendor-b", "weight": b}], "max_answers": 1});
    s.put_ok("/admin/v1/domains/cdn.sched.test", split(70, 30)).await;
    const N: u32 = 10_000;
    let before = answers(&s, "cdn.sched.test", (0..N).map(client)).await;
    let share_a = before.iter().filter(|a| *a == "1.1.1.1").count() as f64 / f64::from(N);
    eprintln!("split 70/30: vendor-a {share_a}");
    assert!(before.iter().all(|a| a == "1.1.1.1" || a == "2.2.2.2"), "one vendor each");
    assert!((share_a - 0.70).abs() <= 0.01, "vendor-a share {share_a} for weight 70/100");

    // Sticky: the same clients ask again and get the same vendor.
    let again = answers(&s, "cdn.sched.test", (0..2000).map(client)).await;
    assert_eq!(again[..], before[..2000]);

    // Plain DNS with the client's subnet agrees with /d (same choice, same client address).
    let dns = s.dns.unwrap();
    for n in [1u32, 2, 3, 500, 9999] {
        let ip = client(n);
        let got = dig_short(&dns, &["cdn.sched.test", "A", &format!("+subnet={ip}/32")]).await;
        assert_eq!(got.trim(), before[n as usize], "{ip}");
    }

    // 70/30 -> 60/40: only clients of the side that shrank move, 10% of all.
    s.put_ok("/admin/v1/domains/cdn.sched.test", split(60, 40)).await;
    let after = answers(&s, "cdn.sched.test", (0..N).map(client)).await;
    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    let b_to_a = before.iter().zip(&after).filter(|(b, a)| *b == "2.2.2.2" && *a == "1.1.1.1").count();
    let share_moved = moved as f64 / f64::from(N);
    assert!((share_moved - 0.10).abs() <= 0.01, "moved {share_moved}");
    assert_eq!(b_to_a, 0, "no client of the growing side moves");
    let share_a = after.iter().filter(|a| *a == "1.1.1.1").count() as f64 / f64::from(N);
    assert!((share_a - 0.60).abs() <= 0.01, "vendor-a share {share_a} for weight 60/100");
    // The figures docs/scheduling.md quotes (`--nocapture` shows them).
    eprintln!("split 60/40: vendor-a {share_a}; moved from 70/30: {share_moved}");

    // Explain names the split entry that decided.
    let ip = client(7);
    let (_, e) = s.admin(Method::GET, &format!("/admin/v1/explain?dn=cdn.sched.test&ip={ip}"), None).await;
    let answer = &e["answers"][0];
    assert_eq!(answer["decided_by"], "split", "{e}");
    assert_eq!(answer["split"]["total_weight"], 100);
    let expected_pool = if after[7] == "1.1.1.1" { "vendor-a" } else { "vendor-b" };
    assert_eq!(answer["pool"], expected_pool);
}

/// `dig +short` at the server (UDP), off the runtime (dig blocks).
async fn dig_short(dns: &std::net::SocketAddr, args: &[&str]) -> String {
    let mut all: Vec<String> = vec![
        format!("@{}", dns.ip()),
        "-p".into(),
        dns.port().to_string(),
        "+short".into(),
        "+tries=1".into(),
    ];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    tool("dig", all).await
}

async fn tool(name: &'static str, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(name).args(&args).output().expect("tool installed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

/// A port free on `ip` (the fake nodes listen on it at several loopback addresses).
async fn free_port(ip: &str) -> u16 {
    let probe = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    probe.local_addr().unwrap().port()
}

/// A server that takes loopback nodes and folds health into answers every 100 ms.
async fn checking_server() -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_ALLOW_PRIVATE_NODE_IPS".into(), "true".into());
    (Server::start_with(env, Some("[live]\nrefresh_interval_ms = 100\n")).await, tmp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_and_all_down_follow_the_health_checks() {
    let port = free_port("127.0.0.41").await;
    let (n41, _a) = node_listener("127.0.0.41", port, OK).await;
    let (n42, _b) = node_listener("127.0.0.42", port, OK).await;
    let (n43, _c) = node_listener("127.0.0.43", port, OK).await;
    let (s, _tmp) = checking_server().await;
    let check = json!({"health_check": {"kind": "http", "port": port, "path": "/health", "interval_ms": 100,
        "timeout_ms": 80, "healthy_threshold": 1, "unhealthy_threshold": 1, "expected_status": [200]}});
    for pool in ["primary", "spare"] {
        s.put_ok(&format!("/admin/v1/pools/{pool}"), check.clone()).await;
    }
    for (i, pool) in [(41, "primary"), (42, "primary"), (43, "spare")] {
        s.put_ok(
            &format!("/admin/v1/nodes/n{i}"),
            json!({"ip": format!("127.0.0.{i}"), "pool": pool, "isp": "telecom", "region": "beijing",
                   "latency_ms": i}),
        )
        .await;
    }
    let domain = |when: &str| json!({"pool": "primary", "backup_pool": "spare", "min_healthy": 2, "when_all_down": when, "max_answers": 8});
    s.put_ok("/admin/v1/domains/b.sched.test", domain("fail_open")).await;
    let answer = || async {
        let resp = s.get("/d?dn=b.sched.test&ip=1.2.3.4").await;
        let status = resp.headers()["x-httpdns-status"].to_str().unwrap().to_owned();
        let mut ips: Vec<String> = resp.text().await.unwrap().split(';').map(str::to_owned).collect();
        ips.sort();
        (ips.join(";"), status)
    };
    let reach = |want: (&'static str, &'static str)| {
        let answer = &answer;
        async move {
            let ok = eventually(Duration::from_secs(5), || async {
                answer().await == (want.0.into(), want.1.into())
            })
            .await;
            assert!(ok, "wanted {want:?}, got {:?}", answer().await);
        }
    };
    reach(("127.0.0.41;127.0.0.42", "ok")).await;

    // One primary node down: fewer than min_healthy (2) up, so the backup answers.
    n42.0.store(FAIL, Ordering::Relaxed);
    reach(("127.0.0.43", "ok")).await;
    let (_, e) = s.admin(Method::GET, "/admin/v1/explain?dn=b.sched.test&ip=1.2.3.4", None).await;
    assert_eq!(
        (&e["answers"][0]["decided_by"], &e["answers"][0]["chosen_pool"]),
        (&json!("backup"), &json!("primary"))
    );

    // The backup down too: the thin primary's live node beats nothing.
    n43.0.store(FAIL, Ordering::Relaxed);
    reach(("127.0.0.41", "ok")).await;

    // Everything down: when_all_down decides.
    n41.0.store(FAIL, Ordering::Relaxed);
    reach(("127.0.0.41;127.0.0.42", "fail-open")).await;
    s.put_ok("/admin/v1/domains/b.sched.test", domain("backup")).await;
    reach(("127.0.0.43", "fail-open")).await;
    s.put_ok("/admin/v1/domains/b.sched.test", domain("empty")).await;
    reach(("", "no-healthy-node")).await;

    // Back up: the primary again.
    n41.0.store(OK, Ordering::Relaxed);
    n42.0.store(OK, Ordering::Relaxed);
    reach(("127.0.0.41;127.0.0.42", "ok")).await;
}

/// A server with plain DNS on and `upstream` as its upstream resolver.
async fn server_with_dns(upstream: Option<std::net::SocketAddr>) -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_DNS_ADDR".into(), "127.0.0.1:0".into());
    if let Some(up) = upstream {
        env.insert("HTTPDNS_UPSTREAMS".into(), up.to_string());
    }
    let file = "[upstream]\nmin_ttl = 1\ntimeout_ms = 500\n";
    (Server::start_with(env, Some(file)).await, tmp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cname_answers_on_dig_kdig_and_d() {
    let seen: Seen = Arc::default();
    let (up, _task) = fake_upstream("127.0.0.1:0".parse().unwrap(), 300, Duration::ZERO, seen.clone()).await;
    let (s, _tmp) = server_with_dns(Some(up)).await;
    s.seed().await;
    s.put_ok("/admin/v1/domains/www.alias.test", json!({"cname": "cdn.partner.example", "ttl": 120})).await;
    s.put_ok("/admin/v1/domains/local.alias.test", json!({"cname": "www.example.com"})).await;
    let dns = s.dns.unwrap();

    // dig: the CNAME, then the target's address chosen upstream for the client's subnet.
    let out = dig_short(&dns, &["www.alias.test", "A", "+subnet=1.0.2.0/24"]).await;
    assert_eq!(out.lines().collect::<Vec<_>>(), ["cdn.partner.example.", "9.9.9.1"], "{out}");
    assert!(seen.lock().contains(&("cdn.partner.example.".into(), Some("1.0.2.0/24".into()))));
    let out = dig_short(&dns, &["www.alias.test", "CNAME"]).await;
    assert_eq!(out.trim(), "cdn.partner.example.");
    // kdig over TCP, full answer section: the CNAME carries the domain's TTL.
    let out = tool(
        "kdig",
        vec![
            format!("@{}", dns.ip()),
            "-p".into(),
            dns.port().to_string(),
            "+tcp".into(),
            "+noall".into(),
            "+answer".into(),
            "+subnet=8.8.8.0/24".into(),
            "www.alias.test".into(),
            "A".into(),
        ],
    )
    .await;
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["www.alias.test.", "120", "IN", "CNAME", "cdn.partner.example."], "{out}");
    assert_eq!((lines[1][0], lines[1][3], lines[1][4]), ("cdn.partner.example.", "A", "9.9.9.2"), "{out}");
    // An alias of a managed name: its records from the snapshot, for the same client.
    let out = dig_short(&dns, &["local.alias.test", "A", "+subnet=1.0.2.0/24"]).await;
    assert_eq!(out.lines().collect::<Vec<_>>(), ["www.example.com.", "2.2.2.1", "2.2.2.2"], "{out}");

    // DoH (wire format): the same CNAME and target for the client's subnet.
    let q = httpdns_dns::build_query(
        9,
        "www.alias.test.",
        hickory_proto::rr::RecordType::A,
        Some(("1.0.2.0".parse().unwrap(), 24)),
    )
    .unwrap();
    use base64::Engine as _;
    let wire = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&q);
    let resp = s.get(&format!("/dns-query?dns={wire}")).await;
    let m = hickory_proto::op::Message::from_vec(&resp.bytes().await.unwrap()).unwrap();
    let got: Vec<String> = m.answers.iter().map(|r| format!("{} {}", r.name, r.data)).collect();
    assert_eq!(got, ["www.alias.test. cdn.partner.example.", "cdn.partner.example. 9.9.9.1"]);

    // /d, /resolve and /v2/d: the target's addresses for the client.
    assert_eq!(s.text("/d?dn=www.alias.test&ip=1.0.2.77").await, "9.9.9.1");
    assert_eq!(s.text("/d?dn=www.alias.test&ip=8.8.8.8&ttl=1").await, "9.9.9.2,120");
    assert_eq!(s.text("/d?dn=local.alias.test&ip=1.0.2.77").await, "2.2.2.1;2.2.2.2");
    let body: Value = s.get("/resolve?host=www.alias.test&ip=1.0.2.77").await.json().await.unwrap();
    assert_eq!(body["dns"][0]["ips"], json!(["9.9.9.1"]));
    // Cached like any upstream name: asking again does not ask upstream again.
    let asked = seen.lock().len();
    assert_eq!(s.text("/d?dn=www.alias.test&ip=1.0.2.77").await, "9.9.9.1");
    assert_eq!(seen.lock().len(), asked);
}

#[tokio::test]
async fn wildcards_stand_for_one_label_and_the_exact_name_wins() {
    let (s, _tmp) = server_with_dns(None).await;
    two_vendors(&s).await;
    s.put_ok("/admin/v1/domains/*.img.sched.test", json!({"pool": "vendor-a"})).await;
    s.put_ok("/admin/v1/domains/special.img.sched.test", json!({"pool": "vendor-b"})).await;
    assert_eq!(s.text("/d?dn=a.img.sched.test&ip=1.2.3.4").await, "1.1.1.1");
    assert_eq!(s.text("/d?dn=special.img.sched.test&ip=1.2.3.4").await, "2.2.2.2");
    // Two labels deep and the parent itself are not covered.
    for name in ["x.a.img.sched.test", "img.sched.test"] {
        let resp = s.get(&format!("/d?dn={name}&ip=1.2.3.4")).await;
        assert_eq!(resp.headers()["x-httpdns-status"], "not-managed", "{name}");
    }
    let out = dig_short(&s.dns.unwrap(), &["b.img.sched.test", "A"]).await;
    assert_eq!(out.trim(), "1.1.1.1");
    let (status, got) = s.admin(Method::GET, "/admin/v1/domains/*.img.sched.test", None).await;
    assert_eq!((status, &got["pool"]), (StatusCode::OK, &json!("vendor-a")));
    for bad in ["*.test", "a.*.sched.test", "*x.sched.test"] {
        let (status, err) = s.put(&format!("/admin/v1/domains/{bad}"), json!({"pool": "vendor-a"})).await;
        assert_eq!((status, &err["field"]), (StatusCode::BAD_REQUEST, &json!("name")), "{bad}: {err}");
    }
}

#[tokio::test]
async fn rules_pick_pools_by_app_version_and_tag() {
    let s = Server::start(&Db::Sqlite).await;
    two_vendors(&s).await;
    s.put_ok(
        "/admin/v1/nodes/c1",
        json!({"ip": "3.3.3.3", "pool": "canary", "isp": "telecom", "region": "beijing"}),
    )
    .await;
    s.put_ok("/admin/v1/accounts/100", json!({"secret": "rules-secret"})).await;
    s.put_ok(
        "/admin/v1/domains/app.sched.test",
        json!({"pool": "vendor-a", "rules": [
            {"match": {"app_version": ">=5.2", "tag": "beta"}, "pool": "canary"},
            {"match": {"app_version": "<5"}, "pool": "vendor-b"}]}),
    )
    .await;
    let v2 = |query: &'static str| {
        let s = &s;
        async move {
            let body: Value =
                s.get(&format!("/v2/d?id=100&dn=app.sched.test{query}")).await.json().await.unwrap();
            body["data"]["answers"][0]["v4"]["ips"][0].as_str().unwrap_or_default().to_owned()
        }
    };
    assert_eq!(v2("&v=5.3&tags=vip,beta").await, "3.3.3.3");
    assert_eq!(v2("&v=1.0&sdns-app_version=5.2.0&sdns-tag=beta").await, "3.3.3.3");
    assert_eq!(v2("&v=5.3&tags=vip").await, "1.1.1.1", "no beta tag: no canary");
    assert_eq!(v2("&v=4.9.1").await, "2.2.2.2");
    assert_eq!(v2("").await, "1.1.1.1", "no version: no version rule");
    let resolve = |query: &'static str| {
        let s = &s;
        async move {
            let body: Value =
                s.get(&format!("/resolve?host=app.sched.test{query}")).await.json().await.unwrap();
            body["dns"][0]["ips"][0].as_str().unwrap_or_default().to_owned()
        }
    };
    assert_eq!(resolve("&app_version=6&tag=beta").await, "3.3.3.3");
    assert_eq!(resolve("&app_version=4.0").await, "2.2.2.2");
    assert_eq!(resolve("").await, "1.1.1.1");
    let (_, e) = s
        .admin(Method::GET, "/admin/v1/explain?dn=app.sched.test&ip=1.2.3.4&app_version=5.4&tag=beta", None)
        .await;
    let a = &e["answers"][0];
    assert_eq!(
        (&a["decided_by"], &a["rule"]["index"], &a["pool"]),
        (&json!("rule"), &json!(0), &json!("canary"))
    );
}

#[tokio::test]
async fn bad_scheduling_fields_are_refused_naming_the_field() {
    let s = Server::start(&Db::Sqlite).await;
    let cases = [
        (json!({}), "pool"),
        (json!({"pool": "a", "split": [{"pool": "b", "weight": 1}]}), "split"),
        (json!({"split": [{"pool": "a", "weight": 1}, {"pool": "a", "weight": 2}]}), "split[1].pool"),
        (json!({"split": [{"pool": "a", "weight": 2000000}]}), "split[0].weight"),
        (json!({"pool": "a", "when_all_down": "backup"}), "when_all_down"),
        (json!({"pool": "a", "when_all_down": "sometimes"}), "when_all_down"),
        (
            json!({"pool": "a", "rules": [{"match": {"app_version": "=>5"}, "pool": "b"}]}),
            "rules[0].match.app_version",
        ),
        (json!({"pool": "a", "rules": [{"match": {}, "pool": "b"}]}), "rules[0].match"),
        (json!({"cname": "x.example", "backup_pool": "b"}), "backup_pool"),
        (json!({"cname": "not a name"}), "cname"),
    ];
    for (body, field) in cases {
        let (status, err) = s.put("/admin/v1/domains/bad.sched.test", body.clone()).await;
        assert_eq!((status, err["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{body}: {err}");
    }
    let (status, _) = s.admin(Method::GET, "/admin/v1/domains/bad.sched.test", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing half-written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_and_export_know_the_scheduling_fields() {
    let s = Server::start(&Db::Sqlite).await;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("state.yaml");
    std::fs::write(
        &file,
        r#"domains:
  "*.img.apply.test": {pool: edge}
  split.apply.test:
    split: [{pool: vendor-a, weight: 70}, {pool: vendor-b, weight: 30}]
    backup_pool: spare
    min_healthy: 2
    when_all_down: backup
    rules: [{match: {app_version: ">=5.2", tag: beta}, pool: canary}]
  alias.apply.test: {cname: cdn.vendor.example, ttl: 300}
"#,
    )
    .unwrap();
    let base = s.url("");
    let run = |args: Vec<String>| async move {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_httpdns"))
                .args(&args)
                .env_remove("HTTPDNS_ADMIN_TOKEN")
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let admin = |mut args: Vec<String>| {
        args.extend(["--server".into(), base.clone(), "--token".into(), TOKEN.into()]);
        args
    };
    let out = run(admin(vec!["apply".into(), "-f".into(), file.display().to_string()])).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, got) = s.admin(Method::GET, "/admin/v1/domains/split.apply.test", None).await;
    assert_eq!(got["split"][1], json!({"pool": "vendor-b", "weight": 30}));
    assert_eq!(
        (&got["when_all_down"], &got["rules"][0]["match"]["app_version"]),
        (&json!("backup"), &json!(">=5.2"))
    );
    let (status, _) = s.admin(Method::GET, "/admin/v1/domains/*.img.apply.test", None).await;
    assert_eq!(status, StatusCode::OK);
    // Exported and applied back: no change.
    let exported = tmp.path().join("export.yaml");
    let out = run(admin(vec!["export".into(), "-o".into(), exported.display().to_string()])).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out =
        run(admin(vec!["apply".into(), "-f".into(), exported.display().to_string(), "--dry-run".into()]))
            .await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no changes");
    let text = std::fs::read_to_string(&exported).unwrap();
    assert!(text.contains("cname: cdn.vendor.example") && text.contains("min_healthy: 2"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_domain_stats_by_frontend_and_place_and_the_busiest_series() {
    let (s, _tmp) = server_with_dns(None).await;
    s.seed().await;
    two_vendors(&s).await;
    s.put_ok("/admin/v1/domains/*.img.sched.test", json!({"pool": "vendor-a"})).await;
    for _ in 0..3 {
        s.text("/d?dn=www.example.com&ip=1.0.1.9").await;
    }
    s.text("/resolve?host=www.example.com&ip=1.0.2.9").await;
    let dns = s.dns.unwrap();
    for sub in ["+subnet=1.0.2.0/24", "+tcp"] {
        dig_short(&dns, &["www.example.com", "A", sub]).await;
    }
    s.text("/d?dn=a.img.sched.test&ip=1.0.1.9").await;
    s.text("/d?dn=b.img.sched.test&ip=1.0.1.9").await;

    let (status, st) = s.admin(Method::GET, "/admin/v1/domains/www.example.com/stats?window=1h", None).await;
    assert_eq!(status, StatusCode::OK, "{st}");
    assert_eq!(st["total"], 6, "{st}");
    assert_eq!(st["by_frontend"], json!({"d": 3, "resolve": 1, "udp": 1, "tcp": 1}), "{st}");
    let places = st["by_place"].as_array().unwrap();
    assert_eq!(places[0], json!({"isp": "telecom", "region": "beijing", "queries": 3}), "{st}");
    assert!(places.contains(&json!({"isp": "unicom", "region": "shanghai", "queries": 2})), "{st}");
    assert_eq!(
        st["series"].as_array().unwrap().iter().map(|m| m["queries"].as_u64().unwrap()).sum::<u64>(),
        6
    );
    // A wildcard's figures are those of the names it answered.
    let (_, w) = s.admin(Method::GET, "/admin/v1/domains/*.img.sched.test/stats", None).await;
    assert_eq!(w["total"], 2, "{w}");

    let (status, err) = s.admin(Method::GET, "/admin/v1/domains/www.example.com/stats?window=2h", None).await;
    assert_eq!((status, &err["field"]), (StatusCode::BAD_REQUEST, &json!("window")));
    let (status, _) = s.admin(Method::GET, "/admin/v1/domains/nope.sched.test/stats", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s
        .http
        .get(s.url("/admin/v1/domains/www.example.com/stats"))
        .send()
        .await
        .map(|r| (r.status(), ()))
        .unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let metrics = s.text("/metrics").await;
    assert!(metrics.contains("httpdns_domain_queries_recent{domain=\"www.example.com\"} 6"), "{metrics}");
    assert!(metrics.contains("httpdns_domain_queries_recent{domain=\"*.img.sched.test\"} 2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_take_expected_statuses_and_a_body_match() {
    let port = free_port("127.0.0.51").await;
    let (_ok, _a) = node_listener("127.0.0.51", port, OK).await;
    let (_failing, _b) = node_listener("127.0.0.52", port, FAIL).await;
    let (s, _tmp) = checking_server().await;
    let check = |extra: Value| {
        let mut hc = json!({"kind": "http", "port": port, "path": "/health", "interval_ms": 100,
            "timeout_ms": 80, "healthy_threshold": 1, "unhealthy_threshold": 1});
        hc.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"health_check": hc})
    };
    s.put_ok("/admin/v1/pools/hc", check(json!({"expected_status": [500]}))).await;
    for i in [51, 52] {
        s.put_ok(
            &format!("/admin/v1/nodes/n{i}"),
            json!({"ip": format!("127.0.0.{i}"), "pool": "hc", "isp": "telecom", "region": "beijing"}),
        )
        .await;
    }
    s.put_ok("/admin/v1/domains/hc.sched.test", json!({"pool": "hc", "max_answers": 8})).await;
    let answer = || async {
        let resp = s.get("/d?dn=hc.sched.test&ip=1.2.3.4").await;
        let status = resp.headers()["x-httpdns-status"].to_str().unwrap().to_owned();
        (resp.text().await.unwrap(), status)
    };
    // Only 500 counts as healthy: the node answering 200 leaves.
    let ok =
        eventually(Duration::from_secs(5), || async { answer().await == ("127.0.0.52".into(), "ok".into()) })
            .await;
    assert!(ok, "{:?}", answer().await);
    // A body match no node's (empty) body holds: every node down, the pool fails open.
    s.put_ok("/admin/v1/pools/hc", check(json!({"body_match": "ready"}))).await;
    let ok = eventually(Duration::from_secs(5), || async { answer().await.1 == "fail-open" }).await;
    assert!(ok, "{:?}", answer().await);
    let tcp = json!({"health_check": {"kind": "tcp", "port": port, "body_match": "x"}});
    let (status, err) = s.put("/admin/v1/pools/hc", tcp).await;
    assert_eq!((status, &err["field"]), (StatusCode::BAD_REQUEST, &json!("health_check.body_match")));
}
