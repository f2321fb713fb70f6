//! A fresh PostgreSQL database per test.
//!
//! The PostgreSQL suite runs only when `HTTPDNS_TEST_POSTGRES_URL` names a server where the
//! user may create databases (CI always sets it). Each test gets its own database, dropped
//! when the guard is dropped, so tests run in parallel without seeing each other's rows.

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::{Connection, Executor, PgConnection};

pub const ENV: &str = "HTTPDNS_TEST_POSTGRES_URL";

/// A database that lives as long as this guard.
#[derive(Debug)]
pub struct TestDatabase {
    pub url: String,
    admin_url: String,
    name: String,
}

/// Creates a fresh database, or returns `None` (after printing a notice that the PostgreSQL
/// part of `test_name` was skipped) when `HTTPDNS_TEST_POSTGRES_URL` is not set.
pub async fn fresh_database(test_name: &str) -> Option<TestDatabase> {
    let Ok(admin_url) = std::env::var(ENV) else {
        crate::skipped(
            &format!("PostgreSQL part of `{test_name}`"),
            &format!("{ENV} is not set. Set it (e.g. postgres://postgres@127.0.0.1:5432/test) to run it."),
        );
        return None;
    };
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    // Part of a unique database name, not a time: this crate sits below httpdns_core::clock.
    #[allow(clippy::disallowed_methods, reason = "a name's uniqueness, not a reading of the time")]
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let name =
        format!("httpdns_test_{}_{}_{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed), nanos);
    let mut conn = PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|e| panic!("{ENV}={admin_url} is set but does not connect: {e}"));
    conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).await.expect("create test database");
    conn.close().await.ok();
    let url = replace_database(&admin_url, &name);
    Some(TestDatabase { url, admin_url, name })
}

fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        // Drop runs inside a test's runtime, where blocking on another future is not allowed;
        // a short-lived thread with its own runtime does the cleanup.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&admin_url).await.ok()?;
                conn.execute(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                    .await
                    .ok()?;
                Some(())
            })
        })
        .join();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_the_database_name() {
        assert_eq!(
            super::replace_database("postgres://u@127.0.0.1:5432/test", "x"),
            "postgres://u@127.0.0.1:5432/x"
        );
        assert_eq!(
            super::replace_database("postgres://u@h/test?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
        assert_eq!(super::replace_database("postgres://u@h", "x"), "postgres://u@h/x");
    }
}
