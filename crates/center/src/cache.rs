//! The served config documents, one per module, in memory.
//!
//! Apps are answered from here, never from the database. A module's entry is replaced only by
//! a *higher* version, so this replica never serves a version older than one it has served,
//! whatever order refreshes complete in.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::HeaderValue;
use httpdns_config::{ConfigDocument, Signer};
use httpdns_flight::SingleFlight;
use httpdns_store::rollouts::RolloutRow;
use httpdns_store::{Store, StoreError};

use crate::adoption::Adoption;
use crate::metrics::CenterMetrics;
use httpdns_events::sides::VersionSides;

/// A module's current document, ready to serve.
#[derive(Debug)]
pub struct Published {
    pub module: String,
    pub version: i64,
    pub document: ConfigDocument,
    /// The body for requests without a device id, and its signature and ETag.
    pub body: Bytes,
    pub signature: HeaderValue,
    pub etag: HeaderValue,
}

/// The config documents this replica serves.
pub struct ConfigCache {
    store: Store,
    signer: Signer,
    modules: ArcSwap<HashMap<String, Arc<Published>>>,
    // Serialises refreshes; readers never take it.
    refresh_lock: tokio::sync::Mutex<()>,
    /// Refreshes asked for by clients that saw a newer version elsewhere: one at a time, on
    /// its own task (a client hanging up does not cancel it for the others), at most every
    /// [`CLIENT_REFRESH_EVERY`].
    client_refresh: SingleFlight<(), Result<(), String>>,
    last_client_refresh: parking_lot::Mutex<Option<Instant>>,
    metrics: CenterMetrics,
    corrupt_rows: prometheus::IntCounter,
    /// The policy controller's places, rendered into devices' `resolution`.
    policy: Arc<httpdns_policy::PolicyView>,
    /// Bumped whenever a module's served version changes (and once at [`ConfigCache::close`]):
    /// the long polls of `push` wait on it. One channel for every waiter, so a publish costs
    /// one send, and a waiter costs a receiver, not a task or a timer of its own beyond its
    /// deadline.
    changed: tokio::sync::watch::Sender<u64>,
    closing: std::sync::atomic::AtomicBool,
    /// Which devices run which version (`crate::adoption`).
    adoption: Arc<Adoption>,
    /// Client events by the version devices run (`httpdns_events::sides`), for rollouts.
    sides: Arc<VersionSides>,
    /// The newest version of each module under a guarded rollout, and its share.
    canaries: ArcSwap<HashMap<String, Arc<Canary>>>,
}

/// A module's newest version while a guarded rollout gives it to a share of devices.
#[derive(Debug)]
pub struct Canary {
    pub published: Arc<Published>,
    pub share: f64,
    /// The bucketing key: devices are inside when `httpdns_config::rollout::enabled(key, deviceId, share)`.
    pub key: String,
}

/// How often clients can make a replica reload config documents from the database (a client
/// claiming a version that does not exist must not turn every request into queries).
const CLIENT_REFRESH_EVERY: Duration = Duration::from_millis(250);
/// How long a request waits for such a reload before answering with what is loaded.
const CLIENT_REFRESH_WAIT: Duration = Duration::from_secs(2);

impl std::fmt::Debug for ConfigCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigCache").field("modules", &self.modules.load().len()).finish_non_exhaustive()
    }
}

/// The strong ETag of a version: its number, the same on every replica.
pub fn etag(version: i64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).expect("digits")
}

impl ConfigCache {
    /// `corrupt_rows` counts stored versions that no longer parse (the catalog's counter:
    /// one series for every stored row skipped).
    pub fn new(
        store: Store,
        signer: Signer,
        metrics: CenterMetrics,
        corrupt_rows: prometheus::IntCounter,
        policy: Arc<httpdns_policy::PolicyView>,
    ) -> Self {
        Self {
            store,
            signer,
            modules: ArcSwap::from_pointee(HashMap::new()),
            refresh_lock: tokio::sync::Mutex::new(()),
            client_refresh: SingleFlight::new(),
            last_client_refresh: parking_lot::Mutex::new(None),
            metrics,
            corrupt_rows,
            policy,
            changed: tokio::sync::watch::Sender::new(0),
            closing: std::sync::atomic::AtomicBool::new(false),
            adoption: Arc::default(),
            sides: Arc::default(),
            canaries: ArcSwap::from_pointee(HashMap::new()),
        }
    }

    /// The policy controller's places in force.
    pub fn policy(&self) -> &httpdns_policy::PolicyView {
        &self.policy
    }

    /// The per-version event counts of this replica.
    pub fn sides(&self) -> &Arc<VersionSides> {
        &self.sides
    }

    /// The adoption sketches of this replica.
    pub fn adoption(&self) -> &Arc<Adoption> {
        &self.adoption
    }

    /// A receiver that sees every later change of a served version.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Long polls held right now (receivers of [`ConfigCache::subscribe`]).
    pub fn waiters(&self) -> usize {
        self.changed.receiver_count()
    }

    /// Answers every held long poll now (with what is served) and every later one at once: the
    /// process is stopping, and a drain must not wait out their deadlines.
    pub fn close(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::Relaxed);
        self.changed.send_modify(|n| *n += 1);
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The served document of `module`.
    pub fn get(&self, module: &str) -> Option<Arc<Published>> {
        self.modules.load().get(module).cloned()
    }

    /// Every served document.
    pub fn modules(&self) -> Vec<Arc<Published>> {
        self.modules.load().values().cloned().collect()
    }

