//! Image variants (`x-oss-process=image/...` or `style/<name>`): served from the store, or
//! rendered once from the stored original and stored under `v/<path>/r2,<canonical chain>`.
//!
//! Memory is budgeted before anything is read: a render first reads the original's header
//! (its first 64 KiB, or 1 MiB when that is not enough), estimates what it will hold at its
//! peak ([`httpdns_image::memory_estimate`]: the original's bytes, the decoded pixels, the
//! largest step's buffers, the output) and reserves that much from one budget shared by every
//! render in flight (`HTTPDNS_MIRROR_IMAGE_MEMORY_MB`), waiting at most
//! `HTTPDNS_MIRROR_IMAGE_WAIT_MS`; only then is the original read. A render that cannot get
//! its memory in time is a 503 with `Retry-After`; one that needs more than the whole budget
//! is refused. Identical requests share one render (single flight keyed by the variant's store
//! path), which runs on a task of its own, so a client that hangs up cancels nothing for the
//! others. Variants larger than `HTTPDNS_MIRROR_VARIANT_MAX_STORE_BYTES` are served but not
//! stored.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use httpdns_flight::SingleFlight;
use httpdns_image::{ImageProcess, Limits, ProcessError, RenderError, WatermarkImages};
use object_store::path::Path;
use tokio::sync::watch;

use crate::copy_headers::value;
use crate::error::Failure;
use crate::fill::{self, FillError, FillState};
use crate::follow::{Current, Followed};
use crate::key::ObjectKey;
use crate::metrics::Outcome;
use crate::objects::{store_path, Found, StoredMeta};
use crate::origin::FetchError;
use crate::serve::{full_response, serve_found, Request};
use crate::{Mirror, RuleRuntime, StyleSpecs};

/// How much of an original is read to find its header: most headers fit the first read; JPEGs
/// with large EXIF or ICC blocks need the second.
const HEADER_READS: [u64; 2] = [64 << 10, 1 << 20];

/// The image settings of the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSettings {
    /// Bytes all renders in flight may hold together (`HTTPDNS_MIRROR_IMAGE_MEMORY_MB`).
    pub memory_bytes: u64,
    /// How long a render waits for its memory before the request gets a 503.
    pub memory_wait: Duration,
    /// Variants larger than this are served but not stored.
    pub max_store_bytes: u64,
    pub limits: Limits,
}

impl Default for ImageSettings {
    fn default() -> Self {
        Self {
            memory_bytes: 1024 << 20,
            memory_wait: Duration::from_secs(5),
            max_store_bytes: 8 << 20,
            limits: Limits::default(),
        }
    }
}

/// A rendered variant, shared by every request that waited for it.
#[derive(Debug)]
struct Variant {
    body: Bytes,
    meta: StoredMeta,
    width: u32,
    height: u32,
}

/// Why a variant was not rendered.
#[derive(Debug, Clone)]
enum VariantError {
    Fill(FillError),
    Store(Arc<dyn std::error::Error + Send + Sync>),
    /// The original was gone from the store right after its fill (a purge in between).
    Vanished,
    /// The gateway itself (shutting down, a render task that panicked); logged, not sent.
    Internal(String),
    Render(RenderError),
    /// No memory within the wait.
    Busy,
    /// The render needs more than the whole budget.
    OverBudget {
        needed: u64,
        budget: u64,
    },
}

type RenderResult = Arc<Result<Variant, VariantError>>;

/// The gateway's image state: settings, the memory budget, the CPU permits, the renders in
/// flight and the styles in force.
pub(crate) struct Images {
    settings: ImageSettings,
    /// The memory budget in KiB (a semaphore counts in `u32` per acquire).
    memory: tokio::sync::Semaphore,
    memory_kib: u64,
    /// Rendering is CPU-bound: at most this many at once, on blocking threads.
    cpu: tokio::sync::Semaphore,
    flights: SingleFlight<String, RenderResult>,
    /// Compiled from the catalog's styles (`Mirror::follow`).
    styles: Followed<StyleSpecs, HashMap<String, ImageProcess>>,
}

