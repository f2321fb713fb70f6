//! `/openapi.json` against the router, in both directions: every route registered in the
//! source is documented, and every documented operation is routed (neither the fallback's
//! "no such endpoint" nor a 405).

use std::collections::BTreeSet;
use std::path::Path;

use reqwest::Method;
use serde_json::Value;

use crate::support::{Db, Server, TOKEN};

/// Paths registered by `.route("...")` in the API crate's router code, and the two routes of
/// every resource kind in `httpdns_catalog::KINDS` (which `admin::routes` registers), in
/// OpenAPI form (`{*name}` becomes `{name}`).
fn registered_paths() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/api/src");
    let mut out = BTreeSet::new();
    for file in ["lib.rs", "admin/mod.rs", "config_center/mod.rs", "console/mod.rs"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find(".route(") {
            rest = &rest[i + ".route(".len()..];
            let call = rest.trim_start();
            if let Some(lit) = call.strip_prefix('"') {
                out.insert(lit[..lit.find('"').unwrap()].to_owned());
            }
        }
    }
    for kind in httpdns_catalog::KINDS {
        out.insert(kind.base.to_owned());
        out.insert(format!("{}/{}", kind.base, kind.name_pattern));
    }
    out.into_iter().map(|p| p.replace("{*", "{")).collect()
}

#[tokio::test]
async fn every_route_is_documented_and_every_documented_operation_is_routed() {
    let s = Server::start(&Db::Sqlite).await;
    let doc: Value = s.get("/openapi.json").await.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();

    let registered = registered_paths();
    assert!(registered.len() >= 25, "the scan found the router: {registered:?}");
    let undocumented: Vec<&String> = registered.iter().filter(|p| !paths.contains_key(*p)).collect();
    assert!(undocumented.is_empty(), "routes missing from /openapi.json: {undocumented:?}");

    for (path, ops) in paths {
        let concrete = path
            .replace("{name}", "x1")
            .replace("{module}", "m1")
            .replace("{version}", "1")
            .replace("{path}", "image/a.json")
            .replace("{account}", "1")
            .replace("{api}", "d");
        for method in ops.as_object().unwrap().keys() {
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let resp = s
                .http
                .request(m.clone(), s.url(&concrete))
                .bearer_auth(TOKEN)
                .body("{}")
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let body = resp.text().await.unwrap();
            assert_ne!(status, 405, "{method} {path} is documented but not routed");
            assert!(
                !body.contains("no such endpoint"),
                "{method} {path} is documented but falls through: {body}"
            );
        }
    }
}
