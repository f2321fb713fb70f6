//! Live scores: health checks against real listeners, agent reports, app feedback, explain.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{eventually, Db, Server};

/// How a fake edge node answers its health check.
#[derive(Clone)]
pub(crate) struct Behaviour(pub(crate) Arc<AtomicU16>);

pub(crate) const OK: u16 = 200;
pub(crate) const FAIL: u16 = 500;
/// Accept, then never answer (slower than any timeout).
const STALL: u16 = 1;

/// An HTTP listener on `ip:port` whose status can be changed while it runs.
pub(crate) async fn node_listener(
    ip: &str,
    port: u16,
    status: u16,
) -> (Behaviour, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind(SocketAddr::new(ip.parse().unwrap(), port)).await.unwrap();
    let behaviour = Behaviour(Arc::new(AtomicU16::new(status)));
    let b = behaviour.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { return };
            let b = b.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                match b.0.load(Ordering::Relaxed) {
                    STALL => tokio::time::sleep(Duration::from_secs(30)).await,
                    code => {
                        let resp =
                            format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                        let _ = sock.write_all(resp.as_bytes()).await;
                    }
                }
            });
        }
    });
    (behaviour, task)
}

async fn server_with(file: &str) -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_ALLOW_PRIVATE_NODE_IPS".into(), "true".into());
    (Server::start_with(env, Some(file)).await, tmp)
}

const FAST: &str = "[live]\nrefresh_interval_ms = 100\n";

#[tokio::test]
async fn dead_nodes_leave_answers_come_back_and_an_all_down_pool_fails_open() {
    // One port on several loopback addresses: nodes 127.0.0.11..14.
    let probe = TcpListener::bind("127.0.0.11:0").await.unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let (good, _g) = node_listener("127.0.0.11", port, OK).await;
    let (erroring, _e) = node_listener("127.0.0.12", port, FAIL).await;
    let (slow, _s) = node_listener("127.0.0.13", port, STALL).await;
    // 127.0.0.14 has no listener: connections are refused.

    let (s, _tmp) = server_with(FAST).await;
    let (interval, threshold) = (200u64, 2u64);
    s.put_ok(
        "/admin/v1/pools/edge",
        json!({"health_check": {"kind": "http", "port": port, "path": "/health", "interval_ms": interval,
            "timeout_ms": 100, "healthy_threshold": threshold, "unhealthy_threshold": threshold}}),
    )
    .await;
    for i in 11..=14 {
        s.put_ok(
            &format!("/admin/v1/nodes/n{i}"),
            json!({"ip": format!("127.0.0.{i}"), "pool": "edge", "isp": "telecom", "region": "beijing",
                   "latency_ms": i, "bandwidth_mbps": 1000, "load_pct": 10}),
        )
        .await;
    }
    s.put_ok("/admin/v1/domains/www.example.com", json!({"pool": "edge", "max_answers": 8})).await;
    let answer = || async { s.text("/d?dn=www.example.com&ip=1.2.3.4").await };

    // Dead ones leave within interval × threshold (plus the first probe's random offset, up to
    // one interval, and a little slack).
    let started = std::time::Instant::now();
    let bound = Duration::from_millis(interval * (threshold + 1) + 400);
    assert!(eventually(bound, || async { answer().await == "127.0.0.11" }).await, "got {}", answer().await);
    let took = started.elapsed();
    let resp = s.get("/d?dn=www.example.com&ip=1.2.3.4").await;
    assert_eq!(resp.headers()["x-httpdns-status"], "ok");

    // The erroring node recovers: back after its healthy threshold.
    erroring.0.store(OK, Ordering::Relaxed);
    assert!(
        eventually(Duration::from_millis(interval * (threshold + 2) + 400), || async {
            answer().await.split(';').count() == 2
        })
        .await
    );

    // Everything down: fail open with all nodes rather than nothing.
    good.0.store(FAIL, Ordering::Relaxed);
    erroring.0.store(FAIL, Ordering::Relaxed);
    assert!(
        eventually(Duration::from_secs(3), || async {
            let resp = s.get("/d?dn=www.example.com&ip=1.2.3.4").await;
            resp.headers()["x-httpdns-status"] == "fail-open"
        })
        .await
    );
    let all = answer().await;
    assert_eq!(all.split(';').count(), 4, "{all}");
    let metrics = s.text("/metrics").await;
    assert!(metrics.contains("httpdns_answers_total{endpoint=\"d\",outcome=\"fail-open\"}"));
    assert!(metrics.lines().any(|l| l.starts_with("httpdns_health_transitions_total{to=\"down\"}")));
    let _ = slow;
    eprintln!("dead nodes left answers after {took:?}");
}

