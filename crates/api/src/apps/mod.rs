//! The app-facing product: the config center (`/app/config-center/...`), client events
//! (`POST /app/events`) and app feedback (`POST /feedback`, app-side telemetry like the events).
//! [`router`] is handed [`AppsState`], what these handlers read and nothing else.

pub mod state;

use axum::routing::{get, post};
use axum::Router;

use crate::config_center::{app, push, MODULE_CONFIG_PATH};
use state::AppsState;

/// The app routes. The config center's count their own requests (the config GET is a hot
/// path); events and feedback are counted, and given a request id, by the `track` layer.
pub fn router(state: AppsState) -> Router {
    let tracked = Router::new()
        .route("/feedback", post(crate::live::feedback::handle))
        .route("/app/events", post(crate::events::intake::handle));
    Router::new()
        .route(MODULE_CONFIG_PATH, post(app::post).get(push::get))
        .route("/app/config-center/public-key", get(app::public_key))
        .merge(crate::track::layer(tracked, state.metrics.clone()))
        .with_state(state)
}
