//! The store against real databases: SQLite always, PostgreSQL when
//! `HTTPDNS_TEST_POSTGRES_URL` is set. Each case runs on both.

mod common;
use common::on_each_backend;
use httpdns_store::{Kind, Store};

#[tokio::test]
async fn put_get_delete_and_revisions() {
    on_each_backend("put_get_delete_and_revisions", |s| async move {
        assert_eq!(s.revision().await.unwrap(), 0);
        let w = s.put(Kind::Node, "n1", r#"{"a":1}"#).await.unwrap();
        assert!(w.created);
        assert_eq!(w.revision, 1);
        let w = s.put(Kind::Node, "n1", r#"{"a":2}"#).await.unwrap();
        assert!(!w.created);
        assert_eq!(w.revision, 2);
        // Same name, other kind: a separate resource.
        assert!(s.put(Kind::Domain, "n1", "{}").await.unwrap().created);
        let r = s.get(Kind::Node, "n1").await.unwrap().unwrap();
        assert_eq!(r.body, r#"{"a":2}"#);
        assert_eq!(r.revision, 2);

        assert_eq!(s.delete(Kind::Node, "n1").await.unwrap(), Some(4));
        assert_eq!(s.get(Kind::Node, "n1").await.unwrap(), None);
        // Deleting what is not there writes nothing.
        assert_eq!(s.delete(Kind::Node, "n1").await.unwrap(), None);
        assert_eq!(s.revision().await.unwrap(), 4);
        // Re-creating after a delete counts as created.
        assert!(s.put(Kind::Node, "n1", "{}").await.unwrap().created);
    })
    .await;
}

#[tokio::test]
async fn changes_since_sees_every_change_once_including_deletes() {
    on_each_backend("changes_since", |s| async move {
        s.put(Kind::Node, "a", "1").await.unwrap();
        s.put(Kind::Node, "b", "2").await.unwrap();
        let (rev, all) = s.changes_since(0).await.unwrap();
        assert_eq!(rev, 2);
        assert_eq!(all.len(), 2);
        s.delete(Kind::Node, "a").await.unwrap();
        s.put(Kind::Pool, "edge", "{}").await.unwrap();
        let (rev2, later) = s.changes_since(rev).await.unwrap();
        assert_eq!(rev2, 4);
        let summary: Vec<_> = later.iter().map(|c| (c.kind, c.name.as_str(), c.body.is_some())).collect();
        assert_eq!(summary, [(Kind::Node, "a", false), (Kind::Pool, "edge", true)]);
        assert!(s.changes_since(rev2).await.unwrap().1.is_empty());
    })
    .await;
}

#[tokio::test]
async fn list_pages_by_name() {
    on_each_backend("list_pages_by_name", |s| async move {
        for n in ["c", "a", "b", "d"] {
            s.put(Kind::Network, n, "{}").await.unwrap();
        }
        s.delete(Kind::Network, "b").await.unwrap();
        let page = s.list(Kind::Network, None, 2).await.unwrap();
        assert_eq!(page.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a", "c"]);
        let page = s.list(Kind::Network, Some("c"), 2).await.unwrap();
        assert_eq!(page.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["d"]);
    })
    .await;
}

#[tokio::test]
async fn concurrent_writers_get_distinct_contiguous_revisions() {
    on_each_backend("concurrent_writers", |s| async move {
        let mut tasks = Vec::new();
        for i in 0..20 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                s.put(Kind::Node, &format!("n{i}"), "{}").await.unwrap().revision
            }));
        }
        let mut revs = Vec::new();
        for t in tasks {
            revs.push(t.await.unwrap());
        }
        revs.sort();
        assert_eq!(revs, (1..=20).collect::<Vec<i64>>());
    })
    .await;
}

