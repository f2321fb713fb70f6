use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::{backends, Server};

#[tokio::test]
async fn admin_requires_the_bearer_token() {
    let s = Server::start(&crate::support::Db::Sqlite).await;
    for (method, path) in [
        (Method::GET, "/admin/v1/nodes"),
        (Method::PUT, "/admin/v1/nodes/n1"),
        (Method::DELETE, "/admin/v1/domains/a.com"),
        (Method::GET, "/admin/v1/networks/1.0.1.0%2F24"),
    ] {
        let resp = s.http.request(method.clone(), s.url(path)).body("{}").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        let wrong =
            s.http.request(method.clone(), s.url(path)).bearer_auth("wrong-token-but-long-enough").send();
        assert_eq!(wrong.await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
}

#[tokio::test]
async fn crud_round_trip_on_every_backend() {
    for (db, _guard) in backends("crud_round_trip_on_every_backend").await {
        let s = Server::start(&db).await;
        let node = json!({"ip": "1.2.3.4", "pool": "edge", "isp": "telecom", "region": "beijing",
            "bandwidth_mbps": 1000, "load_pct": 20, "latency_ms": 15, "enabled": true});
        let (status, body) = s.put("/admin/v1/nodes/n1", node.clone()).await;
        assert_eq!(status, StatusCode::CREATED, "{db:?} {body}");
        assert_eq!(body["ip"], "1.2.3.4");
        let (status, _) = s.put("/admin/v1/nodes/n1", node.clone()).await;
        assert_eq!(status, StatusCode::OK, "replace is 200");

        let resp =
            s.http.get(s.url("/admin/v1/nodes/n1")).bearer_auth(crate::support::TOKEN).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers().contains_key("etag"));
        let got: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(got["latency_ms"], 15.0);
        assert_eq!(got["pool"], "edge");

        let (status, list) = s.admin(Method::GET, "/admin/v1/nodes", None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["items"][0]["name"], "n1");

        let (status, _) = s.admin(Method::DELETE, "/admin/v1/nodes/n1", None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, body) = s.admin(Method::GET, "/admin/v1/nodes/n1", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["code"], "NotFound");
        let (status, _) = s.admin(Method::DELETE, "/admin/v1/nodes/n1", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // Pools: options only.
        let (status, _) = s
            .put(
                "/admin/v1/pools/edge",
                json!({"health_check": {"kind": "http", "port": 80, "path": "/health", "interval_ms": 2000,
                    "timeout_ms": 1000, "healthy_threshold": 2, "unhealthy_threshold": 3}}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, body) = s.admin(Method::GET, "/admin/v1/pools/edge", None).await;
        assert_eq!((status, body["health_check"]["kind"].as_str()), (StatusCode::OK, Some("http")));
    }
}

#[tokio::test]
async fn names_in_urls_are_canonicalised() {
    let s = Server::start(&crate::support::Db::Sqlite).await;
    s.put_ok("/admin/v1/domains/WWW.Example.COM.", json!({"pool": "edge"})).await;
    let (status, body) = s.admin(Method::GET, "/admin/v1/domains/www.example.com", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"pool": "edge", "ttl": 60, "max_answers": 4}), "defaults are filled in");
    // IDN names are stored as punycode.
    s.put_ok("/admin/v1/domains/%E4%B8%AD%E5%9B%BD.cn", json!({"pool": "edge"})).await;
    let (status, _) = s.admin(Method::GET, "/admin/v1/domains/xn--fiqs8s.cn", None).await;
    assert_eq!(status, StatusCode::OK);
    // IPv6 CIDRs are stored in canonical form.
    s.put_ok("/admin/v1/networks/2408:8000:0::%2F20", json!({"isp": "unicom"})).await;
    let (_, list) = s.admin(Method::GET, "/admin/v1/networks", None).await;
    assert_eq!(list["items"][0]["name"], "2408:8000::/20");
}

#[tokio::test]
async fn bad_input_is_refused_with_the_field_named_and_nothing_written() {
    let s = Server::start(&crate::support::Db::Sqlite).await;
    let good =
        json!({"ip": "1.2.3.4", "pool": "edge", "isp": "telecom", "region": "beijing", "latency_ms": 15});
    s.put_ok("/admin/v1/nodes/n1", good.clone()).await;

    let with = |k: &str, v: serde_json::Value| {
        let mut b = good.clone();
        b[k] = v;
        b
    };
    let cases = [
        ("/admin/v1/nodes/n1", with("ip", json!("0.0.0.0")), "ip"),
        ("/admin/v1/nodes/n1", with("ip", json!("127.0.0.1")), "ip"),
        ("/admin/v1/nodes/n1", with("ip", json!("10.1.2.3")), "ip"),
        ("/admin/v1/nodes/n1", with("ip", json!("169.254.169.254")), "ip"),
        ("/admin/v1/nodes/n1", with("ip", json!("224.0.0.1")), "ip"),
        ("/admin/v1/nodes/n1", with("ip", json!("192.0.2.1")), "ip"),
        ("/admin/v1/nodes/n1", with("ip", json!("fe80::1")), "ip"),
        ("/admin/v1/nodes/n1", with("ip", json!("not an ip")), "ip"),
        ("/admin/v1/nodes/n1", with("isp", json!("China Telecom")), "isp"),
        ("/admin/v1/nodes/n1", with("load_pct", json!(150)), "load_pct"),
        ("/admin/v1/nodes/n1", with("bandwidth_mbps", json!("fast")), "bandwidth_mbps"),
        ("/admin/v1/nodes/n1", with("enabled", json!("yes")), "enabled"),
        ("/admin/v1/nodes/n1", with("extra", json!(1)), "extra"),
        ("/admin/v1/nodes/n1", json!({"pool": "edge", "isp": "telecom", "region": "beijing"}), "ip"),
        ("/admin/v1/nodes/bad%20id", good.clone(), "id"),
        ("/admin/v1/domains/a..b", json!({"pool": "edge"}), "name"),
        ("/admin/v1/domains/a.com", json!({"pool": "edge", "ttl": 0}), "ttl"),
        ("/admin/v1/domains/a.com", json!({"pool": "edge", "max_answers": 100}), "max_answers"),
        ("/admin/v1/domains/a.com", json!({}), "pool"),
        ("/admin/v1/networks/1.0.1.5%2F24", json!({"isp": "telecom"}), "cidr"),
        ("/admin/v1/networks/1.0.1.0", json!({"isp": "telecom"}), "cidr"),
        ("/admin/v1/networks/1.0.1.0%2F24", json!({}), "isp"),
        ("/admin/v1/pools/Edge", json!({}), "name"),
        ("/admin/v1/pools/edge", json!({"health_check": {"kind": "tcp", "port": 0}}), "health_check.port"),
    ];
    for (path, body, field) in cases {
        let (status, resp) = s.put(path, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {resp}");
        assert_eq!(resp["field"], field, "{path} {body}: {resp}");
        assert!(resp["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    // Not JSON at all.
    let resp = s
        .http
        .put(s.url("/admin/v1/nodes/n1"))
        .bearer_auth(crate::support::TOKEN)
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    // Nothing was half-written: n1 is as before, no domain or network appeared.
    let (_, n1) = s.admin(Method::GET, "/admin/v1/nodes/n1", None).await;
    assert_eq!(n1["ip"], "1.2.3.4");
    assert_eq!(n1["latency_ms"], 15.0);
    for list in ["/admin/v1/domains", "/admin/v1/networks"] {
        let (_, body) = s.admin(Method::GET, list, None).await;
        assert_eq!(body["items"], json!([]), "{list}");
    }
    // Only the pool that n1 names, with default options; no pool options were stored.
    let (_, pools) = s.admin(Method::GET, "/admin/v1/pools", None).await;
    assert_eq!(pools["items"], json!([{"name": "edge", "revision": 0, "updated_at_ms": 0, "spec": {}}]));
}

#[tokio::test]
async fn private_node_addresses_need_the_switch() {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &crate::support::Db::Sqlite);
    env.insert("HTTPDNS_ALLOW_PRIVATE_NODE_IPS".into(), "true".into());
    let s = Server::start_with(env, None).await;
    s.put_ok(
        "/admin/v1/nodes/lo",
        json!({"ip": "127.0.0.2", "pool": "edge", "isp": "telecom", "region": "beijing"}),
    )
    .await;
    s.put_ok("/admin/v1/domains/intra.example.com", json!({"pool": "edge"})).await;
    assert_eq!(s.text("/d?dn=intra.example.com&ip=1.2.3.4").await, "127.0.0.2");
    // Never unspecified, even with the switch.
    let (status, body) = s
        .put(
            "/admin/v1/nodes/z",
            json!({"ip": "0.0.0.0", "pool": "edge", "isp": "telecom", "region": "beijing"}),
        )
        .await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("ip")));
}

#[tokio::test]
async fn list_pages() {
    let s = Server::start(&crate::support::Db::Sqlite).await;
    for i in 0..5 {
        s.put_ok(&format!("/admin/v1/domains/d{i}.example.com"), json!({"pool": "edge"})).await;
    }
    let (_, p1) = s.admin(Method::GET, "/admin/v1/domains?limit=2", None).await;
    assert_eq!(p1["items"].as_array().unwrap().len(), 2);
    assert_eq!(p1["next"], "d1.example.com");
    let (_, p3) = s.admin(Method::GET, "/admin/v1/domains?limit=2&after=d3.example.com", None).await;
    assert_eq!(p3["items"][0]["name"], "d4.example.com");
    assert!(p3.get("next").is_none());
    let (status, body) = s.admin(Method::GET, "/admin/v1/domains?limit=0", None).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("limit")));
}

