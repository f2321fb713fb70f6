//! The store's dump and restore against real databases (SQLite always, PostgreSQL when
//! `HTTPDNS_TEST_POSTGRES_URL` is set): every value of every table comes back exactly, a dump
//! of the restored database is the same dump, and a restore that fails or is refused leaves
//! the target as it was.

use httpdns_store::backup::DumpSummary;
use httpdns_store::config::{Expect, Publish};
use httpdns_store::live::{FeedbackRow, NodeReport};
use httpdns_store::{Kind, Store, StoreError};
use httpdns_test_support::postgres::{fresh_database, TestDatabase};

/// Three empty databases of one backend: a source and two targets.
async fn databases(test: &str) -> Vec<(Vec<Store>, Vec<TestDatabase>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut sqlite = Vec::new();
    for n in 0..3 {
        sqlite.push(
            Store::connect(&format!("sqlite://{}", dir.path().join(format!("{n}.db")).display()))
                .await
                .unwrap(),
        );
    }
    let mut out = vec![(sqlite, Vec::new(), Some(dir))];
    let mut pg = (Vec::new(), Vec::new(), None);
    for _ in 0..3 {
        let Some(db) = fresh_database(test).await else { return out };
        pg.0.push(Store::connect(&db.url).await.unwrap());
        pg.1.push(db);
    }
    out.push(pg);
    out
}

async fn fill(s: &Store) {
    s.token_put("alice", "viewer", "ab12", "admin").await.unwrap();
    s.audit_append(&httpdns_store::teams::AuditEntry {
        actor: "alice".into(),
        method: "PUT".into(),
        path: "/admin/v1/nodes/n1".into(),
        revision_before: None,
        revision_after: Some(1),
        status: 201,
        detail: "ünïcode ✓".into(),
    })
    .await
    .unwrap();
    s.put(Kind::Node, "n1", r#"{"ip":"1.1.1.1","名":"ünïcode ✓"}"#).await.unwrap();
    s.put(Kind::Domain, "www.example.com", r#"{"pool":"edge"}"#).await.unwrap();
    s.put(Kind::Node, "gone", "{}").await.unwrap();
    s.delete(Kind::Node, "gone").await.unwrap();
    for (v, doc) in [(0, r#"{"a":1}"#), (1, r#"{"a":2}"#)] {
        s.config_publish(
            Publish {
                module: "cdn",
                document: doc,
                expect: Expect::Version(v),
                author: "admin",
                rollback_of: None,
            },
            |_| "changed".into(),
        )
        .await
        .unwrap();
    }
    let report = |load, latency| NodeReport {
        load_pct: load,
        bandwidth_mbps: None,
        latency_ms: latency,
        reported_at: 1_700_000_000_123,
    };
    s.put_reports(&[
        ("n1".into(), report(Some(0.1), Some(1_234.567_890_123_456_7))),
        ("n2".into(), report(None, Some(1e-300))),
    ])
    .await
    .unwrap();
    s.save_feedback(&[FeedbackRow {
        node: "n1".into(),
        isp: "telecom".into(),
        region: "beijing".into(),
        latency_ms: 12.25,
        success_rate: 0.999_999_999_999,
        clients: 3,
    }])
    .await
    .unwrap();
}

async fn dump(s: &Store) -> (String, DumpSummary) {
    let mut out = Vec::new();
    let summary = s.dump(&mut out).await.unwrap();
    (String::from_utf8(out).unwrap(), summary)
}

/// The rows of a dump, without the header (whose `backend` names where it was taken).
fn rows(dump: &str) -> Vec<&str> {
    dump.lines().skip(1).collect()
}

#[tokio::test]
async fn dump_restores_exactly_and_refusals_write_nothing() {
    for (stores, _dbs, _dir) in databases("dump_restores_exactly_and_refusals_write_nothing").await {
        let (source, target, other) = (&stores[0], &stores[1], &stores[2]);
        fill(source).await;
        let (text, summary) = dump(source).await;
        assert_eq!(summary.revision, 6);
        assert_eq!(summary.rows["resources"], 3, "the tombstone included");
        assert_eq!(summary.rows["config_versions"], 2);
        assert_eq!(summary.rows["node_reports"], 2);

        let restored = target.restore_dump(&mut text.as_bytes(), false).await.unwrap();
        assert_eq!(restored.rows, summary.rows);
        assert_eq!(restored.revision, 6);
        let (again, _) = dump(target).await;
        assert_eq!(rows(&again), rows(&text), "a dump of the restored database is the same dump");
        assert_eq!(target.revision().await.unwrap(), 6);
        let n1 = target.get(Kind::Node, "n1").await.unwrap().unwrap();
        assert_eq!(n1.body, r#"{"ip":"1.1.1.1","名":"ünïcode ✓"}"#);
        let (_, changes) = target.changes_since(0).await.unwrap();
        assert!(changes.iter().any(|c| c.name == "gone" && c.body.is_none()), "deletions survive");

        // A target that is not empty is refused, and keeps what it had.
        target.put(Kind::Node, "extra", "{}").await.unwrap();
        let e = target.restore_dump(&mut text.as_bytes(), false).await.unwrap_err();
        assert!(matches!(e, StoreError::NotEmpty(_)), "{e}");
        assert!(target.get(Kind::Node, "extra").await.unwrap().is_some());
        // Forced, it is replaced.
        target.restore_dump(&mut text.as_bytes(), true).await.unwrap();
        assert!(target.get(Kind::Node, "extra").await.unwrap().is_none());
        assert_eq!(rows(&dump(target).await.0), rows(&text));

        // A dump that breaks near its end (a value of the wrong type) restores nothing.
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let last = lines.len() - 1;
        lines[last] = lines[last].replacen(r#""row":["#, r#""row":[[1],"#, 1);
        let broken = lines.join("\n");
        assert!(other.restore_dump(&mut broken.as_bytes(), false).await.is_err());
        assert!(other.non_empty_tables().await.unwrap().is_empty(), "nothing of the failed restore stays");
        assert_eq!(other.revision().await.unwrap(), 0);

        // A dump of a newer schema (a migration this build lacks) is refused.
        let newer = text.replacen(r#""migrations":[1,2,3"#, r#""migrations":[1,2,3,9999"#, 1);
        assert_ne!(newer, text);
        let e = other.restore_dump(&mut newer.as_bytes(), false).await.unwrap_err();
        assert!(e.to_string().contains("9999"), "{e}");
        assert!(other.non_empty_tables().await.unwrap().is_empty());
    }
}
