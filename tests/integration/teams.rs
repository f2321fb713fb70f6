//! Roles and the audit trail (issue 42): named tokens with roles, viewers refused on every
//! write route (enumerated from the router through its OpenAPI document, which
//! `openapi.rs` holds equal to the router), operators refused tokens, revocation, console
//! sessions of named tokens, and an audit entry for each kind of change.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{Db, Server, TOKEN};

/// Makes a token `name` with `role` as the bootstrap admin; returns its secret.
async fn token(s: &Server, name: &str, role: &str) -> String {
    let (status, body) = s.put(&format!("/admin/v1/tokens/{name}"), json!({ "role": role })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!((body["name"].as_str(), body["role"].as_str()), (Some(name), Some(role)));
    body["token"].as_str().unwrap().to_owned()
}

async fn call(
    s: &Server,
    bearer: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = s.http.request(method, s.url(path)).bearer_auth(bearer);
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, serde_json::from_str(&resp.text().await.unwrap()).unwrap_or(Value::Null))
}

fn config_doc(host: &str) -> Value {
    json!({"mergeHostConfigs": [], "hostListConfig": [{"host": host, "rate": 1}],
        "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []})
}

/// Every (method, concrete path) of the admin API that changes something, from `/openapi.json`.
async fn write_routes(s: &Server) -> Vec<(Method, String)> {
    let doc: Value = s.get("/openapi.json").await.json().await.unwrap();
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/admin/v1/") {
            continue;
        }
        let concrete = path
            .replace("{name}", "x1")
            .replace("{module}", "m1")
            .replace("{version}", "1")
            .replace("{path}", "image/a.json")
            .replace("{id}", "1");
        for method in ops.as_object().unwrap().keys() {
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            if !matches!(m, Method::GET | Method::HEAD) {
                out.push((m, concrete.clone()));
            }
        }
    }
    out
}

