//! The policy controller of seed 004 §4.2 (docs/policy.md): per carrier and region, from the
//! fleet's per-minute client events, it degrades a failing place to a probe share of HTTPDNS
//! (the rest of its devices go to LocalDNS at once instead of paying a timeout), ramps it back
//! by steps while the ramped cohort does as well as the held-back one, and steps back on a
//! regression. Every change is a new config version with its reason.
//!
//! * [`settings`]: `HTTPDNS_POLICY_*` and the tick.
//! * [`machine`]: one place's state machine (pure).
//! * [`threshold`]: each place's threshold from its own history (pure).
//! * [`PolicyView`]: the places in force on this replica, what the config center renders
//!   devices' `resolution` from.
//! * [`run`]: the loop: one leader across replicas (a lease in the store), evidence from the
//!   store's `policy_minutes`, state in `policy_places` (it survives restarts).

pub mod machine;
mod metrics;
pub mod run;
pub mod settings;
pub mod threshold;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use httpdns_config::policy::{Control, PlaceState};
use httpdns_store::{Store, StoreError};

pub use metrics::PolicyMetrics;
pub use settings::Settings;

/// The places in force on this replica: the controller's word on every place it has taken
/// out of `healthy`. Cheap to read (one atomic load) on every config request.
#[derive(Debug)]
pub struct PolicyView {
    settings: Settings,
    places: ArcSwap<HashMap<(String, String), Control>>,
}

impl PolicyView {
    pub fn new(settings: Settings) -> Self {
        Self { settings, places: ArcSwap::from_pointee(HashMap::new()) }
    }

    /// The controller's settings, as this replica runs them.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The controller's word on a place; `None` when it is healthy or the controller is off.
    pub fn control(&self, isp: &str, region: &str) -> Option<Control> {
        if !self.settings.auto {
            return None;
        }
        self.places.load().get(&(isp.to_owned(), region.to_owned())).copied()
    }

    /// Loads the places from the store (before serving config versions newer than those
    /// loaded: a version the controller published is served with the state it published).
    pub async fn reload(&self, store: &Store) -> Result<(), StoreError> {
        let rows = store.policy_places().await?;
        let map = rows
            .into_iter()
            .filter_map(|r| {
                let state = PlaceState::parse(&r.state)?;
                (state != PlaceState::Healthy)
                    .then(|| ((r.isp, r.region), Control { state, share: r.share.clamp(0.0, 1.0) }))
            })
            .collect();
        self.places.store(Arc::new(map));
        Ok(())
    }
}
