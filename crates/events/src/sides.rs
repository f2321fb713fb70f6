//! Client events counted by the config version the device runs (the events' `config_version`),
//! per minute, carrier and region: what guarded rollouts compare. Like the event minutes, no
//! write per event: counts in memory under one lock per batch, a replica's own rows rewritten
//! on each flush (the rollout tick's), bounded in memory.

use httpdns_store::behind::{Kept, WriteBehind};
use httpdns_store::rollouts::VersionMinute;
use httpdns_store::{Store, StoreError};

/// Keys (minute, version, carrier, region) held at most; later ones are not counted.
pub const MAX_KEYS: usize = 8192;
/// Rows are kept this long in the store.
const RETENTION_MINUTES: i64 = 7 * 24 * 60;

/// What one event adds.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionEvent {
    pub version: i64,
    pub isp: String,
    pub region: String,
    /// A `request` event (its weight); one whose outcome was an error; a `dns_fallback` event.
    pub requests: f64,
    pub errors: f64,
    pub fallbacks: f64,
}

type Key = (i64, i64, String, String);

/// What an event of a device that says its config version adds to its version's side:
/// requests, their errors (outcomes other than `ok` and `4xx`, as the events summary counts),
/// fallbacks. `None` for events without a version or of other types.
pub fn of_event(
    e: &crate::schema::Event,
    isp: &str,
    region: &str,
    reason: &str,
    w: f64,
) -> Option<VersionEvent> {
    use crate::schema::EventType;
    let version = i64::try_from(e.config_version?).ok()?;
    let (requests, errors, fallbacks) = match e.detail.kind() {
        EventType::Request => (w, if httpdns_store::events::request_failed(reason) { w } else { 0.0 }, 0.0),
        EventType::DnsFallback => (0.0, 0.0, w),
        _ => return None,
    };
    Some(VersionEvent {
        version,
        isp: isp.to_owned(),
        region: region.to_owned(),
        requests,
        errors,
        fallbacks,
    })
}

/// One key's sums.
#[derive(Debug, Default)]
struct Counts {
    requests: f64,
    errors: f64,
    fallbacks: f64,
}

/// How version sides are written behind to the store.
#[derive(Debug)]
struct Sides;

impl Kept for Sides {
    type Key = Key;
    type Value = Counts;
    type Row = VersionMinute;
    const MAX_KEYS: usize = MAX_KEYS;
    const PRUNE_EVERY: i64 = 60;

    fn now() -> i64 {
        crate::now_minute()
    }

    fn period(key: &Key) -> i64 {
        key.0
    }

    fn row((minute, version, isp, region): &Key, c: &Counts) -> VersionMinute {
        VersionMinute {
            minute: *minute,
            version: *version,
            isp: isp.clone(),
            region: region.clone(),
            requests: c.requests,
            errors: c.errors,
            fallbacks: c.fallbacks,
        }
    }

    async fn save(store: &Store, replica: &str, rows: &[VersionMinute]) -> Result<(), StoreError> {
        store.save_version_minutes(replica, rows).await
    }

    async fn prune(store: &Store, now: i64) -> Result<u64, StoreError> {
        store.prune_version_minutes(now - RETENTION_MINUTES).await
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct VersionSides(WriteBehind<Sides>);

impl Default for VersionSides {
    fn default() -> Self {
        Self(WriteBehind::new(httpdns_auth::instance_id()))
    }
}

impl VersionSides {
    /// Counts a batch's events in the current minute.
    pub fn record(&self, events: &[VersionEvent]) {
        if events.is_empty() {
            return;
        }
        let minute = crate::now_minute();
        self.0.update(
            events,
            |e| (minute, e.version, e.isp.clone(), e.region.clone()),
            |c, e| {
                c.requests += e.requests;
                c.errors += e.errors;
                c.fallbacks += e.fallbacks;
            },
        );
    }

    /// Writes the changed minutes; keeps only the current and the last minute in memory.
    pub async fn flush(&self, store: &Store) -> Result<(), StoreError> {
        self.0.flush(store).await.map(drop)
    }
}