impl Images {
    pub(crate) fn new(settings: ImageSettings) -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let memory_kib = (settings.memory_bytes / 1024).clamp(1, u64::from(u32::MAX));
        Self {
            memory: tokio::sync::Semaphore::new(memory_kib as usize),
            memory_kib,
            cpu: tokio::sync::Semaphore::new(cpus.max(1)),
            flights: SingleFlight::new(),
            styles: Followed::new(HashMap::new()),
            settings,
        }
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.settings.limits
    }

    pub(crate) fn follow_styles(&self, specs: watch::Receiver<StyleSpecs>) {
        self.styles.follow(specs, |specs, _| crate::style::compile_all(specs));
    }

    /// The styles in force, compiled again first if the catalog sent new ones.
    fn styles(&self) -> arc_swap::Guard<Arc<Current<StyleSpecs, HashMap<String, ImageProcess>>>> {
        self.styles.load(|specs, _| crate::style::compile_all(specs))
    }

    pub(crate) fn style_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.styles().keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// The `x-oss-process` value of a request, styles resolved.
    pub(crate) fn process(&self, raw: &str) -> Result<ImageProcess, ProcessError> {
        crate::style::resolve(raw, &self.styles())
    }

    /// How long a request waits for a shared render: the memory wait, the render's own time
    /// budget, and room for the original's fill.
    fn flight_wait(&self) -> Duration {
        self.settings.memory_wait + self.settings.limits.max_render_time + Duration::from_secs(60)
    }

    /// Reserves `bytes` of the budget, waiting at most the configured time.
    async fn reserve(&self, bytes: u64) -> Result<tokio::sync::SemaphorePermit<'_>, VariantError> {
        let kib = bytes.div_ceil(1024).max(1);
        if kib > self.memory_kib {
            return Err(VariantError::OverBudget { needed: bytes, budget: self.memory_kib * 1024 });
        }
        let acquire = self.memory.acquire_many(kib as u32);
        match tokio::time::timeout(self.settings.memory_wait, acquire).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(VariantError::Internal("the image permits are closed (shutting down)".into())),
            Err(_) => Err(VariantError::Busy),
        }
    }
}

/// The renderer's generation in variant store paths. Variants stored by an earlier renderer
/// (orientation always applied, lossless WebP, another JPEG encoder) sit under names without
/// it and are never served for the same chain: a stored variant always means what a render
/// now would. Raise it whenever the same chain would render differently.
const RENDER_GENERATION: &str = "r2";

/// The store path of a variant: `v/<path>/[<query>/]r2,<canonical chain>`. A canonical chain
/// longer than a file name may be (watermark texts) is stored under its SHA-256 instead.
fn variant_location(req: &Request, canonical: &str) -> Path {
    use sha2::Digest as _;
    let name = if canonical.len() <= 200 {
        format!("{RENDER_GENERATION},{canonical}")
    } else {
        format!("{RENDER_GENERATION},sha256-{}", hex::encode(sha2::Sha256::digest(canonical.as_bytes())))
    };
    let name = name.as_str();
    let segs = req.segments.iter().map(String::as_str);
    let tail = match &req.query_key {
        Some(q) => vec![q.as_str(), name],
        None => vec![name],
    };
    store_path("v", segs.chain(tail))
}

/// Serves an image variant: stored, or rendered (one render per variant at a time).
pub(crate) async fn serve(
    mirror: &Arc<Mirror>,
    req: &Request,
    ops: &ImageProcess,
    headers: &HeaderMap,
) -> (Outcome, Response) {
    let location = variant_location(req, &ops.canonical());
    match mirror.objects.find(&location).await {
        Ok(Some(found)) => return (Outcome::Variant, serve_found(mirror, &found, req, headers, "HIT").await),
        Ok(None) => {}
        Err(e) => return Failure::store(e).served(),
    }
    let job = Job {
        mirror: mirror.clone(),
        runtime: req.runtime.clone(),
        original: req.original_location(),
        origin_path: req.origin_path.clone(),
        location: location.clone(),
        ops: ops.clone(),
    };
    let flight =
        mirror.images.flights.run(location.to_string(), mirror.images.flight_wait(), move || job.run());
    let shared = match flight.await {
        Ok(shared) => shared,
        Err(e) => return Failure::busy(e.to_string()).served(),
    };
    let variant = match &*shared.value {
        Ok(v) => v,
        Err(e) => return Failure::from(e).served(),
    };
    if !req.head_only {
        req.runtime.series.served(variant.body.len() as u64);
    }
    let mut resp = full_response(&variant.meta, req.head_only, variant.body.clone(), "MISS");
    resp.headers_mut().insert("x-image-size", value(&format!("{}x{}", variant.width, variant.height)));
    if shared.joined {
        resp.headers_mut().insert("x-cache-coalesced", HeaderValue::from_static("1"));
    }
    (Outcome::Variant, resp)
}

