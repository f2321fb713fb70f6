//! Rows a replica counts in memory and writes behind to the store: no write per event, one
//! map update under a lock per batch, each period's changed rows rewritten (as this replica's
//! own rows) on every flush. The rollouts' version sides and the config center's adoption
//! sketches are kept this way; what differs between them is a [`Kept`].
//!
//! The rules every such buffer needs, here once: memory is bounded (keys past
//! [`Kept::MAX_KEYS`] are not counted, and only the current and the last period stay after a
//! flush); a failed write loses nothing (its rows are written again next time); flushes are
//! serialised (a loop and an admin read may both flush); the store is pruned past the
//! retention at most once every [`Kept::PRUNE_EVERY`] periods, and a failed prune is retried
//! without failing the flush that saved rows.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::{Store, StoreError};

/// What one write-behind buffer holds and how its rows reach the store.
pub trait Kept {
    /// What a row is counted under; its first part is the period ([`Kept::period`]).
    type Key: Eq + Hash + Clone + Send;
    /// What a key counts.
    type Value: Default + Send;
    /// What the store saves.
    type Row: Send + Sync;

    /// Keys held at most.
    const MAX_KEYS: usize;
    /// How often, in periods, the store is pruned.
    const PRUNE_EVERY: i64;

    /// The current period (minute, bucket), by [`httpdns_core::clock`].
    fn now() -> i64;
    fn period(key: &Self::Key) -> i64;
    fn row(key: &Self::Key, value: &Self::Value) -> Self::Row;
    fn save(
        store: &Store,
        replica: &str,
        rows: &[Self::Row],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes every replica's rows past the retention, as of period `now`.
    fn prune(store: &Store, now: i64) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

struct Held<V> {
    value: V,
    dirty: bool,
}

/// See the module documentation.
pub struct WriteBehind<K: Kept> {
    replica: String,
    // A blocking mutex: one short update per batch, never held across an await.
    held: Mutex<HashMap<K::Key, Held<K::Value>>>,
    // Serialises flushes; holds the period of the last prune.
    flushing: tokio::sync::Mutex<i64>,
}

impl<K: Kept> std::fmt::Debug for WriteBehind<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBehind")
            .field("replica", &self.replica)
            .field("keys", &self.held.lock().len())
            .finish()
    }
}

impl<K: Kept> WriteBehind<K> {
    /// A buffer whose rows are saved as `replica`'s.
    pub fn new(replica: String) -> Self {
        Self { replica, held: Mutex::new(HashMap::new()), flushing: tokio::sync::Mutex::new(0) }
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Applies each item to its key's value under one lock. Items of keys not held once
    /// [`Kept::MAX_KEYS`] are are not counted; returns how many were dropped so.
    pub fn update<T>(
        &self,
        items: impl IntoIterator<Item = T>,
        key: impl Fn(&T) -> K::Key,
        mut apply: impl FnMut(&mut K::Value, T),
    ) -> usize {
        let mut held = self.held.lock();
        let mut dropped = 0;
        for item in items {
            let k = key(&item);
            if !held.contains_key(&k) && held.len() >= K::MAX_KEYS {
                dropped += 1;
                continue;
            }
            let h = held.entry(k).or_insert_with(|| Held { value: K::Value::default(), dirty: false });
            apply(&mut h.value, item);
            h.dirty = true;
        }
        dropped
    }

    /// Writes the changed rows; keeps in memory only the current and the last period (and what
    /// could not be written). Returns the rows written.
    pub async fn flush(&self, store: &Store) -> Result<usize, StoreError> {
        let mut last_prune = self.flushing.lock().await;
        let (keys, rows): (Vec<K::Key>, Vec<K::Row>) = {
            let mut held = self.held.lock();
            held.iter_mut()
                .filter(|(_, h)| h.dirty)
                .map(|(k, h)| {
                    h.dirty = false;
                    (k.clone(), K::row(k, &h.value))
                })
                .unzip()
        };
        if !rows.is_empty() {
            if let Err(e) = K::save(store, &self.replica, &rows).await {
                let mut held = self.held.lock();
                for k in &keys {
                    if let Some(h) = held.get_mut(k) {
                        h.dirty = true;
                    }
                }
                return Err(e);
            }
        }
        let now = K::now();
        self.held.lock().retain(|k, h| K::period(k) >= now - 1 || h.dirty);
        if now - *last_prune >= K::PRUNE_EVERY {
            match K::prune(store, now).await {
                Ok(_) => *last_prune = now,
                Err(e) => tracing::warn!(error = %e, "Could not prune rows past the retention; will retry."),
            }
        }
        Ok(rows.len())
    }

    /// Keys held in memory now.
    pub fn len(&self) -> usize {
        self.held.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Calls `flush` every `every` until `shutdown`, then once more within 5 s, so a clean stop
/// loses nothing. A failed flush is logged (`what` names the rows) and kept for the next.
pub async fn flush_every<F, Fut>(
    every: Duration,
    shutdown: CancellationToken,
    what: &'static str,
    mut flush: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize, StoreError>>,
{
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // The stop first: no tick's flush starts once it is asked.
            biased;
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        if let Err(e) = flush().await {
            tracing::warn!(error = %e, what, "Could not write rows to the store; kept in memory for the next flush.");
        }
    }
    match tokio::time::timeout(Duration::from_secs(5), flush()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, what, "The last flush before the stop failed."),
        Err(_) => tracing::warn!(what, "The last flush before the stop timed out."),
    }
}
