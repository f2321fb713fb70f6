//! The httpdns product on the API listener: `/d`, `/resolve`, `/v2/d`, the Alibaba account
//! routes (`/{account}/{api}`), `/ss` and `/conf` ([`bootstrap`]) and `/dns-query`, with
//! [`HttpdnsState`], the slice of state they use and nothing else.
//!
//! Every answer route reads downhill: parameters ([`crate::dnspod::params`], [`crate::resolve`],
//! [`crate::v2`]) → guards (`httpdns_guard`: client address, authentication, limits) →
//! the engine (`httpdns_answer::Engine`) → the route's formatter. No module calls back into
//! one that called it; what the routes share is below them: the state ([`state`],
//! [`HttpdnsState`]) and the `X-Httpdns-Status` header ([`status`]), leaves that call no
//! route.

pub mod bootstrap;
pub mod state;
pub mod status;

use axum::routing::any;
use axum::Router;

pub use state::{HttpdnsParts, HttpdnsState};
pub use status::{status_header, STATUS_HEADER};

/// The httpdns routes. They record their own request metrics: a generic middleware boxes and
/// clones the inner service per request, a cost the answer path does not pay.
pub fn router(state: HttpdnsState) -> Router {
    Router::new()
        .route("/d", any(crate::dnspod::handle))
        .route("/resolve", any(crate::resolve::handle))
        .route("/dns-query", any(crate::doh::handle))
        .route("/v2/d", any(crate::v2::handle))
        .route("/ss", any(bootstrap::plain))
        .route("/conf", any(bootstrap::conf))
        .route("/{account}/{api}", any(crate::resolve::account))
        .with_state(state)
}
