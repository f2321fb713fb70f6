//! DNS answers from the answering snapshot.
//!
//! * [`answer`]: one query in wire format answered (managed names authoritatively, with EDNS
//!   Client Subnet), shared by plain DNS and DNS over HTTPS; the common A/AAAA question is
//!   answered on the wire without a parsed message (`fast`).
//! * `alias`: the CNAME answer of a managed name that is an alias (`cname`).
//! * [`listen`]: the UDP and TCP listeners (UDP read and written in batches, `batch`).
//! * [`metrics`]: counts and latency of every DNS front-end.
//! * Per-domain query counts live in `httpdns_answer::tally` (every front-end counts there),
//!   names not managed here are resolved by `httpdns_upstream`.

mod alias;
pub mod answer;
mod batch;
mod fast;
pub mod listen;
pub mod metrics;

pub use answer::{
    answer, build_query, build_query_with, Answer, Context, Forward, QueryFlags, Reply, Transport,
};
pub use metrics::{DnsMetrics, Frontend};
