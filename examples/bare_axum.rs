//! The ceiling for the `/d` benchmark: a bare axum server answering `GET /d` with a constant
//! response, byte for byte the size and header set of a real `/d` answer, on the same runtime
//! shape as `httpdns serve`. Both are pinned to one core by `scripts/bench-http.sh` (the load
//! generator to the other), and the same bytes on the wire keep the load generator's cost
//! equal for both targets, so the ratio measures the server-side work only.
//!
//! It also answers the config center's conditional GET with a constant `304`.
//!
//! It allocates through the system allocator, as an axum server does by default;
//! `examples/bare_axum_mimalloc.rs` is the same server on mimalloc, httpdns's allocator, for the
//! ceiling of the HTTP stack alone.
//!
//! `cargo run --release --example bare_axum -- 127.0.0.1:18481`

#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a benchmark tool: it prints what it measured")]

use axum::http::header;
use axum::routing::get;
use axum::Router;

async fn constant() -> impl axum::response::IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "private, no-store"),
            (header::HeaderName::from_static("x-httpdns-status"), "ok"),
        ],
        "1.1.1.2;1.1.1.4,60",
    )
}

/// The ceiling for the config center's conditional GET: a constant `304` with the headers a
/// real one carries.
async fn not_modified() -> impl axum::response::IntoResponse {
    (
        axum::http::StatusCode::NOT_MODIFIED,
        [
            (header::ETAG, "\"1\""),
            (header::CACHE_CONTROL, "public, max-age=10, must-revalidate"),
            (header::HeaderName::from_static("x-config-version"), "1"),
        ],
    )
}

pub(crate) fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:18481".into());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let app = Router::new()
            .route("/d", get(constant))
            .route("/app/config-center/module-config", get(not_modified));
        let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
        eprintln!("bare axum listening on {}", listener.local_addr().expect("addr"));
        axum::serve(listener, app).await.expect("serve");
    });
}
