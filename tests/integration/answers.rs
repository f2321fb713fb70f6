use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{backends, Db, Server};

#[tokio::test]
async fn telecom_and_unicom_clients_get_their_carriers_nodes() {
    for (db, _guard) in backends("telecom_and_unicom_clients").await {
        let s = Server::start(&db).await;
        s.seed().await;
        // Telecom Beijing client (operator network 1.0.1.0/24).
        assert_eq!(s.text("/d?dn=www.example.com&ip=1.0.1.7").await, "1.1.1.1;1.1.1.2", "{db:?}");
        // Unicom Shanghai client: u-bj 0.4/1.01+0.51 = 0.906 beats u-sh 0.4/1.3+0.56 = 0.868.
        assert_eq!(s.text("/d?dn=www.example.com&ip=1.0.2.7").await, "2.2.2.1;2.2.2.2");
        // Unknown client: every node, by score.
        assert_eq!(s.text("/d?dn=www.example.com&ip=9.9.9.9").await, "2.2.2.1;1.1.1.2;1.1.1.1;2.2.2.2");
        // The same via /resolve.
        let body: Value = s.get("/resolve?host=www.example.com&ip=1.0.1.7").await.json().await.unwrap();
        assert_eq!(
            body,
            json!({"dns": [{"host": "www.example.com", "client_ip": "1.0.1.7", "ips": ["1.1.1.1", "1.1.1.2"],
                "ttl": 60, "origin_ttl": 60}]}),
            "Alibaba's shape exactly, without labels=1"
        );
        // labels=1 adds the client's carrier and each node's.
        let body: Value =
            s.get("/resolve?host=www.example.com&ip=1.0.1.7&labels=1").await.json().await.unwrap();
        assert_eq!(body["dns"][0]["client_isp"], "telecom");
        assert_eq!(body["dns"][0]["ip_isp"], json!({"1.1.1.1": "telecom", "1.1.1.2": "telecom"}));
        // An unknown client has no carrier; the nodes keep their labels (for client filters).
        let body: Value =
            s.get("/resolve?host=www.example.com&ip=9.9.9.9&labels=1").await.json().await.unwrap();
        assert!(body["dns"][0].get("client_isp").is_none(), "{body}");
        assert_eq!(body["dns"][0]["ip_isp"]["2.2.2.1"], "unicom");
        assert_eq!(body["dns"][0]["ip_isp"]["1.1.1.1"], "telecom");
    }
}

#[tokio::test]
async fn the_peer_address_is_classified_when_ip_is_absent_empty_or_invalid() {
    let s = Server::start(&Db::Sqlite).await;
    s.seed().await;
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "beijing"})).await;
    for q in ["", "&ip=", "&ip=not-an-address", "&ip=300.1.1.1"] {
        let resp = s.get(&format!("/d?dn=www.example.com&clientip=1{q}")).await;
        let invalid = resp.headers().contains_key("x-httpdns-ip-ignored");
        assert_eq!(resp.text().await.unwrap(), "2.2.2.1;2.2.2.2|127.0.0.1", "{q}");
        assert_eq!(invalid, q.contains("ip=") && q != "&ip=", "{q}");
    }
    let body: Value = s.get("/resolve?host=www.example.com&query=4,6").await.json().await.unwrap();
    assert_eq!(body["dns"][0]["client_ip"], "127.0.0.1");
    assert_eq!(body["dns"][0]["ips"], json!(["2.2.2.1", "2.2.2.2"]));
    assert_eq!(body["dns"][0]["ipsv6"], json!(["2402:4e00::1"]), "no unicom v6 node: fall back to all");
    assert!(body["dns"][0].get("type").is_none(), "one host keeps both families in one element: {body}");
    // Several hosts with both families: one element per (host, type), A as 1 and AAAA as 28,
    // addresses in `ips` either way (Alibaba's batch, reference §2.2).
    s.put_ok("/admin/v1/domains/img.example.com", json!({"pool": "edge", "ttl": 90})).await;
    let body: Value = s
        .get("/resolve?host=www.example.com,img.example.com&query=4,6&ip=1.0.1.7")
        .await
        .json()
        .await
        .unwrap();
    let shape: Vec<(String, i64, Value, i64)> = body["dns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert!(e.get("ipsv6").is_none(), "{e}");
            (
                e["host"].as_str().unwrap().to_owned(),
                e["type"].as_i64().unwrap(),
                e["ips"].clone(),
                e["ttl"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("www.example.com".to_owned(), 1, json!(["1.1.1.1", "1.1.1.2"]), 60),
            ("www.example.com".to_owned(), 28, json!(["2402:4e00::1"]), 60),
            ("img.example.com".to_owned(), 1, json!(["1.1.1.1", "1.1.1.2"]), 90),
            ("img.example.com".to_owned(), 28, json!(["2402:4e00::1"]), 90),
        ],
        "{body}"
    );
}

