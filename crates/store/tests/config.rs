//! The config tables against SQLite and, when configured, PostgreSQL.

mod common;
use common::on_each_backend;
use httpdns_store::config::{Expect, Publish, PublishError};

fn publish<'a>(module: &'a str, doc: &'a str, expect: Expect) -> Publish<'a> {
    Publish { module, document: doc, expect, author: "tester", rollback_of: None }
}

#[tokio::test]
async fn versions_only_grow_and_preconditions_hold() {
    on_each_backend("config_versions", |s| async move {
        let v1 = s.config_publish(publish("cdn", "{\"a\":1}", Expect::Nothing), |prev| {
            assert!(prev.is_none());
            "created".into()
        });
        let v1 = v1.await.unwrap();
        assert_eq!(v1.version, 1);
        // Replacing needs a precondition.
        let e = s.config_publish(publish("cdn", "{}", Expect::Nothing), |_| String::new()).await.unwrap_err();
        assert!(matches!(e, PublishError::PreconditionRequired { current: 1 }));
        let e =
            s.config_publish(publish("cdn", "{}", Expect::Version(7)), |_| String::new()).await.unwrap_err();
        assert!(matches!(e, PublishError::Precondition { current: Some(1) }));
        let v2 = s
            .config_publish(publish("cdn", "{\"a\":2}", Expect::Version(1)), |prev| {
                assert_eq!(prev, Some("{\"a\":1}"));
                "a 1 -> 2".into()
            })
            .await
            .unwrap();
        assert_eq!(v2.version, 2);
        let v3 =
            s.config_publish(publish("cdn", "{\"a\":3}", Expect::Any), |_| "forced".into()).await.unwrap();
        assert_eq!(v3.version, 3);
        // A missing module with a version precondition is a mismatch.
        let e = s
            .config_publish(publish("other", "{}", Expect::Version(3)), |_| String::new())
            .await
            .unwrap_err();
        assert!(matches!(e, PublishError::Precondition { current: None }));

        let cur = s.config_current("cdn").await.unwrap().unwrap();
        assert_eq!((cur.version, cur.document.as_str(), cur.summary.as_str()), (3, "{\"a\":3}", "forced"));
        assert_eq!(s.config_version("cdn", 1).await.unwrap().unwrap().document, "{\"a\":1}");
        assert!(s.config_version("cdn", 9).await.unwrap().is_none());
        let page = s.config_history("cdn", None, 2).await.unwrap();
        assert_eq!(page.iter().map(|v| v.version).collect::<Vec<_>>(), [3, 2]);
        let page = s.config_history("cdn", Some(2), 2).await.unwrap();
        assert_eq!(page.iter().map(|v| v.version).collect::<Vec<_>>(), [1]);
        assert_eq!(
            s.config_modules().await.unwrap().iter().map(|m| (m.0.as_str(), m.1)).collect::<Vec<_>>(),
            [("cdn", 3)]
        );
    })
    .await;
}

#[tokio::test]
async fn twenty_concurrent_publishers_one_winner() {
    on_each_backend("config_concurrent", |s| async move {
        s.config_publish(publish("cdn", "{}", Expect::Nothing), |_| String::new()).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..20 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let doc = format!("{{\"writer\":{i}}}");
                s.config_publish(publish("cdn", &doc, Expect::Version(1)), |_| String::new()).await
            }));
        }
        let (mut ok, mut refused) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(v) => {
                    assert_eq!(v.version, 2);
                    ok += 1;
                }
                Err(PublishError::Precondition { current: Some(2) }) => refused += 1,
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!((ok, refused), (1, 19));
        let versions: Vec<i64> =
            s.config_history("cdn", None, 100).await.unwrap().iter().map(|v| v.version).collect();
        assert_eq!(versions, [2, 1], "contiguous, one document per version");
    })
    .await;
}