#[tokio::test]
async fn viewers_read_only_operators_not_tokens_and_revoked_tokens_stop_at_once() {
    let s = Server::start(&Db::Sqlite).await;
    let viewer = token(&s, "viewer-1", "viewer").await;
    let operator = token(&s, "ops", "operator").await;

    let routes = write_routes(&s).await;
    assert!(routes.len() >= 20, "the router's write routes: {routes:?}");
    for (method, path) in &routes {
        let (status, body) = call(&s, &viewer, method.clone(), path, Some(json!({}))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "viewer {method} {path}: {body}");
        assert_eq!(body["field"], "role", "{method} {path}: {body}");
    }
    // Reads are a viewer's, but not the routes that show secrets.
    assert_eq!(call(&s, &viewer, Method::GET, "/admin/v1/nodes", None).await.0, StatusCode::OK);
    assert_eq!(call(&s, &viewer, Method::GET, "/admin/v1/audit", None).await.0, StatusCode::OK);
    assert_eq!(call(&s, &viewer, Method::GET, "/admin/v1/accounts", None).await.0, StatusCode::FORBIDDEN);

    // Operators change resources, not tokens.
    let node = json!({"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing"});
    let (status, body) = call(&s, &operator, Method::PUT, "/admin/v1/nodes/n1", Some(node)).await;
    assert!(status.is_success(), "{body}");
    let (status, _) =
        call(&s, &operator, Method::PUT, "/admin/v1/tokens/x", Some(json!({"role": "viewer"}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        call(&s, &operator, Method::DELETE, "/admin/v1/tokens/viewer-1", None).await.0,
        StatusCode::FORBIDDEN
    );

    // Bad input names its field; reserved names are refused; nothing is made.
    let (status, body) = s.put("/admin/v1/tokens/x", json!({"role": "root"})).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("role")));
    let (status, body) = s.put("/admin/v1/tokens/x", json!({"role": "viewer", "extra": 1})).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("extra")));
    let (status, body) = s.put("/admin/v1/tokens/controller", json!({"role": "admin"})).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("name")));
    let (status, body) = s.put("/admin/v1/tokens/Bad.Name", json!({"role": "admin"})).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("name")));

    // The list shows names and roles, never a secret or its hash.
    let (status, list) = s.admin(Method::GET, "/admin/v1/tokens", None).await;
    assert_eq!(status, StatusCode::OK);
    let text = list.to_string();
    assert!(!text.contains(&viewer) && !text.contains("sha256") && !text.contains("\"token\""), "{text}");
    let names: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ops", "viewer-1"]);

    // Revoked: the next request is refused. Replaced: the old secret stops, the new one works.
    let (status, _) = s.admin(Method::DELETE, "/admin/v1/tokens/viewer-1", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(call(&s, &viewer, Method::GET, "/admin/v1/nodes", None).await.0, StatusCode::UNAUTHORIZED);
    let (status, body) = s.put("/admin/v1/tokens/ops", json!({"role": "admin"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(call(&s, &operator, Method::GET, "/admin/v1/nodes", None).await.0, StatusCode::UNAUTHORIZED);
    let new = body["token"].as_str().unwrap();
    let (status, _) = call(&s, new, Method::PUT, "/admin/v1/tokens/y", Some(json!({"role": "viewer"}))).await;
    assert_eq!(status, StatusCode::CREATED, "an admin token makes tokens");
}

/// Signs in to the console with `secret`; returns the cookie header and the CSRF token.
async fn sign_in(s: &Server, secret: &str) -> (String, String, Value) {
    let resp = s.http.post(s.url("/console/session")).json(&json!({ "token": secret })).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let cookie = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("httpdns_console="))
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let body: Value = resp.json().await.unwrap();
    (cookie, body["csrf"].as_str().unwrap().to_owned(), body)
}

#[tokio::test]
async fn console_sessions_carry_the_tokens_name_and_role_and_end_with_it() {
    let s = Server::start(&Db::Sqlite).await;
    let viewer = token(&s, "alice", "viewer").await;
    let (cookie, csrf, body) = sign_in(&s, &viewer).await;
    assert_eq!((body["name"].as_str(), body["role"].as_str()), (Some("alice"), Some("viewer")));
    let whoami = s.http.get(s.url("/console/session")).header("cookie", &cookie).send().await.unwrap();
    let who: Value = whoami.json().await.unwrap();
    assert_eq!(who["role"], "viewer");
    let read = s.http.get(s.url("/admin/v1/nodes")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    let write = s
        .http
        .put(s.url("/admin/v1/networks/1.0.1.0%2F24"))
        .header("cookie", &cookie)
        .header("x-csrf-token", &csrf)
        .body(json!({"isp": "telecom", "region": "beijing"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), StatusCode::FORBIDDEN);

    // A role raised takes effect in the session; a revoked token ends it.
    s.put_ok("/admin/v1/tokens/alice", json!({"role": "operator"})).await;
    let after = s.http.get(s.url("/admin/v1/nodes")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED, "a replaced token's sessions end");
    let bootstrap = sign_in(&s, TOKEN).await.2;
    assert_eq!((bootstrap["name"].as_str(), bootstrap["role"].as_str()), (Some("admin"), Some("admin")));
}

#[tokio::test]
async fn every_kind_of_change_leaves_an_audit_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_with(crate::support::env(tmp.path(), &Db::Sqlite), None).await;
    let ops = token(&s, "ops", "operator").await;

    // Resources through the API.
    let node = json!({"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing"});
    assert!(call(&s, &ops, Method::PUT, "/admin/v1/nodes/n1", Some(node)).await.0.is_success());
    assert!(call(&s, &ops, Method::DELETE, "/admin/v1/nodes/n1", None).await.0.is_success());
    // Config: a publish, a replace, a dry run (no entry), a rollback.
    assert_eq!(
        call(&s, &ops, Method::PUT, "/admin/v1/config/cdn", Some(config_doc("a.example.com"))).await.0,
        201
    );
    let replace = s
        .http
        .put(s.url("/admin/v1/config/cdn"))
        .bearer_auth(&ops)
        .header("if-match", "\"1\"")
        .body(config_doc("b.example.com").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(replace.status(), StatusCode::OK);
    let dry = s
        .http
        .put(s.url("/admin/v1/config/cdn?dry_run=1"))
        .bearer_auth(&ops)
        .header("if-match", "*")
        .body(config_doc("c.example.com").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(dry.status(), StatusCode::OK);
    let (status, _) =
        call(&s, &ops, Method::POST, "/admin/v1/config/cdn/rollback", Some(json!({"to": 1}))).await;
    assert_eq!(status, StatusCode::OK);
    // A refused change leaves none.
    assert_eq!(call(&s, &ops, Method::PUT, "/admin/v1/nodes/n2", Some(json!({}))).await.0, 400);
    // The console, as the bootstrap admin.
    let (cookie, csrf, _) = sign_in(&s, TOKEN).await;
    let console = s
        .http
        .put(s.url("/admin/v1/networks/1.0.1.0%2F24"))
        .header("cookie", &cookie)
        .header("x-csrf-token", &csrf)
        .body(json!({"isp": "telecom", "region": "beijing"}).to_string())
        .send()
        .await
        .unwrap();
    assert!(console.status().is_success());
    // `httpdns apply -f`, with the operator's token.
    let file = tmp.path().join("state.json");
    let state = json!({"networks": {"1.0.1.0/24": {"isp": "telecom", "region": "beijing"},
        "1.0.2.0/24": {"isp": "unicom", "region": "shanghai"}}});
    std::fs::write(&file, state.to_string()).unwrap();
    let args = [
        "apply".to_owned(),
        "-f".into(),
        file.display().to_string(),
        "--server".into(),
        s.base.clone(),
        "--token".into(),
        ops.clone(),
    ];
    // Off the test's runtime, which also serves the in-process server apply talks to.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_httpdns"))
            .args(&args)
            .env_remove("HTTPDNS_ADMIN_TOKEN")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // An automatic change (the policy controller) appends through the store.
    let store =
        httpdns_store::Store::connect(&format!("sqlite://{}", tmp.path().join("httpdns.db").display()))
            .await
            .unwrap();
    store
        .audit_append(&httpdns_store::teams::AuditEntry {
            actor: "controller".into(),
            method: "PUT".into(),
            path: "/admin/v1/config/cdn".into(),
            revision_before: Some(3),
            revision_after: Some(4),
            status: 200,
            detail: "unicom/shanghai degraded: httpdnsRate 1 -> 0.25".into(),
        })
        .await
        .unwrap();

    // Oldest first after a cursor, in pages.
    let (status, page) = s.admin(Method::GET, "/admin/v1/audit?after=0&limit=100", None).await;
    assert_eq!(status, StatusCode::OK);
    let items = page["items"].as_array().unwrap();
    let seen: Vec<(String, String, String)> = items
        .iter()
        .map(|i| {
            (
                i["actor"].as_str().unwrap().into(),
                i["method"].as_str().unwrap().into(),
                i["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = |actor: &str, method: &str, path: &str| (actor.to_owned(), method.to_owned(), path.to_owned());
    let expected = [
        want("admin", "PUT", "/admin/v1/tokens/ops"),
        want("ops", "PUT", "/admin/v1/nodes/n1"),
        want("ops", "DELETE", "/admin/v1/nodes/n1"),
        want("ops", "PUT", "/admin/v1/config/cdn"),
        want("ops", "PUT", "/admin/v1/config/cdn"),
        want("ops", "POST", "/admin/v1/config/cdn/rollback"),
        want("admin", "PUT", "/admin/v1/networks/1.0.1.0%2F24"),
        want("ops", "PUT", "/admin/v1/networks/1.0.2.0%2F24"),
        want("controller", "PUT", "/admin/v1/config/cdn"),
    ];
    assert_eq!(seen, expected, "{page}");
    // Config entries name the module's versions; resource entries the store's revisions.
    assert_eq!(
        (items[3]["revision_before"].clone(), items[3]["revision_after"].clone()),
        (Value::Null, json!(1))
    );
    assert_eq!(
        (items[4]["revision_before"].clone(), items[4]["revision_after"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(items[5]["revision_after"], 3);
    let (b, a) =
        (items[1]["revision_before"].as_i64().unwrap(), items[1]["revision_after"].as_i64().unwrap());
    assert!(a > b, "{}", items[1]);
    assert_eq!(items[6]["detail"], "console");
    assert!(items[7]["detail"].as_str().unwrap().starts_with("httpdns-apply/"), "{}", items[7]);
    assert!(items.iter().all(|i| i["at_ms"].as_i64().unwrap() > 0 && i["status"].as_u64().unwrap() < 300));

    // Paging: two at a time, then on from the cursor; newest first without one.
    let (_, first) = s.admin(Method::GET, "/admin/v1/audit?after=0&limit=2", None).await;
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    let next = first["next_after"].as_i64().unwrap();
    let (_, second) = s.admin(Method::GET, &format!("/admin/v1/audit?after={next}&limit=2"), None).await;
    assert_eq!(second["items"][0]["seq"].as_i64().unwrap(), next + 1);
    let (_, newest) = s.admin(Method::GET, "/admin/v1/audit?limit=1", None).await;
    assert_eq!(newest["items"][0]["actor"], "controller");
    let (status, body) = s.admin(Method::GET, "/admin/v1/audit?after=x", None).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("after")));
}