#[tokio::test]
async fn nodes_without_checks_are_always_up_and_removing_checks_restores_them() {
    let (s, _tmp) = server_with(FAST).await;
    // Port 9 on 127.0.0.21: nothing listens, so every probe fails.
    s.put_ok(
        "/admin/v1/pools/edge",
        json!({"health_check": {"kind": "tcp", "port": 9, "interval_ms": 100, "timeout_ms": 50,
            "healthy_threshold": 1, "unhealthy_threshold": 1}}),
    )
    .await;
    s.put_ok(
        "/admin/v1/nodes/a",
        json!({"ip": "127.0.0.21", "pool": "edge", "isp": "telecom", "region": "bj"}),
    )
    .await;
    s.put_ok(
        "/admin/v1/nodes/b",
        json!({"ip": "127.0.0.22", "pool": "other", "isp": "telecom", "region": "bj"}),
    )
    .await;
    s.put_ok("/admin/v1/domains/a.example.com", json!({"pool": "edge"})).await;
    s.put_ok("/admin/v1/domains/b.example.com", json!({"pool": "other"})).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            s.get("/d?dn=a.example.com").await.headers()["x-httpdns-status"] == "fail-open"
        })
        .await
    );
    assert_eq!(s.get("/d?dn=b.example.com").await.headers()["x-httpdns-status"], "ok", "unchecked pool");
    s.put_ok("/admin/v1/pools/edge", json!({})).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            s.get("/d?dn=a.example.com").await.headers()["x-httpdns-status"] == "ok"
        })
        .await,
        "without checks the node is up again"
    );
}

async fn seed_unicom(s: &Server) {
    for (id, ip, region, latency) in [
        ("u-bj", "2.2.2.1", "beijing", 1),
        ("u-sh", "2.2.2.2", "shanghai", 30),
        ("t-bj", "1.1.1.1", "beijing", 1),
    ] {
        let isp = if id.starts_with('u') { "unicom" } else { "telecom" };
        s.put_ok(
            &format!("/admin/v1/nodes/{id}"),
            json!({"ip": ip, "pool": "edge", "isp": isp, "region": region,
                   "bandwidth_mbps": 1000, "load_pct": 20, "latency_ms": latency}),
        )
        .await;
    }
    // App clients on loopback are Unicom Shanghai; /d clients are told apart by ip=.
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "shanghai"})).await;
    s.put_ok("/admin/v1/networks/1.0.2.0%2F24", json!({"isp": "unicom", "region": "shanghai"})).await;
    s.put_ok("/admin/v1/networks/1.0.3.0%2F24", json!({"isp": "unicom", "region": "beijing"})).await;
    s.put_ok("/admin/v1/domains/www.example.com", json!({"pool": "edge"})).await;
}

/// A client whose connections come from `127.0.0.N`.
fn client(n: u8) -> reqwest::Client {
    httpdns_test_support::http::client_builder().local_address(IpAddr::from([127, 0, 0, n])).build().unwrap()
}

async fn send_feedback(s: &Server, from: u8, reports: Value) -> reqwest::Response {
    client(from).post(s.url("/feedback")).body(reports.to_string()).send().await.unwrap()
}

