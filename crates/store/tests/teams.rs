//! Named tokens and the audit log against SQLite and, when configured, PostgreSQL.

mod common;
use common::on_each_backend;
use httpdns_store::teams::AuditEntry;

#[tokio::test]
async fn tokens_are_found_by_hash_replaced_and_revoked() {
    on_each_backend("teams_tokens", |s| async move {
        assert!(!s.token_put("alice", "viewer", "aa", "admin").await.unwrap());
        assert!(!s.token_put("bob", "operator", "bb", "admin").await.unwrap());
        assert_eq!(s.token_by_hash("aa").await.unwrap().unwrap().name, "alice");
        // Replacing a token retires its old secret.
        assert!(s.token_put("alice", "admin", "cc", "bob").await.unwrap());
        assert!(s.token_by_hash("aa").await.unwrap().is_none());
        let alice = s.token_by_name("alice").await.unwrap().unwrap();
        assert_eq!((alice.role.as_str(), alice.created_by.as_str()), ("admin", "bob"));
        // One secret, one token: a second name with the same hash is refused.
        assert!(s.token_put("carol", "viewer", "cc", "admin").await.is_err());
        let names: Vec<String> = s.token_list().await.unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["alice", "bob"]);
        assert!(s.token_delete("bob").await.unwrap());
        assert!(!s.token_delete("bob").await.unwrap());
        assert!(s.token_by_hash("bb").await.unwrap().is_none());
    })
    .await;
}

#[tokio::test]
async fn audit_entries_page_both_ways() {
    on_each_backend("teams_audit", |s| async move {
        let entry = |n: i64| AuditEntry {
            actor: if n % 2 == 0 { "controller".into() } else { "alice".into() },
            method: "PUT".into(),
            path: format!("/admin/v1/nodes/n{n}"),
            revision_before: Some(n),
            revision_after: (n > 0).then_some(n + 1),
            status: 200,
            detail: String::new(),
        };
        for n in 0..5 {
            assert_eq!(s.audit_append(&entry(n)).await.unwrap(), n + 1);
        }
        let first = s.audit_after(0, 2).await.unwrap();
        assert_eq!(first.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(first[0].entry, entry(0));
        assert!(first[0].at > 0);
        let rest = s.audit_after(2, 10).await.unwrap();
        assert_eq!(rest.iter().map(|r| r.seq).collect::<Vec<_>>(), [3, 4, 5]);
        let newest = s.audit_before(i64::MAX, 2).await.unwrap();
        assert_eq!(newest.iter().map(|r| r.seq).collect::<Vec<_>>(), [5, 4]);
        assert_eq!(newest[0].entry, entry(4));
    })
    .await;
}