#[tokio::test]
async fn data_survives_reopening_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("data/httpdns.db").display());
    let s = Store::connect(&url).await.unwrap();
    s.put(Kind::Domain, "www.example.com", r#"{"pool":"edge"}"#).await.unwrap();
    s.close().await;
    let s = Store::connect(&url).await.unwrap();
    assert_eq!(s.get(Kind::Domain, "www.example.com").await.unwrap().unwrap().body, r#"{"pool":"edge"}"#);
    assert_eq!(s.revision().await.unwrap(), 1);
}

#[tokio::test]
async fn rejects_unknown_url_schemes() {
    assert!(Store::connect("mysql://x").await.is_err());
}

#[tokio::test]
async fn reports_and_feedback_round_trip() {
    use httpdns_store::live::{FeedbackRow, NodeReport};
    on_each_backend("reports_and_feedback", |s| async move {
        let r = |load: f64, at: i64| NodeReport {
            load_pct: Some(load),
            bandwidth_mbps: None,
            latency_ms: Some(3.5),
            reported_at: at,
        };
        s.put_reports(&[("n1".into(), r(10.0, 1000)), ("n2".into(), r(20.0, 2000))]).await.unwrap();
        s.put_reports(&[("n1".into(), r(30.0, 3000))]).await.unwrap();
        let mut got = s.reports_since(1500).await.unwrap();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, [("n1".to_string(), r(30.0, 3000)), ("n2".to_string(), r(20.0, 2000))]);
        assert_eq!(got[0].1.bandwidth_mbps, None);

        let row = |lat: f64| FeedbackRow {
            node: "n1".into(),
            isp: "unicom".into(),
            region: "shanghai".into(),
            latency_ms: lat,
            success_rate: 0.75,
            clients: 4,
        };
        s.save_feedback(&[row(12.5)]).await.unwrap();
        s.save_feedback(&[row(8.25)]).await.unwrap();
        assert_eq!(s.load_feedback(0).await.unwrap(), [row(8.25)]);
    })
    .await;
}

#[tokio::test]
async fn event_minutes_replace_per_replica_and_sum_across() {
    use httpdns_store::events::{EventCounts, EventKey, EventRow};
    on_each_backend("event_minutes", |s| async move {
        let key = |event: &str, reason: &str| EventKey {
            event: event.into(),
            isp: "unicom".into(),
            region: "shanghai".into(),
            reason: reason.into(),
            host: String::new(),
            group: "on".into(),
            // Read back without it: the cohort is policy_minutes' key, not event_minutes'.
            cohort: String::new(),
        };
        let row = |minute: i64, key: EventKey, count: f64| EventRow {
            minute,
            key,
            counts: EventCounts { count, duration_ms_sum: count * 10.0, duration_count: count },
        };
        let fb = key("dns_fallback", "HTTPDNS_TIMEOUT");
        s.save_event_minutes("a", &[row(100, fb.clone(), 1.0), row(101, key("request", "ok"), 50.0)])
            .await
            .unwrap();
        // A later flush of the same minute replaces the replica's value (a retry never doubles).
        s.save_event_minutes("a", &[row(100, fb.clone(), 3.0)]).await.unwrap();
        s.save_event_minutes("a", &[row(100, fb.clone(), 3.0)]).await.unwrap();
        s.save_event_minutes("b", &[row(101, fb.clone(), 2.0), row(90, fb.clone(), 7.0)]).await.unwrap();

        let (all, replicas) = s.event_totals(100, 101, None).await.unwrap();
        assert_eq!(replicas, 2);
        assert_eq!(
            all,
            vec![
                (fb.clone(), EventCounts { count: 5.0, duration_ms_sum: 50.0, duration_count: 5.0 }),
                (
                    key("request", "ok"),
                    EventCounts { count: 50.0, duration_ms_sum: 500.0, duration_count: 50.0 }
                ),
            ]
        );
        let (only, _) = s.event_totals(0, 200, Some("dns_fallback")).await.unwrap();
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].1.count, 12.0, "minute 90 is inside 0..=200");

        assert_eq!(s.prune_event_minutes(100).await.unwrap(), 1, "only minute 90 is past the retention");
        let (left, _) = s.event_totals(0, 200, Some("dns_fallback")).await.unwrap();
        assert_eq!(left[0].1.count, 5.0);
    })
    .await;
}

