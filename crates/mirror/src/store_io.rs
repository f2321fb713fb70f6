//! The object layer's free functions: metadata trailers read and checked, positional reads
//! into pooled buffers, streams from open files, the S3 side (the version-1 move, multipart
//! uploads). Split from `objects.rs`, which holds the store itself.

use parking_lot::Mutex;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::cap::Pin;
use crate::layout;
use crate::objects::{
    ObjectsError, StoredMeta, FOOTER, INLINE_READ, MAGIC, MAX_META, ONE_PIECE, STREAM_CHUNK,
};

/// The key and `HEAD` of a store path's copy in a bucket. A copy still at its version-1 key is
/// moved to the current one first (copy, then delete: a reader in between finds one or the
/// other, and another replica doing the same move is harmless).
/// How long the look for a copy in the version-1 remote layout may take (see `remote_head`).
const V1_PROBE: Duration = Duration::from_secs(1);

pub(crate) async fn remote_head(
    store: &dyn ObjectStore,
    location: &Path,
) -> Result<Option<(Path, object_store::ObjectMeta)>, ObjectsError> {
    let key = layout::remote_key(location);
    match store.head(&key).await {
        Ok(h) => return Ok(Some((key, h))),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let Some(old) = layout::remote_key_v1(location) else { return Ok(None) };
    // The store just answered for the current key, so an error here is about the old key
    // itself: on a store built on a file system it is the directory of the children of this
    // key (`a.jpg` when `a.jpg/b/~` exists). Either way there is no old copy to move. Such a
    // store answers that directory with 500s, which object_store retries for about ten
    // seconds: the probe only looks for a copy to migrate, so it gets a bound, and a miss
    // never waits longer than that for it (past the bound: no old copy, the origin fills).
    match tokio::time::timeout(V1_PROBE, store.head(&old)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) | Err(_) => return Ok(None),
    }
    match store.copy(&old, &key).await {
        Ok(()) => {
            let _ = store.delete(&old).await;
        }
        // Gone meanwhile (purged, or moved by another replica): look once more below.
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    match store.head(&key).await {
        Ok(h) => Ok(Some((key, h))),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Runs blocking file work off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}

pub(crate) fn read_local_meta(file: &std::fs::File, location: &str) -> Result<StoredMeta, ObjectsError> {
    let corrupt = |why| ObjectsError::Corrupt(location.to_owned(), why);
    let size = file.metadata()?.len();
    let footer = pread(file, size.checked_sub(FOOTER).ok_or(corrupt("shorter than its footer"))?, FOOTER)?;
    let json_at = meta_range(size, &footer).map_err(corrupt)?;
    let json = pread(file, json_at.start, json_at.end - json_at.start)?;
    decode_meta(&json, size, json_at.end - json_at.start).map_err(corrupt)
}

pub(crate) async fn read_remote_meta(
    store: &dyn ObjectStore,
    location: &Path,
    size: u64,
) -> Result<StoredMeta, ObjectsError> {
    let corrupt = |why| ObjectsError::Corrupt(location.to_string(), why);
    let footer_at = size.checked_sub(FOOTER).ok_or(corrupt("shorter than its footer"))?;
    let footer = store.get_range(location, footer_at..size).await?;
    let json_at = meta_range(size, &footer).map_err(corrupt)?;
    let json_len = json_at.end - json_at.start;
    let json = store.get_range(location, json_at).await?;
    decode_meta(&json, size, json_len).map_err(corrupt)
}

/// Where the metadata JSON sits in an object of `size` bytes ending with `footer`.
fn meta_range(size: u64, footer: &[u8]) -> Result<std::ops::Range<u64>, &'static str> {
    if footer.len() != FOOTER as usize || &footer[8..] != MAGIC {
        return Err("bad footer");
    }
    let json_len = u64::from_le_bytes(footer[..8].try_into().map_err(|_| "bad footer")?);
    if json_len > MAX_META || json_len + FOOTER > size {
        return Err("bad metadata length");
    }
    Ok(size - FOOTER - json_len..size - FOOTER)
}

fn decode_meta(json: &[u8], size: u64, json_len: u64) -> Result<StoredMeta, &'static str> {
    let meta: StoredMeta = serde_json::from_slice(json).map_err(|_| "metadata is not JSON")?;
    if meta.length + json_len + FOOTER != size {
        return Err("body length disagrees with metadata");
    }
    Ok(meta)
}

/// `len` bytes of `file` at `at`. Reads above [`INLINE_READ`] go into pooled buffers: a
/// fresh megabyte per response was mostly page faults and zeroing (a third of the 1 MiB hit
/// path's time in a profile).
pub(crate) fn pread(file: &std::fs::File, at: u64, len: u64) -> std::io::Result<Bytes> {
    ReadBuf::new(len).fill(file, at)
}

