//! Migration 0030 against real databases (SQLite always, PostgreSQL when
//! `HTTPDNS_TEST_POSTGRES_URL` is set): the raw reports beside the weighted counts, read as the
//! count in rows an earlier release wrote, and the vendor switches' rows.

mod common;
use common::on_each_backend;
use httpdns_store::events::{EventCounts, EventKey, EventRow};

#[tokio::test]
async fn reports_are_summed_beside_the_weighted_counts() {
    on_each_backend("reports_beside_counts", |s| async move {
        let key = |cohort: &str| EventKey {
            event: "request".into(),
            isp: "unicom".into(),
            region: "shanghai".into(),
            reason: "5xx".into(),
            host: String::new(),
            group: "on".into(),
            cohort: cohort.into(),
        };
        let row = |cohort: &str, count: f64| EventRow {
            minute: 100,
            key: key(cohort),
            counts: EventCounts { count, duration_ms_sum: 0.0, duration_count: 0.0 },
        };
        // Two events weighing 100 each, in two cohorts (one event_minutes row), and a replica
        // of the earlier release (no reports written: its count stands for them).
        s.save_reported_event_minutes("new", &[row("on", 100.0), row("off", 100.0)], &[1.0, 1.0])
            .await
            .unwrap();
        s.save_event_minutes("old", &[row("on", 3.0)]).await.unwrap();
        let (rows, replicas) = s.reported_event_totals(100, 100, None).await.unwrap();
        assert_eq!(replicas, 2);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!((rows[0].1.count, rows[0].2), (203.0, 5.0));
        // A rewrite of the minute replaces the reports too.
        s.save_reported_event_minutes("new", &[row("on", 300.0)], &[3.0]).await.unwrap();
        let (rows, _) = s.reported_event_totals(100, 100, Some("request")).await.unwrap();
        assert_eq!((rows[0].1.count, rows[0].2), (303.0, 6.0));
        // The weighted totals are what they were.
        let (plain, _) = s.event_totals(100, 100, None).await.unwrap();
        assert_eq!(plain[0].1.count, 303.0);
    })
    .await;
}

#[tokio::test]
async fn vendor_switches_are_replaced_whole() {
    on_each_backend("vendor_switches_rows", |s| async move {
        assert!(s.vendor_switches().await.unwrap().is_empty());
        let rows = vec![
            ("42".to_owned(), r#"{"tencent_log":true}"#.to_owned()),
            ("global".to_owned(), "{}".to_owned()),
        ];
        s.put_vendor_switches(&rows).await.unwrap();
        assert_eq!(s.vendor_switches().await.unwrap(), rows);
        let fewer = vec![("global".to_owned(), r#"{"alibaba_service_status":"disable"}"#.to_owned())];
        s.put_vendor_switches(&fewer).await.unwrap();
        assert_eq!(s.vendor_switches().await.unwrap(), fewer, "account 42's row is gone");
    })
    .await;
}
