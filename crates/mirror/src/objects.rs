//! Stored copies, on the local disk or in any S3-compatible bucket (the `object_store` crate).
//!
//! One object holds one copy and its metadata, so a copy and its metadata can never disagree
//! or be half-written: `[body][metadata JSON][u64 LE JSON length]["HDNSMIR1"]`. A copy is
//! written to a temp file first (fsynced), and only then published: renamed into place on the
//! local disk (then the directory is fsynced), or uploaded with one atomic put or a multipart
//! upload that S3 makes visible only when complete. Nothing else ever writes to the object
//! paths, so whatever a reader finds there is complete.
//!
//! Store paths: `o/<path>` originals, `q/<path>/<query>` originals that a rule lets the query
//! select, `v/<path>/<canonical x-oss-process>` variants. Every segment goes through
//! `object_store`'s `PathPart`, which percent-encodes what a file system or S3 would treat
//! specially; [`crate::layout`] maps a store path to its file or S3 key, so that every valid
//! key has a place (a key and its "children", segments longer than a file name).

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::{Path, PathPart};
use object_store::{GetOptions, GetRange, ObjectStore};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use httpdns_net::sendfile::Budget;

use crate::cap::{Cap, Pin};
use crate::copy_headers::CopyHeaders;
use crate::hot::{HotBodies, HotCopy, Version};
use crate::layout;
use crate::store_io::{local_stream, read_local_meta, read_remote_meta, remote_head};
pub(crate) use crate::store_io::{pread, pread_blocking};

mod write;

pub(crate) const MAGIC: &[u8; 8] = b"HDNSMIR1";
pub(crate) const FOOTER: u64 = 16;
/// Largest metadata block accepted when reading (a corrupt length is not an allocation).
pub(crate) const MAX_META: u64 = 64 << 10;
/// Metadata of this many copies is remembered; beyond it the cache starts over.
const META_CACHE_ENTRIES: usize = 100_000;
/// Streamed reads and uploads move this much at a time.
pub(crate) const CHUNK: usize = 256 << 10;
/// Bytes read per step of a download streamed from a file: what a download its client does not
/// read holds (besides HTTP/2's send buffer), so small, at the cost of a thread hop per 64 KiB.
pub(crate) const STREAM_CHUNK: u64 = 64 << 10;
/// Ranges up to this size are read in one piece (memory: this much per such response).
pub(crate) const ONE_PIECE: u64 = 1 << 20;
/// Ranges up to this size are read without a thread hop.
pub(crate) const INLINE_READ: u64 = 64 << 10;
/// Largest body kept in memory (see [`Objects::with_memory`]).
pub const MEMORY_MAX_OBJECT: u64 = 1 << 20;

/// The cache of bodies in memory, off.
fn no_memory() -> HotBodies {
    HotBodies::new(0, 0)
}

/// Errors of the object layer.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("local store: {0}")]
    Io(#[from] std::io::Error),
    #[error("stored object {0} is corrupt: {1}")]
    Corrupt(String, &'static str),
}

/// What is kept with each copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMeta {
    pub content_type: String,
    pub length: u64,
    /// Our strong validator: `"<first 32 hex digits of the SHA-256 of the body>"`.
    pub etag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_last_modified: Option<String>,
    /// Headers from the origin that are replayed as they were (OSS's stored header list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    pub stored_at_ms: u64,
    /// The store path this copy was written at (older copies lack it): what a file or an
    /// S3 key whose name was hashed holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

impl StoredMeta {
    /// Metadata of a body we have whole (admin writes, variants): our ETag from its hash, no
    /// origin validators, stored now.
    pub fn for_body(content_type: &str, body: &[u8]) -> Self {
        Self {
            content_type: content_type.to_owned(),
            length: body.len() as u64,
            etag: strong_etag(&sha2::Sha256::digest(body)[..]),
            origin_etag: None,
            origin_last_modified: None,
            headers: Vec::new(),
            stored_at_ms: httpdns_core::clock::unix_ms(),
            location: None,
        }
    }

    /// `Last-Modified` to serve: the origin's when it sent one, else when it was stored.
    pub fn last_modified(&self) -> SystemTime {
        self.origin_last_modified
            .as_deref()
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .unwrap_or_else(|| SystemTime::UNIX_EPOCH + Duration::from_millis(self.stored_at_ms))
    }

    pub fn stored_at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.stored_at_ms)
    }
}