#[tokio::test]
async fn pools_exist_once_named_and_cidrs_work_with_a_literal_slash() {
    let s = Server::start(&crate::support::Db::Sqlite).await;
    let (status, _) = s.admin(Method::GET, "/admin/v1/pools/edge", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    s.put_ok(
        "/admin/v1/nodes/n1",
        json!({"ip": "1.2.3.4", "pool": "edge", "isp": "telecom", "region": "beijing"}),
    )
    .await;
    s.put_ok("/admin/v1/domains/a.example.com", json!({"pool": "web"})).await;
    let (status, body) = s.admin(Method::GET, "/admin/v1/pools/edge", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({})), "named by a node: exists with defaults");
    s.put_ok("/admin/v1/pools/api", json!({"health_check": {"kind": "tcp", "port": 443}})).await;
    let (_, list) = s.admin(Method::GET, "/admin/v1/pools", None).await;
    let names: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["api", "edge", "web"]);
    let (_, page) = s.admin(Method::GET, "/admin/v1/pools?limit=1&after=api", None).await;
    assert_eq!((page["items"][0]["name"].as_str(), page["next"].as_str()), (Some("edge"), Some("edge")));
    let (status, _) = s.admin(Method::DELETE, "/admin/v1/pools/edge", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "resetting an implied pool's options is a no-op");
    let (status, _) = s.admin(Method::DELETE, "/admin/v1/pools/nothing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The documented form and a literal slash name the same network.
    s.put_ok("/admin/v1/networks/1.0.1.0/24", json!({"isp": "telecom"})).await;
    let (status, body) = s.admin(Method::GET, "/admin/v1/networks/1.0.1.0%2F24", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"isp": "telecom"})));
    let (status, _) = s.admin(Method::DELETE, "/admin/v1/networks/1.0.1.0/24", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn lists_filter_by_text_server_side_on_every_backend() {
    for (db, _guard) in backends("list_filter").await {
        let s = Server::start(&db).await;
        for (id, pool) in [("a-1", "edge"), ("a-2", "backup_pool"), ("b-1", "edge")] {
            s.put_ok(
                &format!("/admin/v1/nodes/{id}"),
                json!({"ip": "1.1.1.1", "pool": pool, "isp": "unicom", "region": "shanghai"}),
            )
            .await;
        }
        let names = |v: &serde_json::Value| -> Vec<String> {
            v["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap().to_owned()).collect()
        };
        let (status, v) = s.admin(Method::GET, "/admin/v1/nodes?q=backup", None).await;
        assert_eq!((status, names(&v)), (StatusCode::OK, vec!["a-2".to_owned()]), "a field's text matches");
        let (_, v) = s.admin(Method::GET, "/admin/v1/nodes?q=a-", None).await;
        assert_eq!(names(&v), ["a-1", "a-2"], "the name matches");
        let (_, v) = s.admin(Method::GET, "/admin/v1/nodes?q=a-&limit=1", None).await;
        assert_eq!((names(&v), v["next"].as_str()), (vec!["a-1".to_owned()], Some("a-1")), "paged");
        let (_, v) = s.admin(Method::GET, "/admin/v1/nodes?q=a-&limit=1&after=a-1", None).await;
        assert_eq!(names(&v), ["a-2"]);
        // `_` and `%` are text, not wildcards.
        let (_, v) = s.admin(Method::GET, "/admin/v1/nodes?q=%25", None).await;
        assert!(names(&v).is_empty(), "{v}");
        let (_, v) = s.admin(Method::GET, "/admin/v1/nodes?q=p_pool", None).await;
        assert_eq!(names(&v), ["a-2"], "backup_pool contains p_pool literally");
        let (_, v) = s.admin(Method::GET, "/admin/v1/nodes?q=pxpool", None).await;
        assert!(names(&v).is_empty(), "_ matched one character: {v}");
        // Implied resources (pools) filter too.
        let (_, v) = s.admin(Method::GET, "/admin/v1/pools?q=backup", None).await;
        assert_eq!(names(&v), ["backup_pool"]);
    }
}

#[tokio::test]
async fn conditional_writes_neither_replace_on_create_nor_overwrite_a_newer_revision() {
    for (db, _guard) in backends("conditional_writes").await {
        let s = Server::start(&db).await;
        let node = |ip: &str| json!({"ip": ip, "pool": "edge", "isp": "unicom", "region": "shanghai"});
        let put = |ip: &'static str, header: (&'static str, String)| {
            let req = s
                .http
                .put(s.url("/admin/v1/nodes/n1"))
                .bearer_auth(crate::support::TOKEN)
                .header(header.0, header.1)
                .body(node(ip).to_string());
            async move {
                let r = req.send().await.unwrap();
                let (status, etag) =
                    (r.status(), r.headers().get("etag").map(|v| v.to_str().unwrap().to_owned()));
                (status, etag, r.json::<serde_json::Value>().await.unwrap_or_default())
            }
        };
        let (status, etag, _) = put("1.1.1.1", ("if-none-match", "*".into())).await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, _, body) = put("1.1.1.2", ("if-none-match", "*".into())).await;
        assert_eq!(
            (status, body["field"].as_str()),
            (StatusCode::PRECONDITION_FAILED, Some("name")),
            "{body}"
        );
        let first = etag.unwrap();
        let (status, second, _) = put("1.1.1.3", ("if-match", first.clone())).await;
        assert_eq!(status, StatusCode::OK, "the revision read is current");
        let (status, _, body) = put("1.1.1.4", ("if-match", first)).await;
        assert_eq!(
            (status, body["field"].as_str()),
            (StatusCode::PRECONDITION_FAILED, Some("If-Match")),
            "{body}"
        );
        let (_, now) = s.admin(Method::GET, "/admin/v1/nodes/n1", None).await;
        assert_eq!(now["ip"], "1.1.1.3", "the stale edit wrote nothing");
        let (status, _, _) = put("1.1.1.5", ("if-match", second.unwrap())).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _, body) = put("1.1.1.6", ("if-match", "\"x\"".into())).await;
        assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("If-Match")));
    }
}

