//! Request ids: every request on the admin, health, metrics and feedback routes runs inside a
//! `request` span carrying an id, so each log line it causes (JSON or text) names the request;
//! the id is returned in `X-Request-Id`. A valid id sent by the client or a proxy in front (up
//! to 64 visible ASCII characters) is kept, so logs join across hops.
//!
//! The answer routes (`/d`, `/resolve`, DoH, the apps' config fetch) and the mirror's hit path
//! skip this: they log nothing per request, and a span, an id and a header per request would
//! cost a measurable share of what those paths spend (see docs/benchmarks.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

pub const HEADER: &str = "x-request-id";

/// A process-unique id: a random per-process prefix (replicas differ) and a counter.
pub fn next_id() -> String {
    static PREFIX: OnceLock<u32> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let mut b = [0u8; 4];
        let _ = getrandom::fill(&mut b);
        u32::from_be_bytes(b)
    });
    format!("{prefix:08x}-{:x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

fn given(req: &Request) -> Option<String> {
    let v = req.headers().get(HEADER)?.to_str().ok()?;
    (!v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic())).then(|| v.to_owned())
}

/// Runs the request in a `request` span, logs admin requests (an audit trail: who changed
/// what is in the admin write logs, this adds the status and time), and echoes the id.
pub async fn run(req: Request, next: Next) -> Response {
    let id = given(&req).unwrap_or_else(next_id);
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let span = tracing::info_span!("request", id = %id, %method, %path);
    let started = std::time::Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    if path.starts_with("/admin/") {
        span.in_scope(|| {
            tracing::info!(
                status = resp.status().as_u16(),
                ms = started.elapsed().as_millis() as u64,
                "Admin request."
            );
        });
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(HEADER, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_short() {
        let (a, b) = (next_id(), next_id());
        assert_ne!(a, b);
        assert!(a.len() <= 26 && a.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-'), "{a}");
    }
}