/// Every `/d` shape, in the form the official SDKs parse (the default) and, where it differs,
/// in the document's exact form (`[dnspod] document_form = true`).
#[tokio::test]
async fn every_dnspod_format_over_http() {
    let sdk = Server::start(&Db::Sqlite).await;
    let tmp = tempfile::tempdir().unwrap();
    let doc = Server::start_with(
        crate::support::env(tmp.path(), &Db::Sqlite),
        Some("[dnspod]\ndocument_form = true\n"),
    )
    .await;
    for s in [&sdk, &doc] {
        s.seed().await;
        s.put_ok("/admin/v1/domains/v4only.example.com", json!({"pool": "v4", "ttl": 120})).await;
        s.put_ok(
            "/admin/v1/nodes/v4a",
            json!({"ip": "3.3.3.4", "pool": "v4", "isp": "telecom", "region": "beijing", "latency_ms": 1}),
        )
        .await;
    }
    let t = "dn=www.example.com&ip=1.0.1.7";
    let batch = "/d?dn=www.example.com,v4only.example.com,nothing.example.com&ip=1.0.1.7&ttl=1&clientip=1";
    // (path, SDK form, document form when it differs)
    let cases: [(String, &str, Option<&str>); 14] = [
        (format!("/d?{t}"), "1.1.1.1;1.1.1.2", None),
        (format!("/d?{t}&ttl=1"), "1.1.1.1;1.1.1.2,60", None),
        (format!("/d?{t}&ttl=1&clientip=1"), "1.1.1.1;1.1.1.2,60|1.0.1.7", None),
        (format!("/d?{t}&type=addrs&ttl=1&clientip=1"), "1.1.1.1;1.1.1.2,60-2402:4e00::1,60|1.0.1.7", None),
        (format!("/d?{t}&type=AAAA&ttl=1&clientip=1"), "2402:4e00::1,60|1.0.1.7", None),
        (format!("/d?{t}&query=1&ttl=1&clientip=1"), "www.example.com.:1.1.1.1;1.1.1.2,60|1.0.1.7", None),
        (
            batch.into(),
            "www.example.com.:1.1.1.1;1.1.1.2,60|1.0.1.7\nv4only.example.com.:3.3.3.4,120|1.0.1.7\n\
             nothing.example.com.:0,30|1.0.1.7",
            Some("www.example.com.:1.1.1.1;1.1.1.2,60\nv4only.example.com.:3.3.3.4,120\nnothing.example.com.:0|1.0.1.7"),
        ),
        ("/d?dn=v4only.example.com&ip=1.0.1.7&type=addrs&query=1&clientip=1".into(), "v4only.example.com.:3.3.3.4-0|1.0.1.7", None),
        (
            "/d?dn=v4only.example.com&ip=1.0.1.7&type=addrs&ttl=1&clientip=1".into(),
            "3.3.3.4,120-0,120|1.0.1.7",
            Some("3.3.3.4,120-0|1.0.1.7"),
        ),
        ("/d?dn=nothing.example.com&ip=1.0.1.7&type=addrs&query=1&clientip=1".into(), "nothing.example.com.:0-0|1.0.1.7", None),
        ("/d?dn=nothing.example.com&ip=1.0.1.7&ttl=1&clientip=1".into(), "", None),
        ("/d?dn=v4only.example.com&type=aaaa".into(), "", None),
        // Trailing dot, upper case and the official SDK's extra parameters (`id=` makes an
        // enterprise request: see the auth tests).
        ("/d?dn=WWW.EXAMPLE.COM.&ip=1.0.1.7&clientip=1&ttl=1&alg=des&sdk=1_4.9.0&timeout=2000".into(), "1.1.1.1;1.1.1.2,60|1.0.1.7", None),
        // Names are echoed as asked: the SDKs look them up by string equality.
        (
            "/d?dn=WWW.Example.COM,v4only.example.com.&ip=1.0.1.7&ttl=1&clientip=1".into(),
            "WWW.Example.COM.:1.1.1.1;1.1.1.2,60|1.0.1.7\nv4only.example.com.:3.3.3.4,120|1.0.1.7",
            Some("WWW.Example.COM.:1.1.1.1;1.1.1.2,60\nv4only.example.com.:3.3.3.4,120|1.0.1.7"),
        ),
    ];
    for (path, sdk_form, doc_form) in cases {
        for (s, expect) in [(&sdk, sdk_form), (&doc, doc_form.unwrap_or(sdk_form))] {
            let resp = s.get(&path).await;
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            assert!(resp.headers().contains_key("content-length"), "{path}: Content-Length, never chunked");
            assert!(!resp.headers().contains_key("transfer-encoding"), "{path}");
            assert_eq!(resp.text().await.unwrap(), expect, "{path}");
        }
    }
}