/// A client that sends a whole write and hangs up before the answer cancels nothing: the
/// write is stored and in answers at once, with no timed sync to bring it later (the sync
/// interval here is ten minutes). The database is held busy by another connection meanwhile,
/// so the write is still waiting for it when the client goes.
#[tokio::test]
async fn a_write_whose_client_hangs_up_is_still_stored_and_published() {
    use std::io::BufRead;
    use tokio::io::AsyncWriteExt;

    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &crate::support::Db::Sqlite);
    env.insert("HTTPDNS_SYNC_INTERVAL_MS".into(), "600000".into());
    let s = Server::start_with(env, None).await;
    s.put_ok(
        "/admin/v1/nodes/n1",
        json!({"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing"}),
    )
    .await;
    // Another writer holds the database for 600 ms.
    let db = tmp.path().join("httpdns.db");
    let mut holder = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys, time\n\
             c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
             c.execute('BEGIN IMMEDIATE')\n\
             print('held', flush=True)\n\
             time.sleep(0.6)\n\
             c.execute('COMMIT')",
        )
        .arg(&db)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "held");

    let name = "gone.example.com";
    let body = r#"{"pool":"edge","ttl":60,"max_answers":2}"#;
    let request = format!(
        "PUT /admin/v1/domains/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        crate::support::TOKEN,
        body.len()
    );
    let mut conn = tokio::net::TcpStream::connect(s.base.trim_start_matches("http://")).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    // Gone while the write waits for the database: a reset, as a client's timeout leaves it.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    // A zero linger resets at once; the deprecation is about blocking on a non-zero one.
    #[allow(deprecated, reason = "a zero linger resets at once")]
    conn.set_linger(Some(std::time::Duration::ZERO)).unwrap();
    drop(conn);
    let held = tokio::task::spawn_blocking(move || holder.wait()).await.unwrap().unwrap();
    assert!(held.success());

    let mut answered = false;
    for _ in 0..100 {
        let resp = s.get(&format!("/d?dn={name}&ip=1.0.1.7")).await;
        if resp.headers()["x-httpdns-status"] == "ok" {
            answered = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(answered, "the write of a client that hung up is not in answers 5 s later");
    let (status, _) = s.admin(Method::GET, &format!("/admin/v1/domains/{name}"), None).await;
    assert_eq!(status, StatusCode::OK);
}