    /// Whether `host` is in the `hostListConfig` of a served document: only those hosts become
    /// labels of the event series (any other host a device names counts as `other`).
    pub fn is_unified_host(&self, host: &httpdns_config::Host) -> bool {
        // A target's own host list counts too: its devices report those hosts.
        self.modules.load().values().any(|p| {
            let doc = &p.document;
            doc.host_list_config.iter().any(|h| h.host == *host)
                || doc
                    .targets
                    .iter()
                    .filter_map(|t| t.with.host_list_config.as_ref())
                    .flatten()
                    .any(|h| h.host == *host)
        })
    }

    /// Loads every module whose stored version is newer than the served one, and follows the
    /// guarded rollouts: while one holds a module's newest version, the module serves the
    /// rollout's `previous` version, and the newest is a [`Canary`] for its share of devices.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let _guard = self.refresh_lock.lock().await;
        // The controller writes its places before it publishes the version that carries them:
        // loaded first (a small table), a new version is never served with older places.
        self.policy.reload(&self.store).await?;
        let stored = self.store.config_modules().await?;
        let rollouts: HashMap<String, RolloutRow> =
            self.store.rollouts_active().await?.into_iter().map(|r| (r.module.clone(), r)).collect();
        let current = self.modules.load_full();
        let canaries = self.canaries.load_full();
        let mut next: Option<HashMap<String, Arc<Published>>> = None;
        let mut next_canaries = HashMap::new();
        for (module, version, _) in stored {
            let rollout = rollouts.get(&module).filter(|r| version > r.previous);
            let stable = rollout.map_or(version, |r| r.previous);
            if let Some(r) = rollout {
                let held = canaries.get(&module).filter(|c| c.published.version == version);
                let published = match held {
                    Some(c) => Some(c.published.clone()),
                    None => self.load(&module, version).await?.map(Arc::new),
                };
                if let Some(published) = published {
                    let key = format!("rollout.{module}.{version}");
                    next_canaries.insert(module.clone(), Arc::new(Canary { published, share: r.share, key }));
                }
            }
            if current.get(&module).is_some_and(|p| p.version >= stable) {
                continue;
            }
            let Some(published) = self.load(&module, stable).await? else { continue };
            self.metrics.config_version.with_label_values(&[module.as_str()]).set(stable);
            next.get_or_insert_with(|| (*current).clone()).insert(module, Arc::new(published));
        }
        let same = |a: &HashMap<String, Arc<Canary>>, b: &HashMap<String, Arc<Canary>>| {
            a.len() == b.len()
                && a.iter().all(|(m, c)| {
                    b.get(m).is_some_and(|d| d.published.version == c.published.version && d.share == c.share)
                })
        };
        let canaries_changed = !same(&canaries, &next_canaries);
        if canaries_changed {
            self.canaries.store(Arc::new(next_canaries));
        }
        if let Some(map) = next {
            self.modules.store(Arc::new(map));
            self.changed.send_modify(|n| *n += 1);
        } else if canaries_changed {
            self.changed.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// A stored version ready to serve; `None` when it is gone or does not parse (counted).
    async fn load(&self, module: &str, version: i64) -> Result<Option<Published>, StoreError> {
        let Some(row) = self.store.config_version(module, version).await? else { return Ok(None) };
        match serde_json::from_str::<ConfigDocument>(&row.document) {
            Ok(d) => Ok(Some(self.publishable(module.to_owned(), version, d))),
            Err(e) => {
                self.corrupt_rows.inc();
                tracing::error!(%module, version, error = %e, "Skipping a stored config version that does not parse.");
                Ok(None)
            }
        }
    }

    /// The version a device gets: the rollout's newest version when the device's bucket is
    /// inside the share, else `stable` (what the module serves everyone else).
    pub fn for_device(&self, stable: &Arc<Published>, device_id: &str) -> Arc<Published> {
        match self.canaries.load().get(&stable.module) {
            Some(c) if httpdns_config::rollout::enabled(&c.key, device_id, c.share) => c.published.clone(),
            _ => stable.clone(),
        }
    }

    /// The rollout's newest version of `module` and its share, while one is in progress.
    pub fn canary(&self, module: &str) -> Option<Arc<Canary>> {
        self.canaries.load().get(module).cloned()
    }

    fn publishable(&self, module: String, version: i64, document: ConfigDocument) -> Published {
        let body = Bytes::from(document.render(version as u64, None));
        let signature = HeaderValue::from_str(&self.signer.sign(&body)).expect("base64 is header-safe");
        Published { module, version, document, body, signature, etag: etag(version) }
    }

    /// Refreshes when `version` is newer than what is served (a client that saw a newer
    /// version on another replica), so the answer is never older than the client's. Bounded
    /// in time and in rate; when the refresh is slow or refused, what is loaded is served.
    pub async fn at_least(self: &Arc<Self>, module: &str, version: i64) -> Option<Arc<Published>> {
        let served = self.get(module);
        // A device on a rollout's new side runs a version newer than the one served to the
        // rest: no reason to reload.
        let canary = self.canary(module).map_or(0, |c| c.published.version);
        if served.as_ref().is_some_and(|p| p.version.max(canary) >= version) {
            return served;
        }
        let due = {
            let mut last = self.last_client_refresh.lock();
            let due =
                last.is_none_or(|t| t.elapsed() >= CLIENT_REFRESH_EVERY) || self.client_refresh.contains(&());
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if due {
            let me = self.clone();
            let done = self
                .client_refresh
                .run((), CLIENT_REFRESH_WAIT, move || async move {
                    me.metrics.config_client_refreshes.inc();
                    me.refresh().await.map_err(|e| e.to_string())
                })
                .await;
            match done {
                Ok(shared) => {
                    if let Err(e) = shared.value {
                        tracing::warn!(error = %e, "Config refresh failed; serving what is loaded.");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Config refresh did not finish in time; serving what is loaded.");
                }
            }
        }
        self.get(module)
    }
}
