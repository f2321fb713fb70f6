//! Client events counted by the config version the device runs (the events' `config_version`),
//! per minute, carrier and region: what guarded rollouts compare. Like the event minutes, no
//! write per event: counts in memory under one lock per batch, a replica's own rows rewritten
//! on each flush (the rollout tick's), bounded in memory.

use parking_lot::Mutex;
use std::collections::HashMap;

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
        EventType::Request => (w, if reason == "ok" || reason == "4xx" { 0.0 } else { w }, 0.0),
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

#[derive(Debug, Default)]
struct Counts {
    requests: f64,
    errors: f64,
    fallbacks: f64,
    dirty: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub struct VersionSides {
    replica: String,
    held: Mutex<HashMap<Key, Counts>>,
    flushing: tokio::sync::Mutex<i64>,
}

impl Default for VersionSides {
    fn default() -> Self {
        let mut id = [0u8; 6];
        let _ = getrandom::fill(&mut id);
        Self {
            replica: format!("{}-{}", std::process::id(), httpdns_auth::hex(&id)),
            held: Mutex::new(HashMap::new()),
            flushing: tokio::sync::Mutex::new(0),
        }
    }
}

impl VersionSides {
    /// Counts a batch's events in the current minute.
    pub fn record(&self, events: &[VersionEvent]) {
        if events.is_empty() {
            return;
        }
        let minute = crate::now_minute();
        let mut held = self.held.lock();
        for e in events {
            let key = (minute, e.version, e.isp.clone(), e.region.clone());
            if !held.contains_key(&key) && held.len() >= MAX_KEYS {
                continue;
            }
            let c = held.entry(key).or_default();
            c.requests += e.requests;
            c.errors += e.errors;
            c.fallbacks += e.fallbacks;
            c.dirty = true;
        }
    }

    /// Writes the changed minutes; keeps only the current and the last minute in memory.
    pub async fn flush(&self, store: &Store) -> Result<(), StoreError> {
        let mut last_prune = self.flushing.lock().await;
        let rows: Vec<VersionMinute> = {
            let mut held = self.held.lock();
            held.iter_mut()
                .filter(|(_, c)| c.dirty)
                .map(|((minute, version, isp, region), c)| {
                    c.dirty = false;
                    VersionMinute {
                        minute: *minute,
                        version: *version,
                        isp: isp.clone(),
                        region: region.clone(),
                        requests: c.requests,
                        errors: c.errors,
                        fallbacks: c.fallbacks,
                    }
                })
                .collect()
        };
        if !rows.is_empty() {
            if let Err(e) = store.save_version_minutes(&self.replica, &rows).await {
                let mut held = self.held.lock();
                for r in &rows {
                    if let Some(c) = held.get_mut(&(r.minute, r.version, r.isp.clone(), r.region.clone())) {
                        c.dirty = true;
                    }
                }
                return Err(e);
            }
        }
        let now = crate::now_minute();
        self.held.lock().retain(|k, c| k.0 >= now - 1 || c.dirty);
        if now - *last_prune >= 60 {
            store.prune_version_minutes(now - RETENTION_MINUTES).await?;
            *last_prune = now;
        }
        Ok(())
    }
}