#[tokio::test]
async fn status_header_tells_why_a_name_has_no_answer() {
    let s = Server::start(&Db::Sqlite).await;
    s.seed().await;
    s.put_ok("/admin/v1/domains/nonodes.example.com", json!({"pool": "empty"})).await;
    s.put_ok("/admin/v1/domains/v4only.example.com", json!({"pool": "v4"})).await;
    s.put_ok(
        "/admin/v1/nodes/v4a",
        json!({"ip": "3.3.3.4", "pool": "v4", "isp": "telecom", "region": "beijing"}),
    )
    .await;
    let resp = s
        .get("/d?dn=www.example.com,nonodes.example.com,unknown.example.org,v4only.example.com&type=aaaa&ip=1.0.1.7")
        .await;
    assert_eq!(resp.headers()["x-httpdns-status"], "ok,no-healthy-node,not-managed,no-record");
    // Disabling the only node of a pool makes it "no-healthy-node".
    s.put_ok(
        "/admin/v1/nodes/v4a",
        json!({"ip": "3.3.3.4", "pool": "v4", "isp": "telecom", "region": "beijing", "enabled": false}),
    )
    .await;
    let resp = s.get("/d?dn=v4only.example.com").await;
    assert_eq!(resp.headers()["x-httpdns-status"], "no-healthy-node");
    assert_eq!(resp.text().await.unwrap(), "");
}

