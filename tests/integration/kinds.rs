//! Every resource kind declared in `httpdns_catalog::KINDS` is wired everywhere: routed with
//! its four operations, documented in `/openapi.json`, answered from the catalog, and (when
//! declarative) read back by `httpdns export` under its section and planned as no change when
//! applied back. This is the check of the recipe in ARCHITECTURE.md ("Adding a resource
//! kind"): the kind's own `KindInfo::example` is written through every path.

use httpdns_apply::client::AdminClient;
use httpdns_catalog::{Kind, KINDS};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::support::{Db, Server, TOKEN};

/// A valid resource of `kind`: its name and body, the example its `KindInfo` declares.
fn sample(kind: Kind) -> (&'static str, Value) {
    let (name, body) = httpdns_catalog::info(kind).example;
    (name, serde_json::from_str(body).unwrap())
}

#[tokio::test]
async fn every_declared_kind_is_routed_documented_synced_and_exported() {
    let s = Server::start(&Db::Sqlite).await;
    let doc: Value = s.get("/openapi.json").await.json().await.unwrap();
    // Created in dependency order, so a node finds its pool and a domain its pool.
    for info in &KINDS {
        let (name, body) = sample(info.kind);
        let section = info.section;
        let one = info.path(name);
        let doc_one = format!("{}/{}", info.base, info.name_pattern.replace("{*", "{"));
        for (path, methods) in
            [(info.base.to_owned(), &["get"][..]), (doc_one, &["get", "put", "delete"][..])]
        {
            for m in methods {
                assert!(doc["paths"][&path][m].is_object(), "{section}: {m} {path} is not in /openapi.json");
            }
        }
        let (status, resp) = s.put(&one, body.clone()).await;
        assert!(status.is_success(), "{section}: PUT {one}: {status} {resp}");
        let (status, got) = s.admin(Method::GET, &one, None).await;
        assert_eq!(status, StatusCode::OK, "{section}: GET {one}: {got}");
        for (field, value) in body.as_object().unwrap() {
            assert_eq!(&got[field], value, "{section}: {field} round-trips: {got}");
        }
        let (status, list) = s.admin(Method::GET, info.base, None).await;
        assert_eq!(status, StatusCode::OK, "{section}: list");
        assert!(
            list["items"].as_array().unwrap().iter().any(|i| i["name"] == name),
            "{section}: {name} is listed: {list}"
        );
    }

    // The catalog took every kind in: the answer needs the network (the client's carrier),
    // the pool, the node and the domain; accounts, rules and styles are where they are used.
    assert_eq!(s.text("/d?dn=kinds.example.com&ip=10.9.1.1").await, "1.2.3.4");
    let (catalog, mirror) = (&s.running().api.answers.catalog, &s.running().mirror);
    assert!(catalog.snapshot().account(4242).is_some(), "accounts reach the snapshot");
    assert!(mirror.rules().iter().any(|r| r.name == "kinds-rule"), "mirror rules reach the gateway");
    assert_eq!(mirror.style_names(), ["kinds-style"], "image styles reach the gateway");

    // `httpdns export` reads every declarative kind back under its section, through the
    // paths the registry gives.
    let client = AdminClient::new(&s.url(""), TOKEN).unwrap();
    let exported = serde_json::to_value(client.current().await.unwrap().state).unwrap();
    for info in KINDS.iter().filter(|k| k.declarative) {
        let (name, _) = sample(info.kind);
        assert!(exported[info.section].get(name).is_some(), "{}: exported: {exported}", info.section);
    }
    assert!(exported.get("accounts").is_none(), "accounts (secrets) stay out of files");
    // And the export, read back as a file, is what the server holds: applying it changes nothing.
    let current = client.current().await.unwrap().state;
    let file = current.render(httpdns_apply::Format::Yaml).unwrap();
    let read = httpdns_apply::StateFile::parse(&file, httpdns_apply::Format::Yaml).unwrap();
    assert!(httpdns_apply::plan(&current, &read, true).is_empty(), "{file}");

    // Deleted in reverse order; each is gone.
    for info in KINDS.iter().rev() {
        let (name, _) = sample(info.kind);
        let one = info.path(name);
        let (status, resp) = s.admin(Method::DELETE, &one, None).await;
        assert!(status.is_success(), "{}: DELETE {one}: {status} {resp}", info.section);
        let (status, _) = s.admin(Method::GET, &one, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{}: gone after DELETE", info.section);
    }
}
