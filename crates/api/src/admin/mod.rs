//! The admin API: `/admin/v1/...`, JSON, bearer-token auth.
//!
//! Every resource kind goes through the same handlers, parameterised by a `httpdns_catalog::ResourceKind`
//! (declared there once, with its URL):
//! the URL names the resource and is canonicalised (a CIDR, a domain name, an id), the body is
//! deserialised strictly (unknown fields refused) and validated, and the write is one
//! transaction. Bad input is a 4xx with `{"error", "field", "code"}` and nothing is written.
//! After a write the catalog is synced before the response, so the change is answered from
//! the moment the `PUT` or `DELETE` returns.

pub mod access;
pub mod audit;
mod auth;
pub(crate) mod body;
mod domain_stats;
mod mirror;
mod overview;
mod policy;
mod prefetch;
mod resources;
pub mod state;
mod switches;
mod tokens;

use axum::middleware;
use axum::routing::get;
use axum::Router;

use state::AdminState;

pub use auth::require_token;
use httpdns_catalog::{KindVisitor, ResourceKind};

/// Largest object the admin API writes into the mirror store in one request.
const MAX_OBJECT_WRITE: usize = 256 << 20;
/// Largest prefetch request: 100,000 paths of up to about 160 bytes.
const MAX_PREFETCH_BODY: usize = 16 << 20;

/// The admin API: every route behind [`require_token`], tracked.
pub fn router(state: AdminState) -> Router {
    let router = routes().route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    crate::track::layer(router, state.metrics.clone()).with_state(state)
}

/// The admin routes, without auth.
fn routes() -> Router<AdminState> {
    let router = crate::config_center::admin_routes()
        .route("/admin/v1/nodes/{name}/metrics", axum::routing::post(crate::live::reports::one))
        .route("/admin/v1/metrics", axum::routing::post(crate::live::reports::batch))
        .route("/admin/v1/explain", get(crate::live::explain::handle))
        .route("/admin/v1/domains/{name}/stats", get(domain_stats::stats))
        .route("/admin/v1/overview", get(overview::handle))
        .route("/admin/v1/tokens", get(tokens::list))
        .route("/admin/v1/tokens/{name}", get(tokens::get_one).put(tokens::put).delete(tokens::delete))
        .route("/admin/v1/audit", get(audit::list))
        .route("/admin/v1/events/summary", get(crate::events::admin::summary))
        .route("/admin/v1/localdns/map", get(crate::events::admin::localdns_map))
        .route("/admin/v1/events/series", get(crate::events::series::series))
        .route("/admin/v1/policy/places", get(policy::places))
        .route("/admin/v1/policy/series", get(policy::series))
        .route("/admin/v1/vendor-switches", get(switches::get).put(switches::put))
        .route("/admin/v1/mirror/purge", axum::routing::post(mirror::purge))
        .route("/admin/v1/mirror/report", get(mirror::report))
        .route(
            "/admin/v1/mirror/prefetch",
            axum::routing::post(prefetch::start)
                .layer(axum::extract::DefaultBodyLimit::max(MAX_PREFETCH_BODY)),
        )
        .route("/admin/v1/mirror/prefetch/{id}", get(prefetch::progress))
        .route(
            "/admin/v1/mirror/objects/{*path}",
            axum::routing::put(mirror::write)
                .layer(axum::extract::DefaultBodyLimit::max(MAX_OBJECT_WRITE))
                .get(mirror::lookup),
        );
    // Every kind declared in `httpdns_catalog::kinds`, at the URL its `KindInfo` gives
    // (`tests/integration/kinds.rs` checks each is routed).
    let mut routes = Resources(Some(router));
    httpdns_catalog::each_kind(&mut routes);
    routes.0.expect("the router is put back by every visit")
}

/// Adds each kind's routes to the router it holds.
struct Resources(Option<Router<AdminState>>);

impl KindVisitor for Resources {
    fn visit<R: ResourceKind>(&mut self) {
        self.0 = self.0.take().map(resource::<R>);
    }
}

/// The list route and the `GET`/`PUT`/`DELETE` route of one resource kind.
fn resource<R: ResourceKind>(router: Router<AdminState>) -> Router<AdminState> {
    let info = R::info();
    router.route(info.base, get(resources::list::<R>)).route(
        &format!("{}/{}", info.base, info.name_pattern),
        get(resources::get_one::<R>).put(resources::put_one::<R>).delete(resources::delete_one::<R>),
    )
}
