//! Helpers shared by the tests of every crate.
//!
//! * [`mmdb`]: builds MaxMind DB files (GeoIP2 City, ASN) for classification tests.
//! * [`postgres`]: a fresh PostgreSQL database per test when `HTTPDNS_TEST_POSTGRES_URL` is
//!   set, and a loud notice when it is not.

pub mod mmdb;
pub mod postgres;
