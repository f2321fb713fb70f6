//! Adoption: how many distinct devices run each config version (what
//! `GET /admin/v1/config/{module}/adoption?window=1h` reports).
//!
//! Every per-device POST names the version the device runs (`configVersion`) and its id. This
//! replica adds the id to a HyperLogLog sketch (`httpdns_config::sketch`, 4 KiB, 1.6% standard
//! error) of the current 5-minute bucket, module and version; a loop writes the changed sketches
//! to the store every [`FLUSH_EVERY`]; a read flushes this replica first, then merges every
//! replica's and bucket's sketches of the window, so a device counted by two replicas or in
//! two buckets counts once. Memory is bounded: at most [`MAX_SKETCHES`] sketches are held, and
//! only versions that exist (at most the served one) are counted.

use std::collections::BTreeMap;
use std::time::Duration;

use httpdns_config::sketch::Sketch;
use httpdns_store::adoption::SketchRow;
use httpdns_store::behind::{Kept, WriteBehind};
use httpdns_store::{Store, StoreError};
use tokio_util::sync::CancellationToken;

/// Seconds of one bucket.
pub const BUCKET_S: i64 = 300;
/// Sketches held in memory at most (4 KiB each).
pub const MAX_SKETCHES: usize = 256;
/// How often this replica writes its changed sketches.
pub const FLUSH_EVERY: Duration = Duration::from_secs(10);
/// Sketches are kept this long in the store (and a window may be at most this).
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

type Key = (i64, String, i64);

/// How adoption sketches are written behind to the store: 5-minute buckets, pruned hourly.
#[derive(Debug)]
struct Sketches;

impl Kept for Sketches {
    type Key = Key;
    type Value = Sketch;
    type Row = SketchRow;
    const MAX_KEYS: usize = MAX_SKETCHES;
    const PRUNE_EVERY: i64 = 3600 / BUCKET_S;

    fn now() -> i64 {
        now_bucket()
    }

    fn period(key: &Key) -> i64 {
        key.0
    }

    fn row((bucket, module, version): &Key, sketch: &Sketch) -> SketchRow {
        SketchRow { bucket: *bucket, module: module.clone(), version: *version, registers: sketch.encode() }
    }

    async fn save(store: &Store, replica: &str, rows: &[SketchRow]) -> Result<(), StoreError> {
        store.save_adoption(replica, rows).await
    }

    async fn prune(store: &Store, now: i64) -> Result<u64, StoreError> {
        store.prune_adoption(now - RETENTION.as_secs() as i64 / BUCKET_S).await
    }
}

/// This replica's sketches not yet pruned from memory, and which changed since the last flush.
#[derive(Debug)]
pub struct Adoption(WriteBehind<Sketches>);

fn now_bucket() -> i64 {
    httpdns_core::clock::unix_s() as i64 / BUCKET_S
}

impl Default for Adoption {
    fn default() -> Self {
        Self(WriteBehind::new(httpdns_auth::instance_id()))
    }
}

impl Adoption {
    /// Counts `device` as running `version` of `module` now. Dropped (not counted) when the
    /// memory bound is reached by other keys of this bucket.
    pub fn note(&self, module: &str, version: i64, device: &str) {
        let key = (now_bucket(), module.to_owned(), version);
        self.0.update([device], |_| key.clone(), |sketch, device| sketch.add(device));
    }

    /// Writes the changed sketches; keeps in memory only the current bucket's (and the last
    /// one's, which may still be written to near its end). Prunes the store hourly.
    pub async fn flush(&self, store: &Store) -> Result<usize, StoreError> {
        self.0.flush(store).await
    }

    /// Flushes every [`FLUSH_EVERY`] until `shutdown`, then once more.
    pub async fn run(self: std::sync::Arc<Self>, store: Store, shutdown: CancellationToken) {
        httpdns_store::behind::flush_every(FLUSH_EVERY, shutdown, "adoption sketches", || self.flush(&store))
            .await;
    }
}

/// Distinct devices per version of a module over a window, every replica's sketches merged.
#[derive(Debug, Clone, PartialEq)]
pub struct Counts {
    /// Estimated devices per version, newest version first.
    pub versions: Vec<(i64, u64)>,
    /// Estimated devices over every version (a device on two versions counts once).
    pub devices: u64,
}

impl Adoption {
    /// The devices seen running each version of `module` in the last `minutes`: this
    /// replica's sketches are flushed first (a failed flush is logged, the read goes on).
    pub async fn counts(&self, store: &Store, module: &str, minutes: i64) -> Result<Counts, StoreError> {
        if let Err(e) = self.flush(store).await {
            tracing::warn!(error = %e, "Adoption read without this replica's latest sketches.");
        }
        let from = (httpdns_core::clock::unix_s() as i64 - minutes * 60) / BUCKET_S;
        let rows = store.adoption_since(module, from).await?;
        let mut merged: BTreeMap<i64, Sketch> = BTreeMap::new();
        let mut all = Sketch::default();
        for (version, text) in rows {
            let Some(s) = Sketch::decode(&text) else { continue };
            all.merge(&s);
            merged.entry(version).or_default().merge(&s);
        }
        Ok(Counts {
            versions: merged.iter().rev().map(|(v, s)| (*v, s.estimate().round() as u64)).collect(),
            devices: all.estimate().round() as u64,
        })
    }
}
