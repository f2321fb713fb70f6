//! One origin fetch per key, however many clients ask at once, with read-while-write.
//!
//! The first miss starts a [`Fill`] on its own task, so it goes on when that client goes away.
//! The origin body is written to a staged temp file (the disk is the buffer: memory does not
//! grow with object size or with slow clients), and every client of the key — the first and
//! all that join — streams from that file as it grows, following the `written` mark the fill
//! publishes on a `watch` channel. The copy is committed only after the origin said 200, every
//! byte arrived (length and optional `Content-MD5` checked) and the file was fsynced; a fill
//! that fails at any point is thrown away and readers see the error (their response is cut,
//! never completed with wrong bytes).

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt;
use md5::{Digest as _, Md5};
use object_store::path::Path;
use sha2::Sha256;
use tokio::sync::watch;

use crate::objects::{StoredMeta, CHUNK};
use crate::origin::{Ask, FetchError};
use crate::rule::Rule;
use crate::{Mirror, RuleRuntime};

/// Origin response headers kept with a copy and replayed (OSS keeps the same list).
pub(crate) const STORED_HEADERS: &[&str] = &[
    "content-encoding",
    "content-disposition",
    "cache-control",
    "expires",
    "content-language",
    "access-control-allow-origin",
];

/// What a fill has got so far.
#[derive(Debug, Clone)]
pub(crate) enum FillState {
    /// Waiting for the origin's headers.
    Starting,
    /// Headers in; `written` body bytes are in the staged file.
    Streaming {
        head: Arc<FillHead>,
        written: u64,
    },
    /// Committed: the whole body is in the staged file and in the store.
    Done {
        head: Arc<FillHead>,
        meta: Arc<StoredMeta>,
    },
    /// A revalidation found the stored copy current.
    NotModified,
    Failed(FillError),
}

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum FillError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("the object is larger than this rule's max_object_bytes ({0})")]
    TooLarge(u64),
    #[error("the origin body was cut short: {got} of {expected} bytes")]
    Truncated { got: u64, expected: u64 },
    #[error("the origin body does not match its Content-MD5")]
    Md5Mismatch,
    #[error("storing the copy failed: {0}")]
    Store(Arc<dyn std::error::Error + Send + Sync>),
    /// The fill's task went away before it reported an end (it panicked or was dropped).
    #[error("the fill ended without a result")]
    Ended,
}

impl FillError {
    pub(crate) fn store(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        FillError::Store(Arc::new(e))
    }
}

/// Headers of the object being filled.
#[derive(Debug)]
pub(crate) struct FillHead {
    pub content_type: String,
    pub content_length: Option<u64>,
    pub origin_last_modified: Option<String>,
    pub headers: Vec<(String, String)>,
}

/// An in-flight (or just finished) fill of one store path.
#[derive(Debug)]
pub(crate) struct Fill {
    state: watch::Sender<FillState>,
    /// The staged file, shared by readers; valid after commit renames or removes its path.
    file: Arc<std::fs::File>,
    pub started: Instant,
}

impl Fill {
    pub(crate) fn subscribe(&self) -> watch::Receiver<FillState> {
        self.state.subscribe()
    }

    /// Waits for the origin's headers (or the end).
    pub(crate) async fn head(&self) -> FillState {
        self.wait_for(|s| !matches!(s, FillState::Starting)).await
    }

    /// Waits for the end of the fill.
    pub(crate) async fn finished(&self) -> FillState {
        self.wait_for(|s| !matches!(s, FillState::Starting | FillState::Streaming { .. })).await
    }

    async fn wait_for(&self, done: impl FnMut(&FillState) -> bool) -> FillState {
        let mut rx = self.subscribe();
        let state = rx.wait_for(done).await;
        state.map_or(FillState::Failed(FillError::Ended), |s| s.clone())
    }

