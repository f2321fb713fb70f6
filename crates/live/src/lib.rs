//! Live score inputs.
//!
//! # Layout
//!
//! * [`health`]: per-node health state shared with the answer path (atomics, no locks there).
//! * [`probe`]: one TCP, HTTP or HTTPS probe.
//! * [`checker`]: the scheduler and the bounded pool of probe workers.
//! * [`feedback`]: robust aggregation of app feedback per (node, client ISP, client region).

pub mod checker;
pub mod feedback;
pub mod health;
pub mod probe;
