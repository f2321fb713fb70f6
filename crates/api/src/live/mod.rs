//! Live score inputs on the API side: node agents' metric reports, app feedback, and turning
//! them (with the probes' latencies) into the catalog's live inputs.
//!
//! The feedback aggregator and the periodic refresh are `httpdns_catalog::LiveHub`'s.
//! * [`reports`]: `POST /admin/v1/nodes/{id}/metrics` and `POST /admin/v1/metrics`.
//! * [`feedback`]: `POST /feedback`, rate limited per client.
//! * [`explain`]: `GET /admin/v1/explain`.

pub mod explain;
pub mod feedback;
pub mod reports;

pub use httpdns_catalog::{LiveHub, LiveSettings};