/// One render, owned by its own task.
struct Job {
    mirror: Arc<Mirror>,
    runtime: Arc<RuleRuntime>,
    original: Path,
    origin_path: String,
    location: Path,
    ops: ImageProcess,
}

impl Job {
    async fn run(self) -> RenderResult {
        Arc::new(self.render().await)
    }

    async fn render(self) -> Result<Variant, VariantError> {
        let images = &self.mirror.images;
        let limits = images.limits().clone();
        // A render that finished between this request's lookup and its joining the flight
        // has stored the variant already: serve that rather than render it twice.
        let store = VariantError::store;
        if let Some(found) = self.mirror.objects.find(&self.location).await.map_err(store)? {
            let body = self.mirror.objects.read_all(&found).await.map_err(VariantError::store)?;
            let size = httpdns_image::probe(&body).map(|h| (h.width, h.height)).unwrap_or((0, 0));
            return Ok(Variant {
                body: body.into(),
                meta: (*found.meta).clone(),
                width: size.0,
                height: size.1,
            });
        }
        let original =
            stored_or_filled(&self.mirror, &self.runtime, &self.original, &self.origin_path).await?;
        let length = original.meta.length;
        if length > limits.max_input_bytes as u64 {
            return Err(VariantError::Render(RenderError::InputTooLarge {
                bytes: length as usize,
                limit: limits.max_input_bytes,
            }));
        }
        let needed = self.estimate(&original, &limits).await?;
        let _memory = images.reserve(needed).await?;
        let watermarks = self.watermarks(&limits).await?;
        // The original is read, rendered and dropped on a thread of its own, which ends with
        // the render. The allocator (mimalloc) keeps what a thread frees in that thread's heap
        // until the thread allocates again, and a large block another thread frees is only
        // reset (`MADV_FREE`), resident until its own thread comes back: renders on the
        // runtime's blocking threads, idle between renders, left pixels resident after their
        // reservations were released (150 renders of an 18 MB PNG held up to 330 MiB above the
        // baseline under a 256 MiB budget). A thread that ends hands its heap back (and `serve`
        // runs mimalloc without arenas, so its free segments are unmapped: `src/main.rs`).
        let mirror = self.mirror.clone();
        let ops = self.ops.clone();
        let runtime = tokio::runtime::Handle::current();
        let (done, rendered) = tokio::sync::oneshot::channel();
        let render = move || -> Result<_, VariantError> {
            let images = &mirror.images;
            let bytes = runtime.block_on(mirror.objects.read_all(&original)).map_err(VariantError::store)?;
            // Bounded like the memory wait: renders ahead of this one each end within their
            // own time budget, so a longer wait means the gateway is overloaded.
            let cpu_wait = images.settings.memory_wait + images.settings.limits.max_render_time;
            let _cpu = match runtime
                .block_on(async { tokio::time::timeout(cpu_wait, images.cpu.acquire()).await })
            {
                Ok(Ok(permit)) => permit,
                Ok(Err(_)) => {
                    return Err(VariantError::Internal("the image permits are closed (shutting down)".into()))
                }
                Err(_) => return Err(VariantError::Busy),
            };
            httpdns_image::render_with(&bytes, &ops, &limits, &watermarks).map_err(VariantError::Render)
        };
        std::thread::Builder::new()
            .name("httpdns-render".into())
            .spawn(move || {
                let _ = done.send(render());
            })
            .map_err(|e| VariantError::Internal(format!("could not start a render thread: {e}")))?;
        let rendered = rendered
            .await
            .map_err(|_| VariantError::Internal("the render thread ended without a result".into()))??;
        let rule = &self.runtime.rule.name;
        self.mirror.metrics.render(rule);
        let meta = StoredMeta::for_body(rendered.content_type, &rendered.bytes);
        let body = Bytes::from(rendered.bytes);
        if body.len() as u64 <= images.settings.max_store_bytes {
            if let Err(e) = self.mirror.objects.put_bytes(&self.location, body.clone(), &meta).await {
                tracing::warn!(error = %e, key = %self.location, "Could not store an image variant; serving it anyway.");
            }
        } else {
            self.mirror.metrics.variant_not_stored(rule);
            tracing::info!(key = %self.location, bytes = body.len(), "Image variant larger than the store limit: served, not stored.");
        }
        Ok(Variant { body, meta, width: rendered.width, height: rendered.height })
    }

