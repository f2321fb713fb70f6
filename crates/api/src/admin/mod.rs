//! The admin API: `/admin/v1/...`, JSON, bearer-token auth.
//!
//! Every resource kind goes through the same handlers, parameterised by [`AdminResource`]:
//! the URL names the resource and is canonicalised (a CIDR, a domain name, an id), the body is
//! deserialised strictly (unknown fields refused) and validated, and the write is one
//! transaction. Bad input is a 4xx with `{"error", "field", "code"}` and nothing is written.
//! After a write the catalog is synced before the response, so the change is answered from
//! the moment the `PUT` or `DELETE` returns.

mod auth;
mod body;
mod resources;

use axum::routing::get;
use axum::Router;

use crate::state::AppState;

pub use auth::require_token;
pub(crate) use body::parse as parse_body;
pub use resources::{Accounts, AdminResource, Domains, Networks, Nodes, Pools};

/// The admin routes, without auth (the caller layers [`require_token`]).
pub fn routes() -> Router<AppState> {
    crate::config_center::admin_routes()
        .route("/admin/v1/nodes/{name}/metrics", axum::routing::post(crate::live::reports::one))
        .route("/admin/v1/metrics", axum::routing::post(crate::live::reports::batch))
        .route("/admin/v1/explain", get(crate::live::explain::handle))
        .route("/admin/v1/networks", get(resources::list::<Networks>))
        // A catch-all, so a CIDR works percent-encoded (`1.0.1.0%2F24`, as documented) and
        // also with a literal slash.
        .route(
            "/admin/v1/networks/{*name}",
            get(resources::get_one::<Networks>)
                .put(resources::put_one::<Networks>)
                .delete(resources::delete_one::<Networks>),
        )
        .route("/admin/v1/nodes", get(resources::list::<Nodes>))
        .route(
            "/admin/v1/nodes/{name}",
            get(resources::get_one::<Nodes>)
                .put(resources::put_one::<Nodes>)
                .delete(resources::delete_one::<Nodes>),
        )
        .route("/admin/v1/pools", get(resources::list::<Pools>))
        .route(
            "/admin/v1/pools/{name}",
            get(resources::get_one::<Pools>)
                .put(resources::put_one::<Pools>)
                .delete(resources::delete_one::<Pools>),
        )
        .route("/admin/v1/accounts", get(resources::list::<Accounts>))
        .route(
            "/admin/v1/accounts/{name}",
            get(resources::get_one::<Accounts>)
                .put(resources::put_one::<Accounts>)
                .delete(resources::delete_one::<Accounts>),
        )
        .route("/admin/v1/domains", get(resources::list::<Domains>))
        .route(
            "/admin/v1/domains/{name}",
            get(resources::get_one::<Domains>)
                .put(resources::put_one::<Domains>)
                .delete(resources::delete_one::<Domains>),
        )
}
