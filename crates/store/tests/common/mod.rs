//! What the store's test files share: each case runs on SQLite, then on a fresh PostgreSQL
//! database when `HTTPDNS_TEST_POSTGRES_URL` is set (else the PostgreSQL part prints SKIPPED).

use httpdns_store::Store;
use httpdns_test_support::postgres::fresh_database;

pub(crate) async fn on_each_backend<F, Fut>(test: &str, case: F)
where
    F: Fn(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::connect(&format!("sqlite://{}", dir.path().join("t.db").display())).await.unwrap();
    case(sqlite).await;
    if let Some(db) = fresh_database(test).await {
        let pg = Store::connect(&db.url).await.unwrap();
        case(pg.clone()).await;
        pg.close().await;
    }
}
