//! The write-behind buffer's rules, on a real store: bounded keys, each change written once,
//! a failed write kept for the next flush, old periods forgotten.

mod common;

use httpdns_store::behind::{Kept, WriteBehind};
use httpdns_store::rollouts::VersionMinute;
use httpdns_store::{Store, StoreError};

/// Per-version minutes, as the rollouts count them, with room for three keys.
struct Minutes;

type Key = (i64, i64);

fn minute() -> i64 {
    httpdns_core::clock::unix_s() as i64 / 60
}

impl Kept for Minutes {
    type Key = Key;
    type Value = f64;
    type Row = VersionMinute;
    const MAX_KEYS: usize = 3;
    const PRUNE_EVERY: i64 = 60;

    fn now() -> i64 {
        minute()
    }

    fn period(key: &Key) -> i64 {
        key.0
    }

    fn row(&(minute, version): &Key, requests: &f64) -> VersionMinute {
        VersionMinute {
            minute,
            version,
            isp: "unicom".into(),
            region: "shanghai".into(),
            requests: *requests,
            errors: 0.0,
            fallbacks: 0.0,
        }
    }

    async fn save(store: &Store, replica: &str, rows: &[VersionMinute]) -> Result<(), StoreError> {
        store.save_version_minutes(replica, rows).await
    }

    async fn prune(store: &Store, now: i64) -> Result<u64, StoreError> {
        store.prune_version_minutes(now - 7 * 24 * 60).await
    }
}

/// The requests stored for versions 1 and 2 since `from`, every replica summed.
async fn stored(store: &Store, from: i64) -> Vec<(i64, f64)> {
    store.version_minutes(1, 2, from).await.unwrap().into_iter().map(|r| (r.version, r.requests)).collect()
}

fn add(b: &WriteBehind<Minutes>, items: &[(i64, i64, f64)]) -> usize {
    b.update(items.iter().copied(), |&(m, v, _)| (m, v), |sum, (_, _, n)| *sum += n)
}

#[tokio::test]
async fn keys_are_bounded_and_each_change_is_written_once() {
    common::on_each_backend("behind_bounded", |store| async move {
        let b = WriteBehind::<Minutes>::new("r1".into());
        let now = minute();
        // Three keys fit; a fourth is dropped, while a held key still counts.
        assert_eq!(add(&b, &[(now, 1, 1.0), (now, 2, 2.0), (now - 1, 1, 4.0)]), 0);
        assert_eq!(add(&b, &[(now, 3, 8.0), (now, 1, 16.0)]), 1, "the fourth key is not counted");
        assert_eq!(b.flush(&store).await.unwrap(), 3);
        assert_eq!(stored(&store, now - 1).await, [(1, 21.0), (2, 2.0)]);
        // Nothing changed: nothing written. A change rewrites its row (the total, not a delta).
        assert_eq!(b.flush(&store).await.unwrap(), 0);
        add(&b, &[(now, 2, 1.0)]);
        assert_eq!(b.flush(&store).await.unwrap(), 1);
        assert_eq!(stored(&store, now - 1).await, [(1, 21.0), (2, 3.0)]);
    })
    .await;
}

#[tokio::test]
async fn a_failed_write_is_kept_for_the_next_flush_and_old_periods_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let first = Store::connect(&url).await.unwrap();
    let b = WriteBehind::<Minutes>::new("r1".into());
    let now = minute();
    add(&b, &[(now - 5, 1, 3.0), (now, 2, 5.0)]);
    first.close().await;
    assert!(b.flush(&first).await.is_err(), "a closed store refuses the write");
    assert_eq!(b.len(), 2, "what could not be written stays, even a past minute");

    let second = Store::connect(&url).await.unwrap();
    assert_eq!(b.flush(&second).await.unwrap(), 2, "both rows written on the next flush");
    assert_eq!(stored(&second, now - 10).await, [(1, 3.0), (2, 5.0)]);
    // Written, the past minute leaves memory; the current one stays for more events.
    assert_eq!(b.len(), 1);
    add(&b, &[(now, 2, 1.0)]);
    b.flush(&second).await.unwrap();
    assert_eq!(stored(&second, now - 10).await, [(1, 3.0), (2, 6.0)]);
}

#[tokio::test]
async fn the_loop_flushes_on_its_ticks_and_once_more_at_the_stop() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let (ticks, at_stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (t, s, stopped) = (ticks.clone(), at_stop.clone(), shutdown.clone());
    let run = tokio::spawn(httpdns_store::behind::flush_every(
        std::time::Duration::from_millis(20),
        shutdown.clone(),
        "test rows",
        move || {
            let counter = if stopped.is_cancelled() { &s } else { &t };
            counter.fetch_add(1, Ordering::SeqCst);
            // A failing flush does not end the loop.
            async { Err::<usize, _>(StoreError::Backup("refused".into())) }
        },
    ));
    while ticks.load(Ordering::SeqCst) < 3 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    run.await.unwrap();
    assert_eq!(at_stop.load(Ordering::SeqCst), 1, "one last flush at the stop, and no tick's after it");
}
