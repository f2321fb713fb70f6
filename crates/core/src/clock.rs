//! The wall clock, for the crates above this one.
//!
//! The pure modules of this crate never call it: they take the time as an argument, so they
//! can be tested at any instant. It lives here because every crate that reads the clock
//! depends on this one, and one reading (saturating at 0 before 1970) beats a copy per crate.
//! `clippy.toml` bans `SystemTime::now` everywhere else.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current wall-clock time: the one reading of it in the workspace.
#[allow(clippy::disallowed_methods, reason = "this is the one reading of the wall clock")]
pub fn now() -> SystemTime {
    SystemTime::now()
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Seconds since the Unix epoch.
pub fn unix_s() -> u64 {
    now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
