//! The config center (docs/config-center.md) without HTTP: what a replica serves, how a
//! version is published and rolled back, the per-device answer, the long poll's wait, the
//! adoption sketches and the guarded rollouts' tick. The routes are `httpdns-api`'s
//! (`config_center`), thin over this crate.
//!
//! * [`cache`]: [`ConfigCache`], each module's current document pre-rendered and pre-signed,
//!   replaced only by a higher version (a replica never goes backwards); a rollout's newest
//!   version as a [`cache::Canary`] for its share of devices.
//! * [`publish`]: one store transaction, then served here at once.
//! * [`device`]: the per-device POST parsed and rendered (flags, the matching target, the
//!   resolution from the policy controller's [`httpdns_policy::PolicyView`]); the one place
//!   that answer is put together.
//! * [`push`]: the long poll's wait on the cache's one `watch` channel.
//! * [`adoption`]: HyperLogLog sketches of devices per version, flushed to the store.
//! * [`rollout`]: guarded rollouts' states, sides, rollback and tick.
//! * [`metrics`]: [`CenterMetrics`], the served versions and client-driven reloads.

pub mod adoption;
pub mod cache;
pub mod device;
pub mod metrics;
pub mod publish;
pub mod push;
pub mod rollout;

pub use cache::{ConfigCache, Published};
pub use metrics::CenterMetrics;
