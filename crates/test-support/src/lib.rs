//! Helpers shared by the tests of every crate.
//!
//! * [`http`]: reqwest clients with the TLS crypto provider in place.
//! * [`mmdb`]: builds MaxMind DB files (GeoIP2 City, ASN) for classification tests.
//! * [`postgres`]: a fresh PostgreSQL database per test when `HTTPDNS_TEST_POSTGRES_URL` is
//!   set, and a loud notice when it is not.

pub mod http;
pub mod mmdb;
pub mod postgres;

/// Says loudly, on the real stderr (the harness hides `eprintln!` of passing tests), that a
/// part of the suite did not run and why. Under CI (`CI=true`) a skipped suite is a hole, not
/// a pass: it fails the test instead.
pub fn skipped(suite: &str, why: &str) {
    use std::io::Write;
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("CI=true and a suite would be skipped: {suite}: {why}");
    }
    let _ = writeln!(std::io::stderr(), "*** SKIPPED: {suite}: {why} ***");
}
