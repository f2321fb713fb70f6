//! The model in memory: the one bridge between the store and everything that answers.
//!
//! * [`catalog`]: [`Catalog`] follows the store, keeps the model by name, builds answering
//!   snapshots off the async workers and swaps them in ([`Published`]: the snapshot with the
//!   health of its nodes), and publishes the snapshot, the health-check targets, the mirror
//!   rules and the image styles on a `watch` channel each, which the consumers subscribe to.
//! * [`live`]: [`LiveHub`], app feedback and the periodic fold of agent reports, probe
//!   latencies and feedback into the catalog's live inputs.
//! * [`kinds`]: every resource kind declared once ([`KindInfo`], [`ResourceKind`]); the admin
//!   API, `httpdns apply` and the catalog read it.
//! * [`metrics`]: the snapshot's and the store link's series, registered into the process's
//!   registry by whoever builds the catalog.
//!
//! The HTTP API, the DNS listeners, the live checker and the mirror are all clients of this
//! crate; it depends on none of them and knows nothing of HTTP.
//!
//! # Invariant
//!
//! The answer path only ever calls [`Catalog::snapshot`] or [`Catalog::snapshot_full`], a
//! lock-free load; nothing that answers awaits the store.

pub mod catalog;
pub mod kinds;
pub mod live;
pub mod metrics;

pub use catalog::{Catalog, RuleSpecs, Specs, StyleSpecs, SyncStatus};
/// Defined in `httpdns_live` (below the catalog, for the answer path); built and published here.
pub use httpdns_live::Published;
pub use kinds::{
    each_kind, info, shown, with_kind, Kind, KindDoc, KindInfo, KindVisitor, ResourceKind, Validation, KINDS,
};
pub use live::{LiveHub, LiveSettings};
pub use metrics::CatalogMetrics;