    /// The memory the render will hold, from the original's header; the whole budget when the
    /// header cannot be read from its first MiB (the render then runs alone).
    async fn estimate(&self, original: &Found, limits: &Limits) -> Result<u64, VariantError> {
        let length = original.meta.length;
        let watermarks = self.ops.watermark_objects().len() as u64 * limits.max_watermark_bytes as u64;
        for read in HEADER_READS {
            let prefix = read_prefix(&self.mirror, original, read.min(length)).await?;
            match httpdns_image::probe(&prefix) {
                Ok(header) => {
                    let estimate = httpdns_image::memory_estimate(&self.ops, &header, length, limits)
                        .map_err(VariantError::Render)?;
                    return Ok(estimate + watermarks);
                }
                Err(RenderError::UnsupportedFormat) => {
                    return Err(VariantError::Render(RenderError::UnsupportedFormat));
                }
                Err(_) if read >= length => break,
                Err(_) => {}
            }
        }
        Ok(self.mirror.images.memory_kib * 1024)
    }

    /// The watermark images the chain names, from the same rule (filled if needed), each
    /// within its byte budget.
    async fn watermarks(&self, limits: &Limits) -> Result<WatermarkImages, VariantError> {
        let mut out = WatermarkImages::new();
        let rule = &self.runtime.rule;
        for object in self.ops.watermark_objects() {
            let missing = || VariantError::Render(RenderError::WatermarkMissing(object.to_owned()));
            let key = ObjectKey::parse(object).map_err(|_| missing())?;
            let segments =
                rule.prefix.iter().map(String::as_str).chain(key.segments().iter().map(String::as_str));
            let location = store_path("o", segments);
            let mut origin_path = String::new();
            for seg in &rule.replace_prefix {
                origin_path.push_str(seg);
                origin_path.push('/');
            }
            origin_path.push_str(&key.encoded());
            let found = match stored_or_filled(&self.mirror, &self.runtime, &location, &origin_path).await {
                Ok(f) => f,
                Err(VariantError::Fill(FillError::Fetch(FetchError::NotFound))) => return Err(missing()),
                Err(e) => return Err(e),
            };
            if found.meta.length > limits.max_watermark_bytes as u64 {
                return Err(missing());
            }
            let bytes = self.mirror.objects.read_all(&found).await.map_err(VariantError::store)?;
            out.insert(object.to_owned(), bytes);
        }
        Ok(out)
    }
}

/// The first `len` bytes of a stored copy.
async fn read_prefix(mirror: &Mirror, found: &Found, len: u64) -> Result<Vec<u8>, VariantError> {
    let mut out = Vec::with_capacity(len as usize);
    let mut stream = mirror.objects.read(found, 0, len);
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.map_err(VariantError::store)?);
    }
    Ok(out)
}

/// The stored copy at `location`, filled from the origin first when there is none.
async fn stored_or_filled(
    mirror: &Arc<Mirror>,
    runtime: &Arc<RuleRuntime>,
    location: &Path,
    origin_path: &str,
) -> Result<Found, VariantError> {
    let store = VariantError::store;
    if let Some(found) = mirror.objects.find(location).await.map_err(store)? {
        return Ok(found);
    }
    if mirror.known_missing(location) {
        return Err(VariantError::Fill(FillError::Fetch(FetchError::NotFound)));
    }
    let (fill, _) =
        fill::join_or_start(mirror, runtime, location, origin_path.to_owned(), Default::default())
            .map_err(VariantError::Fill)?;
    match fill.finished().await {
        FillState::Done { .. } => {}
        FillState::Failed(e) => return Err(VariantError::Fill(e)),
        _ => return Err(VariantError::Fill(FillError::Ended)),
    }
    mirror.objects.find(location).await.map_err(store)?.ok_or(VariantError::Vanished)
}

impl VariantError {
    fn store(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        VariantError::Store(Arc::new(e))
    }
}

impl From<&VariantError> for Failure {
    fn from(e: &VariantError) -> Self {
        match e {
            VariantError::Fill(e) => Failure::from(e),
            VariantError::Store(e) => Failure::store(e),
            VariantError::Vanished => Failure::internal(
                "MirrorFailed",
                "the original changed during the render; try again",
                "the original vanished after its fill",
                true,
            ),
            VariantError::Internal(detail) => {
                Failure::internal("MirrorFailed", "the render failed; try again", detail, true)
            }
            VariantError::Render(e) => Failure::from(e),
            VariantError::Busy => Failure::busy("no image memory came free in time; try again"),
            VariantError::OverBudget { needed, budget } => Failure::client(
                StatusCode::UNPROCESSABLE_ENTITY,
                "ImageTooLargeOrInvalid",
                None,
                format!("the render needs {needed} bytes, more than the image memory budget of {budget}"),
            ),
        }
    }
}
