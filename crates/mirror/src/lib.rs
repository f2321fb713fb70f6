//! The origin-mirroring gateway.
//!
//! `GET`/`HEAD /<path_prefix>/<key>` on the mirror listener: the longest matching rule maps
//! the key to its origin; a stored copy is served if there is one, else one fill per key
//! fetches it (every concurrent client streaming from the fill as it arrives), commits it
//! atomically and serves it. Image variants (`x-oss-process=image/...`) are computed here from
//! the stored original and stored under their own key, so the original is never replaced.
//!
//! Architecture invariants:
//! - The client's query string never reaches an origin, except parameters a rule lists, and
//!   then they are part of the stored key.
//! - Nothing is stored unless the origin said 200 and every byte arrived; a store path only
//!   ever holds a complete copy with its metadata.
//! - Request paths become store paths only through [`key::ObjectKey`].

pub mod cap;
pub mod conditional;
mod copy_headers;
pub mod error;
mod fill;
mod follow;
mod hot;
pub mod key;
pub mod layout;
pub mod metrics;
mod negotiate;
pub mod objects;
pub mod origin;
pub mod prefetch;
mod proxy;
pub mod rule;
mod serve;
mod sigv4;
mod slice;
mod store_io;
mod style;
mod upstream;
mod variant;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use httpdns_core::model::mirror::RuleSpec;
use httpdns_core::model::style::StyleSpec;
use object_store::path::Path;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use metrics::{MirrorMetrics, RuleReport};
pub use objects::{Objects, ObjectsError, StoredMeta};
pub use rule::{Rule, RuleTable};
pub use serve::{app, router, HotHits};
pub use variant::ImageSettings;

use fill::Fill;
use follow::Followed;
use origin::OriginClient;

/// The mirror rules the catalog publishes (`httpdns_catalog::Catalog::mirror_rules`), by name.
pub type RuleSpecs = Arc<Vec<(String, RuleSpec)>>;
/// The image styles the catalog publishes (`httpdns_catalog::Catalog::image_styles`), by name.
pub type StyleSpecs = Arc<Vec<(String, StyleSpec)>>;

/// A compiled rule with its origin client.
#[derive(Debug)]
pub struct RuleRuntime {
    pub rule: Arc<Rule>,
    pub client: OriginClient,
    pub series: metrics::RuleSeries,
}

/// The rule table in force, with a runtime per rule.
#[derive(Debug, Default)]
struct Table {
    rules: RuleTable,
    runtimes: HashMap<String, Arc<RuleRuntime>>,
    /// Next probe time of rules with a probe path.
    next_probe: Mutex<HashMap<String, Instant>>,
}

/// The gateway's shared state. One per process, behind an `Arc`.
pub struct Mirror {
    /// The rule table compiled from the catalog's rules ([`Mirror::follow`]).
    table: Followed<RuleSpecs, Table>,
    pub objects: Arc<Objects>,
    pub metrics: MirrorMetrics,
    fills: Mutex<HashMap<String, Arc<Fill>>>,
    /// Fills in slices (`slice_bytes`), by store path.
    slices: Mutex<HashMap<String, Arc<slice::SliceFill>>>,
    /// Origin 404s remembered until the instant (bounded: expired and least useful entries
    /// are evicted first; an expired one is never believed).
    missing: quick_cache::sync::Cache<String, Instant>,
    /// When each copy was last known current (unix ms), for rules with a TTL. An evicted entry
    /// falls back to the copy's stored time, which only makes a revalidation come sooner.
    validated: quick_cache::sync::Cache<String, u64>,
    /// Image variants: settings, memory budget, renders in flight, styles.
    images: variant::Images,
    /// Origins on this host or its link are allowed (`HTTPDNS_ALLOW_LOCAL_ORIGINS`).
    allow_local_origins: bool,
    /// Prefetch jobs (`POST /admin/v1/mirror/prefetch`).
    prefetch: prefetch::Jobs,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror").field("objects", &self.objects).finish_non_exhaustive()
    }
}

const MAX_REMEMBERED: usize = 100_000;

impl Mirror {
    pub fn new(objects: Objects, metrics: MirrorMetrics) -> Self {
        Self {
            table: Followed::new(Table::default()),
            objects: Arc::new(objects),
            metrics,
            fills: Mutex::default(),
            slices: Mutex::default(),
            missing: quick_cache::sync::Cache::new(MAX_REMEMBERED),
            validated: quick_cache::sync::Cache::new(MAX_REMEMBERED),
            images: variant::Images::new(ImageSettings::default()),
            allow_local_origins: false,
            prefetch: prefetch::Jobs::default(),
        }
    }