#[tokio::test]
async fn feedback_lifts_a_node_for_its_clients_only_resists_one_flooder_and_survives_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let env = crate::support::env(tmp.path(), &Db::Sqlite);
    let file = "[live]\nrefresh_interval_ms = 100\nfeedback_flush_ms = 200\n";
    let shanghai = "/d?dn=www.example.com&ip=1.0.2.7";
    let beijing = "/d?dn=www.example.com&ip=1.0.3.7";
    {
        let s = Server::start_with(env.clone(), Some(file)).await;
        seed_unicom(&s).await;
        assert_eq!(s.text(shanghai).await, "2.2.2.1;2.2.2.2");
        assert_eq!(s.text(beijing).await, "2.2.2.1;2.2.2.2");

        // Five Unicom Shanghai apps: u-sh connects in 2 ms, u-bj in 250 ms.
        for n in 31..=35u8 {
            let resp = send_feedback(
                &s,
                n,
                json!([
                    {"ip": "2.2.2.2", "domain": "www.example.com", "ok": true, "connect_ms": 2, "network": "wifi"},
                    {"ip": "2.2.2.1", "domain": "www.example.com", "ok": true, "connect_ms": 250, "network": "cellular"},
                    {"ip": "9.9.9.9", "domain": "www.example.com", "ok": true, "connect_ms": 1},
                ]),
            )
            .await;
            assert_eq!(resp.status(), StatusCode::ACCEPTED);
            assert_eq!(resp.json::<Value>().await.unwrap(), json!({"accepted": 2, "ignored": 1}));
        }
        assert!(
            eventually(Duration::from_secs(2), || async { s.text(shanghai).await == "2.2.2.2;2.2.2.1" })
                .await,
            "feedback lifts u-sh for Unicom Shanghai clients"
        );
        assert_eq!(s.text(beijing).await, "2.2.2.1;2.2.2.2", "Unicom Beijing clients are not affected");

        // One client floods bad reports about u-sh: it stays in front.
        let mut throttled = 0;
        for _ in 0..40 {
            let resp = send_feedback(
                &s,
                36,
                Value::Array(vec![
                    json!({"ip": "2.2.2.2", "domain": "www.example.com", "ok": false, "network": "wifi"});
                    50
                ]),
            )
            .await;
            if resp.status() == StatusCode::TOO_MANY_REQUESTS {
                throttled += 1;
            }
        }
        assert!(throttled > 0, "the flooder is rate limited");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(s.text(shanghai).await, "2.2.2.2;2.2.2.1", "one client cannot move the score");
        let explain: Value =
            s.admin(Method::GET, "/admin/v1/explain?dn=www.example.com&ip=1.0.2.7", None).await.1;
        let node =
            explain["answers"][0]["nodes"].as_array().unwrap().iter().find(|n| n["id"] == "u-sh").unwrap();
        assert_eq!(node["latency_source"], "feedback");
        assert!(node["latency_ms"].as_f64().unwrap() < 10.0, "{node}");
        // Saved by the periodic flush (and again at shutdown).
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let s = Server::start_with(env, Some(file)).await;
    assert!(
        eventually(Duration::from_secs(2), || async { s.text(shanghai).await == "2.2.2.2;2.2.2.1" }).await,
        "aggregates survive a restart"
    );
}

#[tokio::test]
async fn bad_feedback_is_refused_whole() {
    let (s, _tmp) = server_with(FAST).await;
    seed_unicom(&s).await;
    let good =
        json!({"ip": "2.2.2.2", "domain": "www.example.com", "ok": true, "connect_ms": 5, "network": "wifi"});
    let with = |k: &str, v: Value| {
        let mut g = good.clone();
        g[k] = v;
        g
    };
    for (body, field) in [
        (json!([good.clone(), with("ip", json!("nope"))]), "reports[1].ip"),
        (json!([with("domain", json!("a..b"))]), "reports[0].domain"),
        (json!([with("ok", json!("yes"))]), "reports[0].ok"),
        (json!([with("connect_ms", json!(-1))]), "reports[0].connect_ms"),
        (json!([with("connect_ms", Value::Null)]), "reports[0].connect_ms"),
        (json!([with("network", json!("5g"))]), "reports[0].network"),
        (json!([]), "reports"),
        (json!({"reports": 5}), "reports"),
    ] {
        let resp = send_feedback(&s, 41, body.clone()).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(resp.json::<Value>().await.unwrap()["field"], field, "{body}");
    }
    let resp = send_feedback(&s, 42, json!({"reports": [good]})).await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
}