/// Where a read lands: a buffer of its own up to [`INLINE_READ`], else one from the pool.
enum ReadBuf {
    Inline(Vec<u8>),
    Pooled(Pooled),
}

impl ReadBuf {
    fn new(len: u64) -> Self {
        if len <= INLINE_READ {
            ReadBuf::Inline(vec![0u8; len as usize])
        } else {
            ReadBuf::Pooled(Pooled::take(len as usize))
        }
    }

    fn fill(self, file: &std::fs::File, at: u64) -> std::io::Result<Bytes> {
        match self {
            ReadBuf::Inline(mut buf) => file.read_exact_at(&mut buf, at).map(|()| Bytes::from(buf)),
            ReadBuf::Pooled(mut buf) => {
                file.read_exact_at(&mut buf.0, at)?;
                Ok(Bytes::from_owner(buf))
            }
        }
    }
}

/// A read buffer that goes back to a small pool when the last `Bytes` of it is dropped
/// (after hyper has written it), so large reads reuse warm, already-mapped memory.
struct Pooled(Vec<u8>);

/// Buffers kept for reuse; beyond this they are freed.
const POOL_BUFFERS: usize = 64;
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

impl Pooled {
    fn take(len: usize) -> Self {
        let reused = POOL.lock().pop();
        let mut buf = reused.unwrap_or_default();
        // Only growth is zeroed; a reused buffer of the usual size is not touched.
        buf.resize(len, 0);
        Self(buf)
    }
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        if buf.capacity() <= ONE_PIECE as usize {
            let mut pool = POOL.lock();
            if pool.len() < POOL_BUFFERS {
                pool.push(buf);
            }
        }
    }
}

/// [`pread`] on a blocking thread, into a buffer allocated here, on the runtime's thread.
///
/// Not on the blocking thread: what a thread allocates stays in its allocator heap until every
/// block of it is freed, and blocking threads come and go (up to 512 in a burst, gone after
/// 10 s idle). A chunk a stalled download holds for minutes would pin a dying thread's pages;
/// the never-reading flood (docs/reliability.md) left 168 MiB so after its clients had gone.
pub(crate) async fn pread_blocking(file: Arc<std::fs::File>, at: u64, len: u64) -> std::io::Result<Bytes> {
    let buf = ReadBuf::new(len);
    tokio::task::spawn_blocking(move || buf.fill(&file, at))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}

/// Streams `start..end` of an open file, one chunk read (on a blocking thread) each time the
/// connection asks for more. Nothing is read ahead: a client that stops reading holds one
/// chunk and no thread, however many such streams are open (a read-ahead channel held four
/// chunks and a blocking thread per stalled download).
pub(crate) fn local_stream(
    file: Arc<std::fs::File>,
    start: u64,
    end: u64,
    pin: Option<Arc<Pin>>,
) -> futures_util::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
    futures_util::stream::unfold(Some((file, start)), move |next| {
        // The pin lives as long as the stream: the copy stays until the response is sent.
        let _ = &pin;
        async move {
            let (file, at) = next?;
            if at >= end {
                return None;
            }
            let n = (end - at).min(STREAM_CHUNK);
            match pread_blocking(file.clone(), at, n).await {
                Ok(bytes) => Some((Ok(bytes), Some((file, at + n)))),
                Err(e) => Some((Err(e), None)),
            }
        }
    })
    .boxed()
}

/// Uploads a staged file: one put when small, else a multipart upload (atomic on completion;
/// aborted on any error so no part lingers).
pub(crate) async fn upload(
    store: &dyn ObjectStore,
    location: &Path,
    staged: tempfile::NamedTempFile,
) -> Result<(), ObjectsError> {
    const PART: u64 = 8 << 20;
    let file = Arc::new(staged.reopen()?);
    let size = file.metadata()?.len();
    if size <= PART {
        let body = pread_blocking(file, 0, size).await?;
        store.put(location, PutPayload::from(body)).await?;
        return Ok(());
    }
    let mut upload = object_store::WriteMultipart::new_with_chunk_size(
        store.put_multipart(location).await?,
        PART as usize,
    );
    let mut at = 0u64;
    let result: Result<(), ObjectsError> = async {
        while at < size {
            let n = (size - at).min(PART);
            let chunk = pread_blocking(file.clone(), at, n).await?;
            upload.wait_for_capacity(2).await?;
            upload.put(chunk);
            at += n;
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => {
            upload.finish().await?;
            Ok(())
        }
        Err(e) => {
            let _ = upload.abort().await;
            Err(e)
        }
    }
}
