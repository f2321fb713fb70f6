//! Bodies in memory that are also bytes of an open file, and the plain-TCP write path that
//! sends them with `sendfile(2)` instead of copying them out of memory.
//!
//! hyper owns an HTTP connection and writes whatever a response body yields; it cannot be
//! handed a file. A large mirror hit is a body held in memory that is also a span of an open
//! file, so such a body is registered here by its address (a [`Budget::file_backed`] `Bytes`).
//! When a plain connection's write meets a buffer inside a registered body, the stream sends
//! that span from the file (page cache to socket buffers by reference) instead of copying it
//! from user space: the copy was 41% of the gateway's CPU on a 1 MiB hit (docs/benchmarks.md).
//!
//! Whatever else sees such a buffer (TLS, HTTP/2 frames built in the codec's own buffer, a
//! small remainder, a copy) reads the memory, which holds the same bytes: the file is never
//! changed in place (every store write is a rename over it), and the registration holds it open,
//! so a path replaced or removed since keeps its old inode for as long as the body lives. The
//! path changes how bytes travel, never which bytes a client gets; if `sendfile` fails on a span
//! (a file system without it, a file cut behind the store's back), the span is forgotten and
//! its bytes go from memory.
//!
//! A body whose file's pages were evicted from the page cache is read from the disk by
//! `sendfile` on the connection's thread (as nginx's `sendfile` without `aio` would); hot
//! bodies are ones read recently, and `HTTPDNS_MIRROR_SENDFILE=false` writes them from memory.

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// Bodies shorter than this are plain memory: for them one `writev` of head and body beats a
/// send of the head and a `sendfile` of the body.
pub const MIN_BODY: usize = 64 << 10;
/// Buffers shorter than this are written from memory without a lookup: the head of a response,
/// or the last bytes of a body a `sendfile` left.
const MIN_LOOKUP: usize = 16 << 10;

/// Registered bodies by start address. Process-wide because addresses are: the write path
/// sees only a buffer, whichever [`Budget`] registered it.
static SPANS: RwLock<BTreeMap<usize, Span>> = RwLock::new(BTreeMap::new());
/// Bodies in [`SPANS`]: while 0 (no mirror, or nothing large in memory), writes skip the lock.
static REGISTERED: AtomicUsize = AtomicUsize::new(0);

struct Span {
    end: usize,
    file: Arc<File>,
    /// The file offset of the body's first byte.
    offset: u64,
}

/// How many bodies one owner (a mirror store) may have registered at once: each keeps its
/// file open, and the process's descriptors are shared with its connections. Past it, bodies
/// are plain memory.
#[derive(Debug)]
pub struct Budget {
    held: AtomicUsize,
    limit: usize,
}

impl Budget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { held: AtomicUsize::new(0), limit })
    }

    /// Bodies registered now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// `body`, which must be the bytes of `file` from `offset` (and stay so while it lives),
    /// as a `Bytes` that plain connections send from the file. Short bodies, and any past the
    /// limit, are plain memory.
    pub fn file_backed(self: &Arc<Self>, body: Vec<u8>, file: Arc<File>, offset: u64) -> Bytes {
        if body.len() < MIN_BODY || !self.reserve() {
            return Bytes::from(body);
        }
        // A boxed slice's bytes stay at one address while it lives, wherever it is moved.
        let body = body.into_boxed_slice();
        let start = body.as_ptr() as usize;
        let span = Span { end: start + body.len(), file, offset };
        let before = SPANS.write().insert(start, span);
        debug_assert!(before.is_none(), "two live bodies at one address");
        REGISTERED.fetch_add(1, Ordering::Relaxed);
        Bytes::from_owner(Registered { body, start, budget: self.clone() })
    }

    fn reserve(&self) -> bool {
        let limit = self.limit;
        self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < limit).then_some(n + 1)).is_ok()
    }
}

/// A registered body: unregistered before its memory is freed, so an address in the table is
/// always a live body's (another buffer at a freed address is never taken for it).
struct Registered {
    body: Box<[u8]>,
    start: usize,
    budget: Arc<Budget>,
}

