//! Live score inputs.
//!
//! # Layout
//!
//! * [`health`]: per-node health state shared with the answer path (atomics, no locks there).
//! * [`published`]: [`Published`], a snapshot with its nodes' health, as the answer path reads it.
//! * [`probe`]: one TCP, HTTP or HTTPS probe.
//! * [`checker`]: the scheduler and the bounded pool of probe workers.
//! * [`feedback`]: robust aggregation of app feedback per (node, client ISP, client region).

pub mod checker;
pub mod feedback;
pub mod health;
pub mod probe;
pub mod published;

pub use published::Published;