/// Our strong validator from a SHA-256 digest: its first 128 bits, quoted.
pub(crate) fn strong_etag(sha256: &[u8]) -> String {
    format!("\"{}\"", &hex::encode(sha256)[..32])
}

/// A copy found in the store, ready to be read.
#[derive(Debug, Clone)]
pub struct Found {
    pub meta: Arc<StoredMeta>,
    pub(crate) headers: Arc<CopyHeaders>,
    source: Source,
    /// Keeps a copy read from its file from eviction while the response streams.
    pin: Option<Arc<Pin>>,
}

impl Found {
    /// Bytes `start..end` of a body held in memory; `None` when the body is not in memory.
    pub(crate) fn memory_slice(&self, start: u64, end: u64) -> Option<Bytes> {
        match &self.source {
            Source::Memory(body) if start <= end && end <= body.len() as u64 => {
                Some(body.slice(start as usize..end as usize))
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
enum Source {
    /// An open file: reads cannot see a later replacement of the path.
    Local(Arc<std::fs::File>),
    Remote {
        location: Path,
        e_tag: Option<String>,
    },
    /// The whole body, held in memory ([`HotBodies`]) and confirmed current by the lookup.
    Memory(Bytes),
}

#[derive(Clone)]
struct CachedMeta {
    /// What the metadata was read at: file identity, size and mtime (local), entity tag (remote).
    version: Version,
    meta: Arc<StoredMeta>,
    headers: Arc<CopyHeaders>,
}

enum Backend {
    /// Copies in files under `root`, laid out by [`layout::local_file`].
    Local { root: PathBuf },
    /// Copies in a bucket, at [`layout::remote_key`].
    Remote(Arc<dyn ObjectStore>),
}

/// The store of copies. Shared behind an `Arc`.
pub struct Objects {
    backend: Backend,
    tmp_dir: PathBuf,
    /// Parsed metadata by store path, bounded (`quick_cache`'s CLOCK-Pro evicts the least
    /// useful); an entry is used only at the version it was read at.
    meta: quick_cache::sync::Cache<String, CachedMeta>,
    hot: HotBodies,
    /// Large bodies of local copies held in memory are file-backed within this budget (0:
    /// never), so plain connections send them with `sendfile`.
    files: Arc<Budget>,
    /// The byte cap of local copies (`HTTPDNS_MIRROR_MAX_BYTES`); `None`: no cap.
    cap: Option<Arc<Cap>>,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects").field("backend", &self.backend_name()).finish_non_exhaustive()
    }
}

/// A store path from segments (each one percent-encoded as needed by `PathPart`).
pub fn store_path<'a>(namespace: &'a str, segments: impl IntoIterator<Item = &'a str>) -> Path {
    Path::from_iter(
        std::iter::once(PathPart::from(namespace)).chain(segments.into_iter().map(PathPart::from)),
    )
}

impl Objects {
    /// Copies on the local disk under `root`; fills are staged in `tmp_dir` (same file system,
    /// so publishing is a rename). Staging files a crash left in `tmp_dir` are removed.
    pub fn local(root: &std::path::Path, tmp_dir: PathBuf) -> Result<Self, ObjectsError> {
        std::fs::create_dir_all(root)?;
        Self::clear_staging(&tmp_dir)?;
        let root = std::fs::canonicalize(root)?;
        Ok(Self {
            backend: Backend::Local { root },
            tmp_dir,
            meta: quick_cache::sync::Cache::new(META_CACHE_ENTRIES),
            hot: no_memory(),
            files: Budget::new(0),
            cap: None,
        })
    }

    /// Copies in a remote object store (S3-compatible); fills are staged in `tmp_dir`, which
    /// is cleared of a crash's leftovers.
    pub fn remote(store: Arc<dyn ObjectStore>, tmp_dir: PathBuf) -> Result<Self, ObjectsError> {
        Self::clear_staging(&tmp_dir)?;
        Ok(Self {
            backend: Backend::Remote(store),
            tmp_dir,
            meta: quick_cache::sync::Cache::new(META_CACHE_ENTRIES),
            hot: no_memory(),
            files: Budget::new(0),
            cap: None,
        })
    }

    fn clear_staging(tmp_dir: &std::path::Path) -> Result<(), ObjectsError> {
        std::fs::create_dir_all(tmp_dir)?;
        let n = layout::clear_staging(tmp_dir)?;
        if n > 0 {
            tracing::info!(files = n, dir = %tmp_dir.display(), "Removed staging files of interrupted fills.");
        }
        Ok(())
    }

    /// Keeps bodies of small copies in memory, up to `budget` bytes in all and
    /// [`MEMORY_MAX_OBJECT`] (or a sixteenth of the budget) each. Every hit still asks the
    /// store whether the copy changed; see [`HotBodies`].
    pub fn with_memory(mut self, budget: u64) -> Self {
        self.hot = HotBodies::new(budget, MEMORY_MAX_OBJECT);
        self
    }

    /// Bodies above 64 KiB of local copies held in memory become
    /// [file-backed](httpdns_net::sendfile), at most `open_files` at once (each keeps its file
    /// open); plain connections then send them with `sendfile`. 0: never. A body read for one
    /// response is not: a read into a buffer followed by a `sendfile` measured slower than the
    /// read and a write (docs/benchmarks.md).
    pub fn with_sendfile(mut self, open_files: usize) -> Self {
        self.files = Budget::new(open_files);
        self
    }

    /// Caps local copies at `max_bytes` (see [`crate::cap`]): the copies on disk are counted
    /// now, and removed, least recently used first, if they are already over it. A bucket's
    /// copies are governed by its lifecycle rules, not by this cap.
    pub fn with_cap(mut self, max_bytes: u64) -> Result<Self, ObjectsError> {
        let Backend::Local { root } = &self.backend else {
            return Err(ObjectsError::Io(std::io::Error::other(
                "a byte cap applies to the local store only; an S3 store's copies follow the bucket's lifecycle rules",
            )));
        };
        let (cap, evict) = Cap::scan(max_bytes, root)?;
        if !evict.is_empty() {
            tracing::info!(
                copies = evict.len(),
                max_bytes,
                "Evicting copies to get under the store's byte cap."
            );
        }
        cap.remove_all(&evict);
        tracing::info!(bytes = cap.bytes(), max_bytes, "Local store capped.");
        self.cap = Some(cap);
        Ok(self)
    }

    /// The byte cap, when there is one (its metrics, its figures).
    pub fn cap(&self) -> Option<&Arc<Cap>> {
        self.cap.as_ref()
    }

    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Local { .. } => "local",
            Backend::Remote(_) => "s3",
        }
    }

