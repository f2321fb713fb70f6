//! The config center's HTTP side, thin over `httpdns-center` (which holds the served
//! documents, publish and rollback, the per-device answer, the long poll's wait, adoption and
//! the rollouts' tick).
//!
//! * [`app`]: `POST /app/config-center/module-config` (the per-device answer) and
//!   `GET /app/config-center/public-key`; `answer_get`, the plain conditional GET, which the
//!   listener's shortcut answers through too.
//! * [`push`]: the routed GET, plain or a long poll (`wait=`).
//! * `reply`: the headers every config answer carries, `304` and `404`.
//! * [`admin`]: `/admin/v1/config/...` for operators (publish, dry run, history, rollback).
//! * [`adoption`]: `/admin/v1/config/{module}/adoption`, distinct devices per version.
//! * [`rollout`]: the guarded rollouts' admin routes.

pub mod admin;
pub mod adoption;
pub mod app;
pub mod push;
mod reply;
pub mod rollout;

use axum::routing::{get, post};
use axum::Router;

use crate::admin::state::AdminState;

/// Where apps fetch a module's document.
pub(crate) const MODULE_CONFIG_PATH: &str = "/app/config-center/module-config";

/// The admin routes, without auth (the caller layers it).
pub(crate) fn admin_routes() -> Router<AdminState> {
    Router::new()
        .route("/admin/v1/config", get(admin::list))
        .route("/admin/v1/config/{module}", get(admin::current).put(admin::put))
        .route("/admin/v1/config/{module}/versions", get(admin::history))
        .route("/admin/v1/config/{module}/versions/{version}", get(admin::version))
        .route("/admin/v1/config/{module}/rollback", post(admin::rollback))
        .route("/admin/v1/config/{module}/adoption", get(adoption::handle))
        .route("/admin/v1/config/{module}/rollout", get(rollout::get).put(rollout::put))
        .route("/admin/v1/config/{module}/rollout/pause", post(rollout::pause))
        .route("/admin/v1/config/{module}/rollout/resume", post(rollout::resume))
        .route("/admin/v1/config/{module}/rollout/promote", post(rollout::promote))
        .route("/admin/v1/config/{module}/rollout/abort", post(rollout::abort))
}
