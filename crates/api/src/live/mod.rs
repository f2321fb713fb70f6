//! Live score inputs on the API side: node agents' metric reports, app feedback, and turning
//! them (with the probes' latencies) into the catalog's live inputs.
//!
//! * [`hub`]: [`LiveHub`], the feedback aggregator and the periodic refresh and flush.
//! * [`reports`]: `POST /admin/v1/nodes/{id}/metrics` and `POST /admin/v1/metrics`.
//! * [`feedback`]: `POST /feedback`, rate limited per client.
//! * [`explain`]: `GET /admin/v1/explain`.

pub mod explain;
pub mod feedback;
pub mod hub;
pub mod reports;

pub use hub::{LiveHub, LiveSettings};
