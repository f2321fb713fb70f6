//! Bodies of small copies kept in memory.
//!
//! A body here is served only after the store has confirmed, for that very request, that the
//! copy is still the same version: a `stat` of the file (inode, size, mtime), or the `HEAD` a
//! remote lookup makes anyway (entity tag). A purge, a refill or another replica's write is
//! therefore seen at once; what the cache saves is opening and reading the file (three system
//! calls and a copy per hit), or the remote `GET`. Bounded by total bytes; eviction is CLOCK
//! (second chance), so a body asked for since the hand last passed it stays.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use crate::copy_headers::CopyHeaders;
use crate::objects::StoredMeta;

/// What a copy was read at: the file's identity, size and mtime, or the remote entity tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Version {
    Local { inode: u64, len: u64, mtime_ns: i128 },
    Remote(String),
}

impl Version {
    pub(crate) fn of_file(stat: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let mtime_ns = i128::from(stat.mtime()) * 1_000_000_000 + i128::from(stat.mtime_nsec());
        Version::Local { inode: stat.ino(), len: stat.len(), mtime_ns }
    }
}

/// A body held in memory with its metadata.
#[derive(Debug, Clone)]
pub(crate) struct HotCopy {
    pub meta: Arc<StoredMeta>,
    pub headers: Arc<CopyHeaders>,
    pub body: Bytes,
}

struct Slot {
    version: Version,
    copy: HotCopy,
    referenced: bool,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<String, Slot>,
    /// The clock: keys in insertion order. A key may be here after its slot was removed
    /// (purges); such entries are skipped, and the ring is rebuilt when they pile up.
    ring: VecDeque<String>,
    bytes: u64,
}

/// The bodies in memory. `budget` 0 turns the cache off.
pub(crate) struct HotBodies {
    inner: Mutex<Inner>,
    budget: u64,
    max_object: u64,
}

impl HotBodies {
    /// At most `budget` bytes of bodies, each at most a sixteenth of it and at most
    /// `max_object`, so one object cannot take the whole cache.
    pub(crate) fn new(budget: u64, max_object: u64) -> Self {
        Self { inner: Mutex::default(), budget, max_object: max_object.min(budget / 16) }
    }

    /// Whether a body of `len` bytes would be kept.
    pub(crate) fn admits(&self, len: u64) -> bool {
        len <= self.max_object && self.budget > 0
    }

    pub(crate) fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// The body of `key` when it is the version the store has now.
    pub(crate) fn get(&self, key: &str, version: &Version) -> Option<HotCopy> {
        let mut inner = self.inner.lock();
        let slot = inner.slots.get_mut(key).filter(|s| s.version == *version)?;
        slot.referenced = true;
        Some(slot.copy.clone())
    }

    pub(crate) fn insert(&self, key: &str, version: Version, copy: HotCopy) {
        let len = copy.body.len() as u64;
        if !self.admits(len) {
            return;
        }
        let mut inner = self.inner.lock();
        let slot = Slot { version, copy, referenced: false };
        match inner.slots.insert(key.to_owned(), slot) {
            Some(old) => inner.bytes -= old.copy.body.len() as u64,
            None => inner.ring.push_back(key.to_owned()),
        }
        inner.bytes += len;
        while inner.bytes > self.budget {
            let Some(k) = inner.ring.pop_front() else { break };
            let Some(slot) = inner.slots.get_mut(&k) else { continue };
            if slot.referenced {
                slot.referenced = false;
                inner.ring.push_back(k);
            } else if let Some(gone) = inner.slots.remove(&k) {
                inner.bytes -= gone.copy.body.len() as u64;
            }
        }
        if inner.ring.len() > 2 * inner.slots.len() + 64 {
            let Inner { slots, ring, .. } = &mut *inner;
            ring.retain(|k| slots.contains_key(k));
            // A key removed and inserted again can be in the ring twice; keep its first place.
            let mut seen = std::collections::HashSet::new();
            ring.retain(|k| seen.insert(k.clone()));
        }
    }

    pub(crate) fn remove(&self, key: &str) {
        let mut inner = self.inner.lock();
        if let Some(gone) = inner.slots.remove(key) {
            inner.bytes -= gone.copy.body.len() as u64;
        }
    }

    /// Removes every body whose key `gone` says.
    pub(crate) fn remove_if(&self, gone: impl Fn(&str) -> bool) {
        let mut inner = self.inner.lock();
        let mut freed = 0;
        inner.slots.retain(|k, slot| {
            let keep = !gone(k);
            if !keep {
                freed += slot.copy.body.len() as u64;
            }
            keep
        });
        inner.bytes -= freed;
    }

    #[cfg(test)]
    fn held(&self) -> (usize, u64, usize) {
        let inner = self.inner.lock();
        (inner.slots.len(), inner.bytes, inner.ring.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(n: usize) -> HotCopy {
        let body = vec![7u8; n];
        let meta = StoredMeta::for_body("application/octet-stream", &body);
        HotCopy { headers: Arc::new(CopyHeaders::new(&meta)), meta: Arc::new(meta), body: body.into() }
    }

    fn v(inode: u64) -> Version {
        Version::Local { inode, len: 0, mtime_ns: 0 }
    }

    #[test]
    fn a_body_is_served_only_at_its_version() {
        let hot = HotBodies::new(1 << 20, 1 << 20);
        hot.insert("a", v(1), copy(10));
        assert_eq!(hot.get("a", &v(1)).unwrap().body.len(), 10);
        assert!(hot.get("a", &v(2)).is_none(), "a replaced file is not served from memory");
        hot.insert("a", v(2), copy(20));
        assert_eq!(hot.get("a", &v(2)).unwrap().body.len(), 20);
        assert_eq!(hot.held(), (1, 20, 1));
        hot.remove("a");
        assert!(hot.get("a", &v(2)).is_none());
        assert_eq!(hot.held().1, 0);
    }

    #[test]
    fn bytes_stay_within_the_budget_and_recent_bodies_stay() {
        let hot = HotBodies::new(16 * 100, 1 << 20);
        assert!(hot.admits(100) && !hot.admits(101), "a sixteenth of the budget at most");
        for i in 0..16 {
            hot.insert(&format!("k{i}"), v(i), copy(100));
        }
        assert_eq!(hot.held().1, 1600);
        hot.get("k0", &v(0)).unwrap();
        for i in 16..40 {
            hot.insert(&format!("k{i}"), v(i), copy(100));
            assert!(hot.held().1 <= 1600);
            // Keep k0 referenced, as a hot object would be.
            hot.get("k0", &v(0)).unwrap();
        }
        assert!(hot.get("k0", &v(0)).is_some(), "a body in use survives eviction");
        assert!(hot.get("k1", &v(1)).is_none(), "an unused old body was evicted");
        assert!(hot.get("k39", &v(39)).is_some());
    }

    #[test]
    fn churn_of_one_key_does_not_grow_the_ring() {
        let hot = HotBodies::new(1 << 20, 1 << 20);
        for i in 0..10_000 {
            hot.insert("a", v(i), copy(1));
            hot.remove("a");
        }
        assert!(hot.held().2 <= 64 + 1, "{:?}", hot.held());
    }

    #[test]
    fn off_keeps_nothing() {
        let hot = HotBodies::new(0, 1 << 20);
        assert!(!hot.enabled() && !hot.admits(1));
        hot.insert("a", v(1), copy(1));
        assert!(hot.get("a", &v(1)).is_none());
    }
}