    /// The body bytes `start..end` as they arrive. `end` is exclusive; `None`: to the end.
    pub(crate) fn stream(
        &self,
        start: u64,
        end: Option<u64>,
    ) -> futures_util::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
        let rx = self.subscribe();
        let file = self.file.clone();
        futures_util::stream::unfold((rx, file, start), move |(mut rx, file, pos)| async move {
            // How far the body is known to go, once it is there.
            let avail = loop {
                let seen = match &*rx.borrow_and_update() {
                    FillState::Starting | FillState::NotModified => Ok((0, None)),
                    // The last byte is held back until the fill is verified and committed,
                    // so a client never receives a complete body that then fails its checks.
                    FillState::Streaming { written, head } => Ok((
                        head.content_length.map_or(*written, |l| (*written).min(l.saturating_sub(1))),
                        None,
                    )),
                    FillState::Done { meta, .. } => Ok((meta.length, Some(meta.length))),
                    FillState::Failed(e) => Err(e.to_string()),
                };
                let (avail, total) = match seen {
                    Ok(s) => s,
                    Err(e) => return Some((Err(std::io::Error::other(e)), (rx, file, u64::MAX))),
                };
                let limit = end.map_or(avail, |e| e.min(avail));
                if pos < limit {
                    break limit;
                }
                if pos == u64::MAX || end.is_some_and(|e| pos >= e) || total.is_some_and(|t| pos >= t) {
                    return None;
                }
                if rx.changed().await.is_err() {
                    return Some((
                        Err(std::io::Error::other("fill ended without a result")),
                        (rx, file, u64::MAX),
                    ));
                }
            };
            let n = (avail - pos).min(CHUNK as u64);
            let read = crate::objects::pread_blocking(file.clone(), pos, n).await;
            let next = if read.is_ok() { pos + n } else { u64::MAX };
            Some((read, (rx, file, next)))
        })
        .boxed()
    }
}

/// Joins the fill of `location`, or starts one. Returns the fill and whether this call started it.
pub(crate) fn join_or_start(
    mirror: &Arc<Mirror>,
    runtime: &Arc<RuleRuntime>,
    location: &Path,
    origin_path: String,
    ask: Ask,
) -> Result<(Arc<Fill>, bool), FillError> {
    let key = match &ask.validators {
        Some(_) => format!("revalidate:{location}"),
        None => location.to_string(),
    };
    let mut fills = mirror.fills.lock();
    if let Some(f) = fills.get(&key) {
        return Ok((f.clone(), false));
    }
    let staged = mirror.objects.temp_file().map_err(FillError::store)?;
    let file = Arc::new(staged.reopen().map_err(FillError::store)?);
    let (state, _) = watch::channel(FillState::Starting);
    let fill = Arc::new(Fill { state, file, started: Instant::now() });
    fills.insert(key.clone(), fill.clone());
    drop(fills);
    let job = Job {
        mirror: mirror.clone(),
        runtime: runtime.clone(),
        location: location.clone(),
        key,
        origin_path,
        ask,
        fill: fill.clone(),
    };
    // Its own task: the fill completes even if every client has gone.
    tokio::spawn(job.run(staged));
    Ok((fill, true))
}

struct Job {
    mirror: Arc<Mirror>,
    runtime: Arc<RuleRuntime>,
    location: Path,
    key: String,
    origin_path: String,
    ask: Ask,
    fill: Arc<Fill>,
}

