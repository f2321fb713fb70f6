//! The config center: versioned domain-list documents for the apps.
//!
//! * [`cache`]: the documents this replica serves, replaced only by higher versions.
//! * [`app`]: `POST|GET /app/config-center/module-config`, `GET /app/config-center/public-key`.
//! * [`admin`]: `/admin/v1/config/...` for operators (publish, history, rollback).
//! * [`push`]: the long poll (`wait=`) of the config GET.
//! * [`adoption`]: distinct devices per version, from the per-device POSTs.
//! * [`rollout`]: guarded rollouts, their admin routes and their tick; [`sides`]: the client
//!   events counted by the config version the device runs, which rollouts compare.
//! * `device`: the per-device POST, parsed, and its answer (flags, target).

pub mod admin;
pub mod adoption;
pub mod app;
pub mod cache;
mod device;
pub mod push;
pub mod rollout;

use axum::routing::{get, post};
use axum::Router;

use crate::state::AppState;

/// Where apps fetch a module's document.
pub(crate) const MODULE_CONFIG_PATH: &str = "/app/config-center/module-config";

/// The public routes.
pub fn app_routes() -> Router<AppState> {
    Router::new()
        .route(MODULE_CONFIG_PATH, post(app::post).get(app::get))
        .route("/app/config-center/public-key", get(app::public_key))
}

/// The admin routes, without auth (the caller layers it).
pub fn admin_routes() -> Router<AppState> {
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
