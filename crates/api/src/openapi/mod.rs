//! `GET /openapi.json`: the OpenAPI 3.1 description of the API listener.
//!
//! The document is written by hand next to this file (the handlers' wire formats are
//! hand-written too, for compatibility with the DNSPod and Alibaba clients, so a derive would
//! describe the Rust types rather than the wire). A test keeps it honest in both directions:
//! every route the router registers is documented, and every documented method on every
//! documented path is routed (`tests/integration/openapi.rs`).

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

/// The document, as served.
pub const DOCUMENT: &str = include_str!("openapi.json");

pub(crate) async fn handle() -> Response {
    let mut resp = DOCUMENT.into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_is_openapi_json() {
        let v: serde_json::Value = serde_json::from_str(super::DOCUMENT).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        assert!(v["paths"].as_object().unwrap().len() > 30);
    }
}