impl Job {
    async fn run(self, staged: tempfile::NamedTempFile) {
        let rule = &self.runtime.rule;
        let result = self.fetch_and_store(rule, staged).await;
        let metrics = &self.mirror.metrics;
        match &result {
            Ok(FillState::Done { meta, .. }) => {
                metrics.fill_done(rule, self.fill.started.elapsed());
                self.mirror.mark_validated(&self.location);
                tracing::info!(rule = %rule.name, key = %self.location, bytes = meta.length, ms = self.fill.started.elapsed().as_millis() as u64, "Stored a copy from the origin.");
            }
            Ok(_) => self.mirror.mark_validated(&self.location),
            Err(e) => {
                metrics.fill_failed(rule);
                if matches!(e, FillError::Fetch(FetchError::NotFound)) && self.ask.validators.is_none() {
                    self.mirror.remember_missing(&self.location, rule.negative_ttl());
                }
                tracing::warn!(rule = %rule.name, key = %self.location, error = %e, "Fill failed; nothing stored.");
            }
        }
        self.fill.state.send_replace(result.unwrap_or_else(FillState::Failed));
        // Late joiners of a finished fill read the complete staged file; after a short while
        // the entry goes and requests find the stored copy instead.
        let mirror = self.mirror.clone();
        let (key, fill) = (self.key, self.fill);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut fills = mirror.fills.lock();
            if fills.get(&key).is_some_and(|f| Arc::ptr_eq(f, &fill)) {
                fills.remove(&key);
            }
        });
    }

    async fn fetch_and_store(
        &self,
        rule: &Rule,
        staged: tempfile::NamedTempFile,
    ) -> Result<FillState, FillError> {
        let metrics = &self.mirror.metrics;
        metrics.origin_fetch(rule);
        let fetched = self.runtime.client.fetch(rule, &self.origin_path, &self.ask).await;
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => {
                metrics.origin_status(rule, e.class());
                return Err(e.into());
            }
        };
        let mut response = fetched.response;
        metrics.origin_status(rule, if response.status().as_u16() == 304 { "3xx" } else { "2xx" });
        if response.status().as_u16() == 304 {
            return Ok(FillState::NotModified);
        }
        let headers = response.headers();
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let content_length = match text("content-length") {
            Some(v) => {
                Some(v.trim().parse::<u64>().map_err(|_| FetchError::Invalid("bad Content-Length".into()))?)
            }
            None => None,
        };
        let max = rule.spec.max_object_bytes;
        if content_length.is_some_and(|l| l > max) {
            return Err(FillError::TooLarge(max));
        }
        let content_md5 = if rule.spec.check_md5 {
            match text("content-md5") {
                Some(v) => Some(
                    base64::engine::general_purpose::STANDARD
                        .decode(v.trim())
                        .ok()
                        .filter(|d| d.len() == 16)
                        .ok_or(FillError::Md5Mismatch)?,
                ),
                None => None,
            }
        } else {
            None
        };
        let head = Arc::new(FillHead {
            content_type: text("content-type").unwrap_or_else(|| "application/octet-stream".into()),
            content_length,
            origin_last_modified: text("last-modified"),
            headers: STORED_HEADERS.iter().filter_map(|h| Some(((*h).to_owned(), text(h)?))).collect(),
        });
        let origin_etag = text("etag");
        self.fill.state.send_replace(FillState::Streaming { head: head.clone(), written: 0 });

        let mut sha = Sha256::new();
        let mut md5 = content_md5.as_ref().map(|_| Md5::new());
        let mut written = 0u64;
        loop {
            let chunk = match tokio::time::timeout(rule.idle_timeout(), response.chunk()).await {
                Err(_) => return Err(FetchError::Timeout.into()),
                Ok(Err(e)) => {
                    return Err(match content_length {
                        Some(expected) => FillError::Truncated { got: written, expected },
                        None => FetchError::Unreachable(e.to_string()).into(),
                    })
                }
                Ok(Ok(None)) => break,
                Ok(Ok(Some(c))) => c,
            };
            if written + chunk.len() as u64 > max {
                return Err(FillError::TooLarge(max));
            }
            if content_length.is_some_and(|l| written + chunk.len() as u64 > l) {
                return Err(FetchError::Invalid("more bytes than Content-Length".into()).into());
            }
            // A positional write of one network chunk into the page cache: microseconds, so
            // it is done here rather than paying a thread hop per chunk. The fsync, which can
            // block for long, runs on a blocking thread at commit.
            self.fill.file.write_all_at(&chunk, written).map_err(FillError::store)?;
            sha.update(&chunk);
            if let Some(m) = md5.as_mut() {
                m.update(&chunk);
            }
            written += chunk.len() as u64;
            metrics.origin_bytes(rule, chunk.len() as u64);
            self.fill.state.send_modify(|s| {
                if let FillState::Streaming { written: w, .. } = s {
                    *w = written;
                }
            });
        }
        if let Some(expected) = content_length {
            if written != expected {
                return Err(FillError::Truncated { got: written, expected });
            }
        }
        if let (Some(m), Some(want)) = (md5, content_md5) {
            if m.finalize()[..] != want[..] {
                return Err(FillError::Md5Mismatch);
            }
        }
        let digest = sha.finalize();
        let meta = StoredMeta {
            content_type: head.content_type.clone(),
            length: written,
            etag: crate::objects::strong_etag(&digest[..]),
            origin_etag,
            origin_last_modified: head.origin_last_modified.clone(),
            headers: head.headers.clone(),
            stored_at_ms: httpdns_core::clock::unix_ms(),
            location: None,
        };
        // Readers of this fill go on reading its file (the inode the copy now is), so an
        // eviction right after the commit cannot cut them: the copy needs no pin.
        self.mirror.objects.commit(&self.location, staged, &meta).await.map_err(FillError::store)?;
        Ok(FillState::Done { head, meta: Arc::new(meta) })
    }
}