#[tokio::test]
async fn agent_reports_move_scores_and_fade_back() {
    let (s, _tmp) =
        server_with("[live]\nrefresh_interval_ms = 100\nreport_fresh_ms = 600\nreport_decay_ms = 400\n")
            .await;
    seed_unicom(&s).await;
    let beijing = "/d?dn=www.example.com&ip=1.0.3.7";
    assert_eq!(s.text(beijing).await, "2.2.2.1;2.2.2.2");
    let resp = s
        .http
        .post(s.url("/admin/v1/nodes/u-bj/metrics"))
        .bearer_auth(crate::support::TOKEN)
        .body(json!({"load_pct": 100, "latency_ms": 900}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    assert!(
        eventually(Duration::from_millis(500), || async { s.text(beijing).await == "2.2.2.2;2.2.2.1" }).await
    );
    let explain: Value =
        s.admin(Method::GET, "/admin/v1/explain?dn=www.example.com&ip=1.0.3.7", None).await.1;
    let node = explain["answers"][0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "u-bj")
        .unwrap()
        .clone();
    assert_eq!(
        (node["latency_source"].as_str(), node["terms"]["load"].as_f64()),
        (Some("measured"), Some(0.0))
    );
    // After fresh + decay the operator's figures are back.
    assert!(
        eventually(Duration::from_secs(3), || async { s.text(beijing).await == "2.2.2.1;2.2.2.2" }).await
    );

    // Batch form, with validation naming the item.
    let (status, body) = s
        .admin(
            Method::POST,
            "/admin/v1/metrics",
            Some(json!({"reports": [{"node": "u-sh", "load_pct": 5}, {"node": "ghost", "load_pct": 5}]})),
        )
        .await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("reports[1].node")));
    let (status, body) = s
        .admin(
            Method::POST,
            "/admin/v1/metrics",
            Some(json!({"reports": [{"node": "u-sh", "load_pct": 101}]})),
        )
        .await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("reports[0].load_pct")));
    let (status, body) = s
        .admin(Method::POST, "/admin/v1/metrics", Some(json!({"reports": [{"node": "u-sh", "load_pct": 5}]})))
        .await;
    assert_eq!((status, body["accepted"].as_u64()), (StatusCode::ACCEPTED, Some(1)));
    let (status, _) =
        s.admin(Method::POST, "/admin/v1/nodes/ghost/metrics", Some(json!({"load_pct": 5}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn explain_agrees_with_d_for_a_thousand_random_clients() {
    let (s, _tmp) = server_with(FAST).await;
    let isps = ["telecom", "unicom", "mobile"];
    let regions = ["beijing", "shanghai", "guangdong", "sichuan"];
    for i in 0..24u32 {
        s.put_ok(
            &format!("/admin/v1/nodes/n{i:02}"),
            json!({"ip": format!("5.5.{}.{}", i / 10, i % 10 + 1), "pool": "edge",
                   "isp": isps[(i % 3) as usize], "region": regions[(i % 4) as usize],
                   "latency_ms": (i * 7) % 50, "load_pct": (i * 13) % 100, "bandwidth_mbps": 100 + (i * 37) % 900,
                   "enabled": i % 11 != 0}),
        )
        .await;
    }
    for (n, (isp, region)) in [
        ("1.0.0.0/16", ("telecom", "beijing")),
        ("1.1.0.0/16", ("unicom", "shanghai")),
        ("1.2.0.0/16", ("mobile", "guangdong")),
        ("1.3.0.0/16", ("unicom", "sichuan")),
    ] {
        s.put_ok(
            &format!("/admin/v1/networks/{}", n.replace('/', "%2F")),
            json!({"isp": isp, "region": region}),
        )
        .await;
    }
    s.put_ok("/admin/v1/domains/www.example.com", json!({"pool": "edge", "max_answers": 3})).await;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut seen = HashMap::new();
    for _ in 0..1000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let ip = IpAddr::from([1, (state % 5) as u8, (state >> 8) as u8, (state >> 16) as u8]);
        let d = s.text(&format!("/d?dn=www.example.com&ip={ip}")).await;
        let (_, e) =
            s.admin(Method::GET, &format!("/admin/v1/explain?dn=www.example.com&ip={ip}"), None).await;
        let explained: Vec<&str> =
            e["answers"][0]["answer"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(d, explained.join(";"), "client {ip}");
        let in_answer: Vec<&str> = e["answers"][0]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["in_answer"] == true)
            .map(|n| n["ip"].as_str().unwrap())
            .collect();
        assert_eq!(in_answer, explained, "answered nodes come first, in answer order");
        *seen.entry(d).or_insert(0) += 1;
    }
    assert!(seen.len() > 4, "the clients got different answers: {seen:?}");
}