impl AsRef<[u8]> for Registered {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        forget(self.start);
        self.budget.held.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Takes the body at `start` out of the table (when dropped, or when its file failed a send).
fn forget(start: usize) {
    if SPANS.write().remove(&start).is_some() {
        REGISTERED.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The body's start, its file and the file offset of `buf`, when `buf` lies inside a
/// registered body.
fn span_of(buf: &[u8]) -> Option<(usize, Arc<File>, u64)> {
    let at = buf.as_ptr() as usize;
    let spans = SPANS.read();
    let (&start, span) = spans.range(..=at).next_back()?;
    (at + buf.len() <= span.end).then(|| (start, span.file.clone(), span.offset + (at - start) as u64))
}

/// How a plain connection writes `bufs`.
pub(crate) enum Plan {
    /// From memory, all of them.
    Memory,
    /// The first `n` from memory, with `MSG_MORE`: a file span follows, and the head should
    /// leave in the same segment as its start.
    Before(usize),
    /// The first buffer (after any empty ones), from the file of the body starting at `body`.
    File { body: usize, file: Arc<File>, offset: u64, len: usize },
}

pub(crate) fn plan(bufs: &[IoSlice<'_>]) -> Plan {
    if REGISTERED.load(Ordering::Relaxed) == 0 {
        return Plan::Memory;
    }
    for (i, buf) in bufs.iter().enumerate() {
        if buf.len() < MIN_LOOKUP {
            continue;
        }
        if let Some((body, file, offset)) = span_of(buf) {
            return if bufs[..i].iter().all(|b| b.is_empty()) {
                Plan::File { body, file, offset, len: buf.len() }
            } else {
                Plan::Before(i)
            };
        }
    }
    Plan::Memory
}

/// After `sendfile` failed on the body at `body` (not for want of socket space): the body is
/// sent from memory from now on, this write included.
pub(crate) fn failed(body: usize, error: &io::Error) {
    forget(body);
    tracing::warn!(%error, "sendfile failed; this body is written from memory (HTTPDNS_MIRROR_SENDFILE=false turns sendfile off).");
}

/// Whether a failed send is the connection's (the client went away), not the file's.
pub(crate) fn is_socket_error(error: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(error.kind(), BrokenPipe | ConnectionReset | ConnectionAborted | NotConnected | TimedOut)
}

/// One `sendfile` of up to `len` bytes of `file` at `offset` to `tcp`, or `WouldBlock`.
pub(crate) fn send_span(
    tcp: &tokio::net::TcpStream,
    file: &File,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut at = offset;
    match rustix::fs::sendfile(tcp, file, Some(&mut at), len)? {
        // The file is shorter than the body it was read into: it was cut behind the store's
        // back. The connection fails rather than send other bytes than the length promised.
        0 => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a stored file is shorter than its body")),
        n => Ok(n),
    }
}

/// One `sendmsg` of `bufs` with `MSG_MORE`, or `WouldBlock`.
pub(crate) fn send_more(tcp: &tokio::net::TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    use rustix::net::{SendAncillaryBuffer, SendFlags};
    let flags = SendFlags::MORE | SendFlags::NOSIGNAL;
    Ok(rustix::net::sendmsg(tcp, bufs, &mut SendAncillaryBuffer::default(), flags)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn file_of(bytes: &[u8]) -> Arc<File> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        Arc::new(f)
    }

    #[test]
    fn a_registered_body_maps_its_slices_to_file_offsets() {
        let budget = Budget::new(4);
        let body = vec![1u8; 200_000];
        let bytes = budget.file_backed(body, file_of(&[0; 10]), 7);
        assert_eq!(budget.held(), 1);
        let inner = bytes.slice(50_000..120_000);
        let (_, _, offset) = span_of(&inner).expect("a slice of a registered body");
        assert_eq!(offset, 7 + 50_000);
        let Plan::File { offset, len, .. } = plan(&[IoSlice::new(&inner)]) else {
            panic!("sent from the file")
        };
        assert_eq!((offset, len), (50_007, 70_000));
        let head = b"HTTP/1.1 200 OK\r\n\r\n";
        assert!(matches!(plan(&[IoSlice::new(head), IoSlice::new(&inner)]), Plan::Before(1)));
        // The last bytes of a body are written from memory.
        assert!(matches!(plan(&[IoSlice::new(&bytes[199_000..])]), Plan::Memory));
        let start = bytes.as_ptr() as usize;
        drop(bytes);
        assert!(span_of(&inner).is_some(), "a slice keeps the body registered");
        drop(inner);
        assert!(!SPANS.read().contains_key(&start), "unregistered when the last clone goes");
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn past_the_budget_bodies_are_plain_memory() {
        let budget = Budget::new(1);
        let file = file_of(b"x");
        let first = budget.file_backed(vec![4u8; MIN_BODY], file.clone(), 0);
        let second = budget.file_backed(vec![5u8; MIN_BODY], file.clone(), 0);
        assert!(span_of(&first).is_some() && span_of(&second).is_none());
        drop(first);
        let third = budget.file_backed(vec![6u8; MIN_BODY], file, 0);
        assert!(span_of(&third).is_some(), "a freed place is taken again");
        let none = Budget::new(0).file_backed(vec![7u8; MIN_BODY], file_of(b"x"), 0);
        assert!(span_of(&none).is_none() && none.len() == MIN_BODY);
    }

    #[test]
    fn a_failed_body_is_written_from_memory_from_then_on() {
        let budget = Budget::new(4);
        let bytes = budget.file_backed(vec![8u8; MIN_BODY], file_of(b""), 0);
        let Plan::File { body, .. } = plan(&[IoSlice::new(&[]), IoSlice::new(&bytes)]) else {
            panic!("empty buffers before a span do not hold it back")
        };
        failed(body, &io::Error::from(io::ErrorKind::UnexpectedEof));
        assert!(matches!(plan(&[IoSlice::new(&bytes)]), Plan::Memory));
        drop(bytes);
        assert_eq!(budget.held(), 0, "its place in the budget is freed when it goes");
    }

    #[test]
    fn short_bodies_and_other_memory_are_not_spans() {
        let short = Budget::new(4).file_backed(vec![2u8; MIN_BODY - 1], file_of(b"x"), 0);
        assert!(span_of(&short).is_none());
        let other = vec![3u8; 300_000];
        assert!(matches!(plan(&[IoSlice::new(&other)]), Plan::Memory));
    }
}