    /// A new temp file for staging a fill, removed when dropped unless persisted.
    pub fn temp_file(&self) -> std::io::Result<tempfile::NamedTempFile> {
        tempfile::Builder::new().prefix("fill-").tempfile_in(&self.tmp_dir)
    }

    /// Looks a copy up. `None` when there is none.
    pub async fn find(&self, location: &Path) -> Result<Option<Found>, ObjectsError> {
        match &self.backend {
            Backend::Local { root } => {
                let file_path = layout::local_file(root, location);
                if self.hot.enabled() {
                    // One `stat` tells whether the body in memory is still the file's.
                    match std::fs::metadata(&file_path) {
                        Ok(stat) if stat.is_file() => {
                            if let Some(found) = self.hot_found(location, &Version::of_file(&stat)) {
                                if let Some(cap) = &self.cap {
                                    cap.touch(&file_path);
                                }
                                return Ok(Some(found));
                            }
                        }
                        Ok(_) => return Ok(None),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                            self.hot.remove(location.as_ref());
                            return Ok(None);
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                let file = match std::fs::File::open(&file_path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                let stat = file.metadata()?;
                if !stat.is_file() {
                    return Ok(None);
                }
                let version = Version::of_file(&stat);
                let cached = match self.cached(location, &version) {
                    Some(c) => c,
                    None => {
                        let (file, loc) = (file.try_clone()?, location.to_string());
                        let meta = tokio::task::spawn_blocking(move || read_local_meta(&file, &loc))
                            .await
                            .map_err(|e| std::io::Error::other(e.to_string()))??;
                        self.remember(location, version.clone(), meta)
                    }
                };
                let file = Arc::new(file);
                if self.hot.admits(cached.meta.length) {
                    let len = cached.meta.length;
                    // Into a buffer of exactly its size (not a pooled one): it stays in memory,
                    // and the budget counts its length. A large body keeps its file open too:
                    // plain connections send it from the file (the body starts the file).
                    let body = if len <= INLINE_READ {
                        pread(&file, 0, len)?
                    } else {
                        let files = self.files.clone();
                        tokio::task::spawn_blocking(move || -> std::io::Result<Bytes> {
                            let mut buf = vec![0u8; len as usize];
                            file.read_exact_at(&mut buf, 0)?;
                            Ok(files.file_backed(buf, file, 0))
                        })
                        .await
                        .map_err(|e| std::io::Error::other(e.to_string()))??
                    };
                    if let Some(cap) = &self.cap {
                        cap.touch(&file_path);
                    }
                    return Ok(Some(self.keep_hot(location, version, cached, body)));
                }
                let pin = self.cap.as_ref().and_then(|c| c.touch_and_pin(&file_path)).map(Arc::new);
                Ok(Some(Found {
                    meta: cached.meta,
                    headers: cached.headers,
                    source: Source::Local(file),
                    pin,
                }))
            }
            Backend::Remote(store) => {
                let Some((key, head)) = remote_head(store.as_ref(), location).await? else { return Ok(None) };
                let version = Version::Remote(
                    head.e_tag.clone().unwrap_or_else(|| format!("{}:{}", head.size, head.last_modified)),
                );
                if let Some(found) = self.hot_found(location, &version) {
                    return Ok(Some(found));
                }
                let cached = match self.cached(location, &version) {
                    Some(c) => c,
                    None => {
                        let meta = read_remote_meta(store.as_ref(), &key, head.size).await?;
                        self.remember(location, version.clone(), meta)
                    }
                };
                if self.hot.admits(cached.meta.length) {
                    // The body of exactly the version the HEAD saw, or nothing kept.
                    let options = GetOptions {
                        if_match: head.e_tag.clone(),
                        range: Some(GetRange::Bounded(0..cached.meta.length)),
                        ..Default::default()
                    };
                    // Replaced since the HEAD (the condition failed) or cut short: served from
                    // the store as before, which reports the change to the client.
                    let got = match store.get_opts(&key, options).await {
                        Ok(got) => got.bytes().await.ok(),
                        Err(_) => None,
                    };
                    if let Some(body) = got.filter(|b| b.len() as u64 == cached.meta.length) {
                        return Ok(Some(self.keep_hot(location, version, cached, body)));
                    }
                }
                Ok(Some(Found {
                    meta: cached.meta,
                    headers: cached.headers,
                    source: Source::Remote { location: key, e_tag: head.e_tag },
                    pin: None,
                }))
            }
        }
    }

    /// A copy on the local disk whose body is in memory and still the file's (one `stat`),
    /// without waiting; `None` for anything else, which [`Objects::find`] then looks up.
    pub fn find_in_memory(&self, location: &Path) -> Option<Found> {
        let Backend::Local { root } = &self.backend else { return None };
        if !self.hot.enabled() {
            return None;
        }
        let file = layout::local_file(root, location);
        let stat = std::fs::metadata(&file).ok()?;
        if !stat.is_file() {
            return None;
        }
        let found = self.hot_found(location, &Version::of_file(&stat))?;
        if let Some(cap) = &self.cap {
            cap.touch(&file);
        }
        Some(found)
    }

    fn hot_found(&self, location: &Path, version: &Version) -> Option<Found> {
        let hot = self.hot.get(location.as_ref(), version)?;
        Some(Found { meta: hot.meta, headers: hot.headers, source: Source::Memory(hot.body), pin: None })
    }

    fn keep_hot(&self, location: &Path, version: Version, cached: CachedMeta, body: Bytes) -> Found {
        let copy = HotCopy { meta: cached.meta, headers: cached.headers, body };
        self.hot.insert(location.as_ref(), version, copy.clone());
        Found { meta: copy.meta, headers: copy.headers, source: Source::Memory(copy.body), pin: None }
    }

    fn cached(&self, location: &Path, version: &Version) -> Option<CachedMeta> {
        self.meta.get(location.as_ref()).filter(|c| c.version == *version)
    }

    fn remember(&self, location: &Path, version: Version, meta: StoredMeta) -> CachedMeta {
        let headers = Arc::new(CopyHeaders::new(&meta));
        let cached = CachedMeta { version, meta: Arc::new(meta), headers };
        self.meta.insert(location.to_string(), cached.clone());
        cached
    }

    fn forget(&self, location: &Path) {
        self.meta.remove(location.as_ref());
        self.hot.remove(location.as_ref());
    }

    /// Streams bytes `start..end` of a found copy's body, a chunk at a time.
    pub fn read(
        &self,
        found: &Found,
        start: u64,
        end: u64,
    ) -> futures_util::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
        match &found.source {
            Source::Local(file) => local_stream(file.clone(), start, end, found.pin.clone()),
            Source::Memory(body) => {
                let part = body.slice(start as usize..end as usize);
                futures_util::stream::once(async move { Ok(part) }).boxed()
            }
            Source::Remote { location, e_tag } => {
                let Backend::Remote(store) = &self.backend else {
                    unreachable!("remote source, remote backend")
                };
                let (store, location) = (store.clone(), location.clone());
                let options = GetOptions {
                    if_match: e_tag.clone(),
                    range: Some(GetRange::Bounded(start..end)),
                    ..Default::default()
                };
                futures_util::stream::once(async move { store.get_opts(&location, options).await })
                    .flat_map(|r| match r {
                        Ok(got) => got.into_stream().map(|c| c.map_err(std::io::Error::other)).boxed(),
                        Err(e) => {
                            futures_util::stream::once(async move { Err(std::io::Error::other(e)) }).boxed()
                        }
                    })
                    .boxed()
            }
        }
    }

    /// Bytes `start..end` in one piece when the copy is on the local disk and the range is at
    /// most [`ONE_PIECE`]: the response then goes out in one write. Up to [`INLINE_READ`] the
    /// read is done in place: a positional read of a few pages from the page cache takes
    /// microseconds, less than the hop to a blocking thread would.
    pub async fn read_small(
        &self,
        found: &Found,
        start: u64,
        end: u64,
    ) -> Option<Result<Bytes, std::io::Error>> {
        let file = match &found.source {
            Source::Memory(body) => return Some(Ok(body.slice(start as usize..end as usize))),
            Source::Local(file) => file,
            Source::Remote { .. } => return None,
        };
        let len = end - start;
        if len > ONE_PIECE {
            return None;
        }
        if len <= INLINE_READ {
            return Some(pread(file, start, len));
        }
        Some(pread_blocking(file.clone(), start, len).await)
    }

    /// Reads a whole (small) body into memory: image originals for variants.
    pub async fn read_all(&self, found: &Found) -> Result<Vec<u8>, std::io::Error> {
        let mut out = Vec::with_capacity(found.meta.length as usize);
        let mut stream = self.read(found, 0, found.meta.length);
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }
}
