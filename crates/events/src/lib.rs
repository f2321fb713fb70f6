//! Client events (docs/observability.md): what the apps report through `POST /app/events`,
//! counted per minute in memory and flushed to the store. No HTTP here: the intake and the
//! admin summaries are `httpdns-api`'s handlers over this crate.
//!
//! * [`schema`]: the event types, parsed into values that cannot be invalid (pure).
//! * [`verdict`]: the LocalDNS map's judgement of a `localdns_compare` report (pure).
//! * [`aggregate`]: per-minute counts in memory, bounded (pure).
//! * [`fleet`]: the fleet's rates, alerts, series and LocalDNS verdicts from every replica's
//!   stored rows (pure), what the admin summaries format.
//! * [`hub`]: [`EventHub`], the aggregator, its Prometheus series, and the flush of minutes to
//!   the store.
//! * [`sides`]: events counted by the config version devices run, what guarded rollouts
//!   compare.
//!
//! No write per event: an event is a map update under a lock taken once per batch; each
//! replica rewrites its recent minutes' rows every [`EventSettings::flush_interval`].

pub mod aggregate;
pub mod fleet;
pub mod hub;
pub mod schema;
pub mod sides;
pub mod verdict;

pub use hub::{now_minute, Counted, EventHub, EventMetrics, EventSettings, MAX_UNSIGNED_WEIGHT};
