//! `GET /openapi.json`: the OpenAPI 3.1 description of the API listener.
//!
//! The document is written by hand next to this file (the handlers' wire formats are
//! hand-written too, for compatibility with the DNSPod and Alibaba clients, so a derive would
//! describe the Rust types rather than the wire), except the resource kinds' routes: each kind
//! of `httpdns_catalog::KINDS` gets its two paths from `resource.json`, filled in from its
//! `KindInfo` (collection, `doc.schema`, `doc.tag`, `doc.name`), as `admin::routes` routes them.
//! A test keeps it honest in both directions: every route the router registers is documented,
//! and every documented method on every documented path is routed
//! (`tests/integration/openapi.rs`).

use std::sync::OnceLock;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use httpdns_catalog::{KindInfo, KINDS};
use serde_json::Value;

/// Everything but the resource kinds' paths.
const HAND_WRITTEN: &str = include_str!("openapi.json");
/// The collection and the one-resource path items of a kind, with `@COLLECTION@`, `@SCHEMA@`,
/// `@TAG@` and `@NAME@` to fill in.
const RESOURCE: &str = include_str!("resource.json");

/// The document, as served.
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut doc: Value = serde_json::from_str(HAND_WRITTEN).expect("openapi.json is JSON");
        let paths = doc["paths"].as_object_mut().expect("openapi.json has paths");
        for info in &KINDS {
            let [collection, one] = kind_paths(info);
            paths.insert(info.base.to_owned(), collection);
            paths.insert(format!("{}/{}", info.base, info.name_pattern.replace("{*", "{")), one);
        }
        serde_json::to_string_pretty(&doc).expect("a JSON value serialises")
    })
}

/// The path items of one kind: its collection, then one resource.
fn kind_paths(info: &KindInfo) -> [Value; 2] {
    // Inside a JSON string: the quotes of the encoded strings dropped.
    let quoted = |s: &str| Value::String(s.to_owned()).to_string().trim_matches('"').to_owned();
    let text = RESOURCE
        .replace("@COLLECTION@", &quoted(info.base.trim_start_matches("/admin/v1/")))
        .replace("@SCHEMA@", &quoted(info.doc.schema))
        .replace("@TAG@", &quoted(info.doc.tag))
        .replace("@NAME@", &quoted(info.doc.name));
    let mut items: Value = serde_json::from_str(&text).expect("resource.json filled in is JSON");
    [items["collection"].take(), items["one"].take()]
}

pub(crate) async fn handle() -> Response {
    let mut resp = document().into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_is_openapi_json() {
        let v: serde_json::Value = serde_json::from_str(super::document()).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        assert!(v["paths"].as_object().unwrap().len() > 30);
    }

    /// Every kind's paths are documented, with its spec's schema (which must exist).
    #[test]
    fn every_kind_is_documented_with_its_schema() {
        let v: serde_json::Value = serde_json::from_str(super::document()).unwrap();
        for info in &httpdns_catalog::KINDS {
            let one = &v["paths"][format!("{}/{{name}}", info.base)];
            let schema = format!("#/components/schemas/{}", info.doc.schema);
            assert_eq!(one["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"], schema);
            assert!(v["components"]["schemas"][info.doc.schema].is_object(), "{schema} is written");
            assert!(v["paths"][info.base]["get"].is_object(), "{}", info.base);
        }
    }
}