#[tokio::test]
async fn admin_changes_are_answered_when_the_write_returns() {
    let s = Server::start(&Db::Sqlite).await;
    s.seed().await;
    assert_eq!(s.text("/d?dn=www.example.com&ip=1.0.1.7").await, "1.1.1.1;1.1.1.2");
    s.put_ok(
        "/admin/v1/nodes/t-bj",
        json!({"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing", "enabled": false}),
    )
    .await;
    assert_eq!(s.text("/d?dn=www.example.com&ip=1.0.1.7").await, "1.1.1.2");
    let (status, _) = s.admin(reqwest::Method::DELETE, "/admin/v1/nodes/t-sh", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // No telecom node left: the unicom ones.
    assert_eq!(s.text("/d?dn=www.example.com&ip=1.0.1.7").await, "2.2.2.1;2.2.2.2");
    let (status, _) = s.admin(reqwest::Method::DELETE, "/admin/v1/domains/www.example.com", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let resp = s.get("/d?dn=www.example.com&ip=1.0.1.7").await;
    assert_eq!(resp.headers()["x-httpdns-status"], "not-managed");
}

#[tokio::test]
async fn bad_d_requests() {
    let s = Server::start(&Db::Sqlite).await;
    let long = format!("{}.com", "a".repeat(296));
    let nine = ["a.example.com"; 9].join(",");
    let cases = [
        ("/d".to_owned(), "dn", "MissingArgument"),
        ("/d?dn=".to_owned(), "dn", "MissingArgument"),
        ("/d?dn=a..b".to_owned(), "dn", "InvalidHost"),
        (format!("/d?dn={long}"), "dn", "InvalidHost"),
        (format!("/d?dn={}", ["x"; 64].join("")), "dn", "InvalidHost"),
        (format!("/d?dn={nine}"), "dn", "TooManyHosts"),
        ("/d?dn=a.com,,b.com".to_owned(), "dn", "InvalidHost"),
        ("/d?dn=a.com&type=mx".to_owned(), "type", "InvalidArgument"),
        ("/d?dn=%00.com".to_owned(), "dn", "InvalidHost"),
    ];
    for (path, field, code) in cases {
        let resp = s.get(&path).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            (body["field"].as_str(), body["code"].as_str()),
            (Some(field), Some(code)),
            "{path}: {body}"
        );
    }
    // Eight names are fine.
    let eight = ["a.example.com"; 8].join(",");
    assert_eq!(s.get(&format!("/d?dn={eight}")).await.status(), StatusCode::OK);
    // Methods other than GET/POST: 501 as DNSPod.
    let resp = s.http.put(s.url("/d?dn=a.com")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_IMPLEMENTED);
}

#[tokio::test]
async fn d_by_post_form() {
    let s = Server::start(&Db::Sqlite).await;
    s.seed().await;
    let resp = s
        .http
        .post(s.url("/d"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("dn=www.example.com&ip=1.0.2.7&ttl=1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "2.2.2.1;2.2.2.2,60");
}

#[tokio::test]
async fn resolve_errors_and_shapes() {
    let s = Server::start(&Db::Sqlite).await;
    s.seed().await;
    for (path, status, code) in [
        ("/resolve", 400, "MissingArgument"),
        ("/resolve?host=", 400, "MissingArgument"),
        ("/resolve?host=a..b", 400, "InvalidHost"),
        ("/resolve?host=a.com,b.com,c.com,d.com,e.com,f.com", 400, "TooManyHosts"),
        ("/resolve?host=a.com&query=5", 400, "InvalidArgument"),
    ] {
        let resp = s.get(path).await;
        assert_eq!(resp.status().as_u16(), status, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], code, "{path}");
    }
    let resp = s.http.post(s.url("/resolve?host=a.com")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "MethodNotAllowed");

    let body: Value = s
        .get("/resolve?host=www.example.com,none.example.com&query=6&ip=1.0.1.7")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body,
        json!({"dns": [
            {"host": "www.example.com", "client_ip": "1.0.1.7", "ipsv6": ["2402:4e00::1"], "ttl": 60, "origin_ttl": 60},
            {"host": "none.example.com", "client_ip": "1.0.1.7", "ipsv6": [], "ttl": 30, "origin_ttl": 30}
        ]})
    );
}

#[tokio::test]
async fn unknown_paths_are_json_404() {
    let s = Server::start(&Db::Sqlite).await;
    let resp = s.get("/nope").await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "NotFound");
}

#[tokio::test]
async fn forwarded_client_addresses_from_trusted_proxies_only() {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_TRUSTED_PROXIES".into(), "127.0.0.0/8".into());
    let s = Server::start_with(env, None).await;
    s.seed().await;
    let get = |h: &'static str, v: &'static str| {
        s.http.get(s.url("/d?dn=www.example.com&clientip=1")).header(h, v).send()
    };
    // The test client connects from 127.0.0.1, a trusted proxy: the forwarded client counts.
    let body = get("x-forwarded-for", "1.0.2.7").await.unwrap().text().await.unwrap();
    assert_eq!(body, "2.2.2.1;2.2.2.2|1.0.2.7");
    let body = get("x-real-ip", "1.0.1.7").await.unwrap().text().await.unwrap();
    assert_eq!(body, "1.1.1.1;1.1.1.2|1.0.1.7");
    // Untrusted peers' headers are ignored.
    let plain = Server::start(&Db::Sqlite).await;
    plain.seed().await;
    let body = plain
        .http
        .get(plain.url("/d?dn=www.example.com&clientip=1"))
        .header("x-forwarded-for", "1.0.2.7")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.ends_with("|127.0.0.1"), "{body}");
}