    /// Allows origins (and redirect hops) on loopback, link-local and unspecified addresses:
    /// tests and single-host setups; never on a host with a metadata service.
    pub fn allowing_local_origins(mut self, allow: bool) -> Self {
        self.allow_local_origins = allow;
        self
    }

    pub fn allows_local_origins(&self) -> bool {
        self.allow_local_origins
    }

    /// The same gateway with these image settings (budgets, store limit).
    pub fn with_images(mut self, settings: ImageSettings) -> Self {
        self.images = variant::Images::new(settings);
        self
    }

    /// Follows the catalog's mirror rules and image styles from now on (the current ones at
    /// once). Each use checks its channel, so what the catalog sent before a request started
    /// is in force for it.
    pub fn follow(&self, rules: watch::Receiver<RuleSpecs>, styles: watch::Receiver<StyleSpecs>) {
        self.table.follow(rules, |specs, old| self.compile(specs, old));
        self.images.follow_styles(styles);
    }

    /// The rule table in force, compiled again first if the catalog sent new rules.
    fn table(&self) -> arc_swap::Guard<Arc<follow::Current<RuleSpecs, Table>>> {
        self.table.load(|specs, old| self.compile(specs, old))
    }

    /// The rule table of `specs`. Rules whose spec did not change keep their origin client
    /// (connections, primary health).
    fn compile(&self, specs: &RuleSpecs, old: &Table) -> Table {
        let allow_local = self.allow_local_origins;
        // A rule stored while local origins were allowed is not served once they are not.
        let specs = specs
            .iter()
            .filter(|(name, spec)| match spec.validate_with(allow_local) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(rule = %name, field = %e.field, error = %e.message, "Skipping a mirror rule.");
                    false
                }
            })
            .cloned();
        let rules = RuleTable::new(specs);
        let mut runtimes = HashMap::new();
        for rule in rules.rules() {
            self.metrics.touch(&rule.name);
            let runtime = match old.runtimes.get(&rule.name) {
                Some(r) if r.rule.spec == rule.spec => r.clone(),
                _ => Arc::new(RuleRuntime {
                    rule: rule.clone(),
                    client: OriginClient::new(rule, allow_local),
                    series: self.metrics.series(&rule.name),
                }),
            };
            runtimes.insert(rule.name.clone(), runtime);
        }
        Table { rules, runtimes, next_probe: Mutex::default() }
    }

    /// The names of the image styles in force, sorted.
    pub fn style_names(&self) -> Vec<String> {
        self.images.style_names()
    }

    /// Every rule in force, most specific first.
    pub fn rules(&self) -> Vec<Arc<Rule>> {
        self.table().rules.rules().to_vec()
    }

    /// The rule for a raw request path, with the rest of the path.
    fn route(&self, path: &str) -> Option<(Arc<RuleRuntime>, String)> {
        let table = self.table();
        let (rule, rest) = table.rules.matching(path)?;
        Some((table.runtimes.get(&rule.name)?.clone(), rest.to_owned()))
    }

    /// Per-rule figures since start.
    pub fn report(&self) -> Vec<RuleReport> {
        self.rules().iter().map(|r| self.metrics.report(r)).collect()
    }

    fn remember_missing(&self, location: &Path, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        self.missing.insert(location.to_string(), Instant::now() + ttl);
    }

    fn known_missing(&self, location: &Path) -> bool {
        self.missing.get(location.as_ref()).is_some_and(|until| until > Instant::now())
    }

    fn forget_missing(&self, location: &Path) {
        self.missing.remove(location.as_ref());
    }

    fn mark_validated(&self, location: &Path) {
        self.validated.insert(location.to_string(), httpdns_core::clock::unix_ms());
    }

    fn validated_at(&self, location: &Path, meta: &StoredMeta) -> u64 {
        self.validated.get(location.as_ref()).unwrap_or(0).max(meta.stored_at_ms)
    }

    /// Removes the copy of one request path (original, query-selected copies and variants).
    /// Returns how many objects went.
    pub async fn purge(&self, path: &str, prefix: bool) -> Result<u64, PurgeError> {
        let segments = purge_segments(path)?;
        let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
        let mut n = 0;
        if prefix {
            for ns in ["o", "q", "v"] {
                n += self.objects.delete_prefix(&objects::store_path(ns, segs.iter().copied())).await?;
            }
        } else {
            let original = objects::store_path("o", segs.iter().copied());
            n += u64::from(self.objects.delete(&original).await?);
            // This key's query-selected originals and variants, not those of keys below it.
            for ns in ["q", "v"] {
                n += self.objects.delete_children(&objects::store_path(ns, segs.iter().copied())).await?;
            }
        }
        // A purge also forgets 404s under the path, so a re-uploaded origin object is fetched.
        let probe = objects::store_path("o", segs.iter().copied()).to_string();
        self.missing.retain(|k, _| !k.starts_with(&probe));
        self.forget_fills(&segs);
        Ok(n)
    }

    /// The stored copy of the mirror path `path` (percent-encoded as requested), if there is
    /// one: its metadata (size, ETag, content type, when it was stored).
    pub async fn lookup(&self, path: &str) -> Result<Option<Arc<StoredMeta>>, PurgeError> {
        let segments = purge_segments(path)?;
        let location = objects::store_path("o", segments.iter().map(String::as_str));
        Ok(self.objects.find(&location).await?.map(|f| f.meta))
    }

    /// Writes an object straight into the store under a request path (the seed's "dual
    /// write" for JSON that is overwritten in place). Its variants are dropped.
    pub async fn write(
        &self,
        path: &str,
        content_type: &str,
        body: bytes::Bytes,
    ) -> Result<StoredMeta, PurgeError> {
        let segments = purge_segments(path)?;
        let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
        let location = objects::store_path("o", segs.iter().copied());
        let meta = StoredMeta::for_body(content_type, &body);
        self.objects.put_bytes(&location, body, &meta).await?;
        self.objects.delete_children(&objects::store_path("v", segs.iter().copied())).await?;
        self.forget_missing(&location);
        self.mark_validated(&location);
        self.forget_fills(&segs);
        Ok(meta)
    }

    /// Unlists the fills of copies under `segments` (originals, query originals, variants),
    /// so the next request goes to the store or the origin. Without this, a request right
    /// after a purge or an admin write would join a fill that finished moments before and
    /// read its copy, the very one just purged or overwritten. Fills in flight keep serving
    /// the clients already attached.
    fn forget_fills(&self, segments: &[&str]) {
        let bases: Vec<String> = ["o", "q", "v"]
            .iter()
            .map(|ns| objects::store_path(ns, segments.iter().copied()).to_string())
            .collect();
        let under = |key: &str| {
            let key = key.strip_prefix("revalidate:").unwrap_or(key);
            bases
                .iter()
                .any(|b| key == b || key.strip_prefix(b.as_str()).is_some_and(|rest| rest.starts_with('/')))
        };
        self.fills.lock().retain(|k, _| !under(k));
        self.slices.lock().retain(|k, _| !under(k));
    }

    /// Probes the primary origin of every rule with a probe path, each at its interval,
    /// until `shutdown`.
    pub async fn run_probes(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let table = arc_swap::Guard::into_inner(self.table());
            let now = Instant::now();
            for runtime in table.runtimes.values() {
                let rule = &runtime.rule;
                if rule.spec.probe_path.is_none() {
                    continue;
                }
                {
                    let mut next = table.next_probe.lock();
                    let due = next.get(&rule.name).is_none_or(|t| *t <= now);
                    if !due {
                        continue;
                    }
                    next.insert(rule.name.clone(), now + Duration::from_millis(rule.spec.probe_interval_ms));
                }
                let runtime = runtime.clone();
                tokio::spawn(async move {
                    let up = runtime.client.probe(&runtime.rule).await;
                    tracing::debug!(rule = %runtime.rule.name, up, "Probed the primary origin.");
                });
            }
        }
    }
}

/// Why a purge or write was refused.
#[derive(Debug, thiserror::Error)]
pub enum PurgeError {
    #[error("path: {0}")]
    BadPath(#[from] key::KeyError),
    #[error(transparent)]
    Store(#[from] ObjectsError),
}

/// A request path (`/image/a.jpg`, percent-encoded or not) as checked store segments.
fn purge_segments(path: &str) -> Result<Vec<String>, key::KeyError> {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    Ok(key::ObjectKey::parse(trimmed)?.segments().to_vec())
}