#[tokio::test]
async fn policy_minutes_split_events_by_cohort_and_event_minutes_do_not() {
    use httpdns_store::events::{EventCounts, EventKey, EventRow, PolicyCounts};
    on_each_backend("policy_minutes", |s| async move {
        let key = |event: &str, reason: &str, cohort: &str| EventKey {
            event: event.into(),
            isp: "unicom".into(),
            region: "shanghai".into(),
            reason: reason.into(),
            host: String::new(),
            group: "on".into(),
            cohort: cohort.into(),
        };
        let row = |key: EventKey, count: f64| EventRow {
            minute: 100,
            key,
            counts: EventCounts { count, duration_ms_sum: count * 10.0, duration_count: count },
        };
        let rows = [
            row(key("request", "ok", "on"), 90.0),
            row(key("request", "timeout", "on"), 10.0),
            row(key("request", "4xx", "off"), 5.0),
            row(key("dns_fallback", "HTTPDNS_TIMEOUT", "on"), 4.0),
            row(key("request", "ok", "off"), 20.0),
        ];
        s.save_event_minutes("a", &rows).await.unwrap();
        // The same key of two cohorts is one event_minutes row, summed.
        let (all, _) = s.event_totals(100, 100, Some("request")).await.unwrap();
        let ok: f64 = all.iter().filter(|(k, _)| k.reason == "ok").map(|(_, c)| c.count).sum();
        assert_eq!((all.iter().filter(|(k, _)| k.reason == "ok").count(), ok), (1, 110.0));
        let split = s.policy_minutes(100, 100).await.unwrap();
        let of = |cohort: &str| split.iter().find(|r| r.cohort == cohort).unwrap().counts;
        assert_eq!(
            of("on"),
            PolicyCounts {
                requests: 100.0,
                reports: 100.0,
                errors: 10.0,
                fallbacks: 4.0,
                latency_ms_sum: 1000.0,
                latency_count: 100.0
            }
        );
        assert_eq!((of("off").requests, of("off").errors), (25.0, 0.0), "a 4xx is not a delivery error");
        // A rewrite of the minute replaces, a second replica adds.
        s.save_event_minutes("a", &rows).await.unwrap();
        s.save_event_minutes("b", &rows[..1]).await.unwrap();
        let split = s.policy_minutes(100, 100).await.unwrap();
        assert_eq!(split.iter().find(|r| r.cohort == "on").unwrap().counts.requests, 190.0);
        // Raw reports, when the flush has them, are what the weighted requests rest on: 90 ok
        // events from 3 reports and 10 timeouts from 1 (sampled events), and the dns_fallback's
        // reports are no request's.
        s.save_reported_event_minutes("a", &rows, &[3.0, 1.0, 5.0, 2.0, 20.0]).await.unwrap();
        let split = s.policy_minutes(100, 100).await.unwrap();
        let of = |cohort: &str| split.iter().find(|r| r.cohort == cohort).unwrap().counts;
        assert_eq!((of("on").requests, of("on").reports), (190.0, 94.0), "replica b's 90 unsampled + a's 4");
        assert_eq!((of("off").requests, of("off").reports), (25.0, 25.0));
        s.prune_event_minutes(101).await.unwrap();
        assert!(s.policy_minutes(0, 200).await.unwrap().is_empty(), "pruned with the events");
    })
    .await;
}

#[tokio::test]
async fn policy_places_steps_and_one_lease_holder() {
    use httpdns_store::policy::{PlaceRow, StepRow};
    on_each_backend("policy_places", |s| async move {
        let place = |state: &str, share: f64| PlaceRow {
            isp: "unicom".into(),
            region: "shanghai".into(),
            state: state.into(),
            step: 0,
            share,
            since: 1,
            threshold: 0.02,
            rates: "{}".into(),
            updated_at: 2,
        };
        let step = StepRow {
            at: 5,
            isp: "unicom".into(),
            region: "shanghai".into(),
            from_state: "healthy".into(),
            to_state: "degraded".into(),
            from_share: 1.0,
            to_share: 0.01,
            reason: "fallback rate 0.4 > 0.02".into(),
            versions: String::new(),
        };
        s.policy_save(&[place("healthy", 1.0)], &[]).await.unwrap();
        s.policy_save(&[place("degraded", 0.01)], std::slice::from_ref(&step)).await.unwrap();
        s.policy_step_versions(5, "unicom", "shanghai", "cdn:7").await.unwrap();
        assert_eq!(s.policy_places().await.unwrap(), vec![place("degraded", 0.01)]);
        let steps = s.policy_steps(Some(("unicom", "shanghai")), 10).await.unwrap();
        assert_eq!(steps, vec![StepRow { versions: "cdn:7".into(), ..step }]);
        assert!(s.policy_steps(Some(("telecom", "beijing")), 10).await.unwrap().is_empty());

        assert!(s.lease("policy", "a", 1_000, 100).await.unwrap());
        assert!(!s.lease("policy", "b", 1_050, 100).await.unwrap(), "held by a until 1100");
        assert!(s.lease("policy", "a", 1_090, 100).await.unwrap(), "renewed");
        assert!(!s.lease("policy", "b", 1_150, 100).await.unwrap(), "renewed to 1190");
        assert!(s.lease("policy", "b", 1_200, 100).await.unwrap(), "expired: taken over");
        assert!(!s.lease("policy", "a", 1_210, 100).await.unwrap());
    })
    .await;
}
