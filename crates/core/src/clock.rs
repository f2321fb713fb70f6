//! The wall clock, for the crates above this one.
//!
//! The pure modules of this crate never call it: they take the time as an argument, so they
//! can be tested at any instant. It lives here because every crate that reads the clock
//! depends on this one, and one reading (saturating at 0 before 1970) beats a copy per crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Seconds since the Unix epoch.
pub fn unix_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
