//! The byte cap of the local store (`HTTPDNS_MIRROR_MAX_BYTES`) and its eviction order.
//!
//! Policy: a segmented LRU (SLRU). A new copy enters the *probation* segment; a copy read again
//! while there moves to the *protected* segment, which holds at most [`PROTECTED_SHARE`] of the
//! cap (its least recently used copies are demoted back to probation's head). Eviction takes
//! probation's least recently used copy first, protected's only when probation has nothing
//! left to give. So "least recently used copies go first" holds, while a scan (a prefetch, a
//! crawler walking every key once) only churns probation and cannot flush the copies that are
//! read again and again.
//!
//! A hit only sets the copy's *referenced* bit (CLOCK's second chance): the lists move when
//! room is made, not on every hit. A referenced copy at probation's end is promoted instead of
//! evicted; one at protected's end goes back to its head. The order is LRU's as far as eviction
//! can tell, and a hit costs a lock, a hash lookup and two stores: a list move per hit touched
//! three nodes spread over memory and cost several times more (measured).
//!
//! Eviction never removes a *pinned* copy: one that a response is reading from its file, or
//! that a fill just committed and whose readers may still stream it. The cap is enforced when a
//! copy is committed, before it is published: room is made first (under one lock, so concurrent
//! fills cannot all take the same room), and a copy that cannot get room (larger than the cap,
//! or everything else pinned) is served to its readers but not kept.
//!
//! The bookkeeping is one mutex and one hash lookup per hit, list links in a slab (no
//! allocation on a hit). Entries are keyed by the copy's file path: the layout maps store paths
//! to files one to one, and the start-up scan sees only files.

use foldhash::HashMap;
use parking_lot::Mutex;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntGauge};

/// The protected segment's share of the cap, in percent.
const PROTECTED_SHARE: u64 = 80;
const NIL: usize = usize::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg {
    Probation = 0,
    Protected = 1,
}

#[derive(Debug)]
struct Node {
    key: Box<[u8]>,
    size: u64,
    /// When the copy was last read or written (unix ms): the age of the oldest copy.
    used_ms: u64,
    seg: Seg,
    /// Read since the eviction scan last looked at it.
    referenced: bool,
    pins: u32,
    prev: usize,
    next: usize,
}

/// Two intrusive lists over one slab; `head` is the most recently used end.
#[derive(Debug, Default)]
struct Lru {
    nodes: Vec<Node>,
    free: Vec<usize>,
    index: HashMap<Box<[u8]>, usize>,
    head: [usize; 2],
    tail: [usize; 2],
    bytes: [u64; 2],
}

impl Lru {
    fn new() -> Self {
        Self { head: [NIL; 2], tail: [NIL; 2], ..Default::default() }
    }

    fn total(&self) -> u64 {
        self.bytes[0] + self.bytes[1]
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next, seg) = (self.nodes[i].prev, self.nodes[i].next, self.nodes[i].seg as usize);
        match prev {
            NIL => self.head[seg] = next,
            p => self.nodes[p].next = next,
        }
        match next {
            NIL => self.tail[seg] = prev,
            n => self.nodes[n].prev = prev,
        }
        self.bytes[seg] -= self.nodes[i].size;
    }

    fn push_front(&mut self, seg: Seg, i: usize) {
        let s = seg as usize;
        let old = self.head[s];
        {
            let n = &mut self.nodes[i];
            n.seg = seg;
            n.prev = NIL;
            n.next = old;
        }
        match old {
            NIL => self.tail[s] = i,
            o => self.nodes[o].prev = i,
        }
        self.head[s] = i;
        self.bytes[s] += self.nodes[i].size;
    }

    fn insert(&mut self, key: Box<[u8]>, size: u64, used_ms: u64, pins: u32) -> usize {
        let node = Node {
            key: key.clone(),
            size,
            used_ms,
            seg: Seg::Probation,
            referenced: false,
            pins,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.index.insert(key, i);
        self.push_front(Seg::Probation, i);
        i
    }

    fn remove(&mut self, key: &[u8]) -> Option<u64> {
        let i = self.index.remove(key)?;
        self.unlink(i);
        self.nodes[i].key = Box::default();
        self.free.push(i);
        Some(self.nodes[i].size)
    }

    /// A read: the copy's reference bit (the lists move when room is made).
    fn touch(&mut self, i: usize, now_ms: u64) {
        let n = &mut self.nodes[i];
        n.referenced = true;
        n.used_ms = now_ms;
    }

    /// Demotes protected's least recently used copies beyond its share to probation's head;
    /// never `keep`.
    fn rebalance(&mut self, protected_max: u64, keep: usize) {
        while self.bytes[1] > protected_max {
            let t = self.tail[1];
            if t == NIL || t == keep {
                break;
            }
            self.unlink(t);
            self.nodes[t].referenced = false;
            self.push_front(Seg::Probation, t);
        }
    }

    /// The copy to evict: probation's least recently used unpinned one, its referenced copies
    /// promoted on the way; then protected's, its referenced copies given a second chance.
    /// Every copy is looked at a bounded number of times, so a store of pinned copies ends the
    /// search with `None`.
    fn victim(&mut self, protected_max: u64) -> Option<usize> {
        let mut budget = 2 * self.index.len() + 2;
        let mut i = self.tail[0];
        while i != NIL && budget > 0 {
            budget -= 1;
            let prev = self.nodes[i].prev;
            if self.nodes[i].pins == 0 {
                if !self.nodes[i].referenced {
                    return Some(i);
                }
                self.nodes[i].referenced = false;
                self.unlink(i);
                self.push_front(Seg::Protected, i);
                self.rebalance(protected_max, i);
            }
            i = prev;
        }
        // Protected, at most two passes (the first may only clear reference bits).
        let mut i = self.tail[1];
        let mut passes = 0;
        while budget > 0 {
            if i == NIL {
                passes += 1;
                i = self.tail[1];
                if passes == 2 || i == NIL {
                    break;
                }
                continue;
            }
            budget -= 1;
            let prev = self.nodes[i].prev;
            if self.nodes[i].pins == 0 {
                if !self.nodes[i].referenced {
                    return Some(i);
                }
                self.nodes[i].referenced = false;
                self.unlink(i);
                self.push_front(Seg::Protected, i);
            }
            i = prev;
        }
        None
    }

    fn oldest_ms(&self) -> Option<u64> {
        [self.tail[0], self.tail[1]].iter().filter(|t| **t != NIL).map(|t| self.nodes[*t].used_ms).min()
    }
}

/// The cap and its bookkeeping. Shared behind an `Arc` by the store and the pins it hands out.
#[derive(Debug)]
pub struct Cap {
    max: u64,
    /// The store's root: eviction prunes empty directories up to it.
    root: PathBuf,
    lru: Mutex<Lru>,
    bytes: IntGauge,
    copies: IntGauge,
    evictions: IntCounter,
    rejected: IntCounter,
    oldest_age: IntGauge,
}

/// What [`Cap::reserve`] decided.
#[derive(Debug)]
pub enum Reserved {
    /// Room was made: remove these files first, then publish (the copy is counted and pinned).
    Room { evict: Vec<PathBuf>, pin: Pin },
    /// No room can be made: larger than the cap, or the rest is pinned. Not stored.
    NoRoom,
}

fn key(file: &Path) -> &[u8] {
    file.as_os_str().as_bytes()
}

impl Cap {
    /// A cap of `max` bytes over the files under `root`, counted at start (oldest first by
    /// access or modification time, whichever is later). Returns the cap and the files to
    /// remove now to get under it (a cap lowered since the last run).
    pub fn scan(max: u64, root: &Path) -> std::io::Result<(Arc<Self>, Vec<PathBuf>)> {
        let mut found = Vec::new();
        for file in crate::layout::list_files(root)? {
            let Ok(stat) = std::fs::metadata(&file) else { continue };
            let used = [stat.accessed(), stat.modified()]
                .into_iter()
                .filter_map(|t| t.ok()?.duration_since(std::time::UNIX_EPOCH).ok())
                .max()
                .map_or(0, |d| d.as_millis() as u64);
            found.push((used, stat.len(), file));
        }
        found.sort_by_key(|(used, _, _)| *used);
        let cap = Arc::new(Self::new(max, root));
        let mut evict = Vec::new();
        {
            let mut lru = cap.lock();
            for (used, size, file) in found {
                lru.insert(key(&file).into(), size, used, 0);
            }
            while lru.total() > max {
                let Some(i) = lru.victim(max / 100 * PROTECTED_SHARE) else { break };
                let k = lru.nodes[i].key.clone();
                lru.remove(&k);
                evict.push(PathBuf::from(std::ffi::OsStr::from_bytes(&k)));
            }
            cap.publish(&lru);
        }
        cap.evictions.inc_by(evict.len() as u64);
        Ok((cap, evict))
    }

    pub fn new(max: u64, root: &Path) -> Self {
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let counter = |name: &str, help: &str| IntCounter::new(name, help).expect("valid metric");
        Self {
            max,
            root: root.to_path_buf(),
            lru: Mutex::new(Lru::new()),
            bytes: gauge("mirror_store_bytes", "Bytes of copies on the local disk (bodies and metadata)."),
            copies: gauge("mirror_store_copies", "Copies on the local disk."),
            evictions: counter(
                "mirror_store_evictions_total",
                "Copies removed to keep the local store under HTTPDNS_MIRROR_MAX_BYTES.",
            ),
            rejected: counter(
                "mirror_store_not_kept_total",
                "Copies served but not kept: larger than the cap, or no unpinned copy left to evict.",
            ),
            oldest_age: gauge(
                "mirror_store_oldest_copy_age_seconds",
                "Seconds since the least recently used copy on the local disk was last read.",
            ),
        }
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Lru> {
        self.lru.lock()
    }

    fn publish(&self, lru: &Lru) {
        self.bytes.set(lru.total() as i64);
        self.copies.set(lru.index.len() as i64);
    }

    /// Bytes of copies counted now.
    pub fn bytes(&self) -> u64 {
        self.lock().total()
    }

    /// A hit on `file`.
    pub fn touch(&self, file: &Path) {
        let now = httpdns_core::clock::unix_ms();
        let mut lru = self.lock();
        if let Some(&i) = lru.index.get(key(file)) {
            lru.touch(i, now);
        }
    }

    /// A hit on `file` whose body will be read from the file: the copy stays until the pin goes.
    pub fn touch_and_pin(self: &Arc<Self>, file: &Path) -> Option<Pin> {
        let now = httpdns_core::clock::unix_ms();
        let mut lru = self.lock();
        let &i = lru.index.get(key(file))?;
        lru.touch(i, now);
        lru.nodes[i].pins += 1;
        Some(Pin { cap: self.clone(), key: key(file).into() })
    }

    /// Makes room for a copy of `size` bytes about to be published at `file` (replacing what is
    /// there). The victims are uncounted at once, so concurrent reservations never count the
    /// same room twice.
    pub fn reserve(self: &Arc<Self>, file: &Path, size: u64) -> Reserved {
        let k: Box<[u8]> = key(file).into();
        let mut lru = self.lock();
        // The copy this one replaces is uncounted now, unless a reader holds it: then its entry
        // stays (the rename leaves the reader its file) and becomes the new copy's.
        let replaced = lru.index.get(&k).is_some_and(|&i| lru.nodes[i].pins == 0);
        if replaced {
            lru.remove(&k);
        }
        let mut evict = Vec::new();
        if size <= self.max {
            while lru.total() + size > self.max {
                let Some(i) = lru.victim(self.max / 100 * PROTECTED_SHARE) else { break };
                let victim = lru.nodes[i].key.clone();
                lru.remove(&victim);
                evict.push(PathBuf::from(std::ffi::OsStr::from_bytes(&victim)));
            }
        }
        self.evictions.inc_by(evict.len() as u64);
        if size > self.max || lru.total() + size > self.max {
            // Larger than the cap, or everything left is pinned: this copy is not kept. What
            // was uncounted goes anyway (a file uncounted but left on disk would break the
            // cap), the replaced copy too: it was stale, which is why it was being replaced.
            if replaced {
                evict.push(file.to_path_buf());
            }
            self.rejected.inc();
            self.publish(&lru);
            drop(lru);
            self.remove_all(&evict);
            return Reserved::NoRoom;
        }
        let now = httpdns_core::clock::unix_ms();
        match lru.index.get(&k).copied() {
            Some(i) => {
                lru.unlink(i);
                lru.nodes[i].size = size;
                lru.nodes[i].used_ms = now;
                lru.nodes[i].pins += 1;
                lru.push_front(Seg::Probation, i);
            }
            None => {
                lru.insert(k.clone(), size, now, 1);
            }
        }
        self.publish(&lru);
        Reserved::Room { evict, pin: Pin { cap: self.clone(), key: k } }
    }

    /// Removes evicted files and the directories they leave empty (best effort: a file
    /// already gone is what was wanted).
    pub fn remove_all(&self, files: &[PathBuf]) {
        for f in files {
            if let Err(e) = crate::layout::remove_file(&self.root, f) {
                tracing::warn!(file = %f.display(), error = %e, "Could not remove an evicted copy.");
            }
        }
    }

    /// A copy removed by other means (purge, a failed publish).
    pub fn forget(&self, file: &Path) {
        let mut lru = self.lock();
        lru.remove(key(file));
        self.publish(&lru);
    }

    fn unpin(&self, key: &[u8]) {
        let mut lru = self.lock();
        if let Some(&i) = lru.index.get(key) {
            lru.nodes[i].pins = lru.nodes[i].pins.saturating_sub(1);
        }
    }

    /// The cap's metrics, for a Prometheus registry.
    pub fn collector(self: &Arc<Self>) -> Box<dyn Collector> {
        Box::new(CapCollector(self.clone()))
    }
}

/// A byte count as operators write it: `500000000`, `512M`, `50G`, `2T` (binary multiples,
/// `K`/`M`/`G`/`T`, with an optional `i`/`iB`/`B`). `off`, `none` or empty: no cap.
pub fn parse_bytes(raw: &str) -> Result<Option<u64>, String> {
    let t = raw.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("off") || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| format!("{t:?} is not a byte count such as 50G"))?;
    let unit = unit.trim().to_ascii_uppercase();
    let shift = match unit.trim_end_matches('B').trim_end_matches('I') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{t:?} is not a byte count such as 50G")),
    };
    let bytes = n.checked_mul(1 << shift).ok_or_else(|| format!("{t:?} is too large"))?;
    if bytes < 1 << 20 {
        return Err(format!("{t:?} is below the smallest cap, 1M"));
    }
    Ok(Some(bytes))
}

/// Keeps one copy from eviction while held (a response reading its file, a fill's readers).
#[derive(Debug)]
pub struct Pin {
    cap: Arc<Cap>,
    key: Box<[u8]>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.cap.unpin(&self.key);
    }
}

struct CapCollector(Arc<Cap>);

impl Collector for CapCollector {
    fn desc(&self) -> Vec<&Desc> {
        let c = &self.0;
        [c.bytes.desc(), c.copies.desc(), c.evictions.desc(), c.rejected.desc(), c.oldest_age.desc()]
            .into_iter()
            .flatten()
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let c = &self.0;
        // The age is computed when scraped: between reads nothing else would move it.
        let oldest = c.lock().oldest_ms();
        let now = httpdns_core::clock::unix_ms();
        c.oldest_age.set(oldest.map_or(0, |o| now.saturating_sub(o) / 1000) as i64);
        let mut out = Vec::new();
        out.extend(c.bytes.collect());
        out.extend(c.copies.collect());
        out.extend(c.evictions.collect());
        out.extend(c.rejected.collect());
        out.extend(c.oldest_age.collect());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserve(cap: &Arc<Cap>, name: &str, size: u64) -> (Vec<String>, Option<Pin>) {
        match cap.reserve(Path::new(name), size) {
            Reserved::Room { evict, pin } => {
                (evict.iter().map(|p| p.display().to_string()).collect(), Some(pin))
            }
            Reserved::NoRoom => (Vec::new(), None),
        }
    }

    #[test]
    fn byte_counts_parse() {
        assert_eq!(parse_bytes("50G"), Ok(Some(50 << 30)));
        assert_eq!(parse_bytes("512MiB"), Ok(Some(512 << 20)));
        assert_eq!(parse_bytes("1048576"), Ok(Some(1 << 20)));
        assert_eq!(parse_bytes("off"), Ok(None));
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("100").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }

    #[test]
    fn least_recently_used_goes_first_and_the_cap_holds() {
        let cap = Arc::new(Cap::new(300, Path::new("/nonexistent")));
        for n in ["a", "b", "c"] {
            drop(reserve(&cap, n, 100));
        }
        cap.touch(Path::new("a"));
        let (evicted, _) = reserve(&cap, "d", 100);
        assert_eq!(evicted, ["b"]);
        assert!(cap.bytes() <= 300);
        // Replacing a copy counts it once.
        drop(reserve(&cap, "d", 150));
        assert!(cap.bytes() <= 300, "{}", cap.bytes());
    }

    #[test]
    fn a_scan_does_not_flush_the_copies_read_again() {
        let cap = Arc::new(Cap::new(1000, Path::new("/nonexistent")));
        for n in 0..5 {
            drop(reserve(&cap, &format!("hot{n}"), 100));
            cap.touch(Path::new(&format!("hot{n}")));
        }
        for n in 0..100 {
            let (evicted, _) = reserve(&cap, &format!("scan{n}"), 100);
            assert!(evicted.iter().all(|e| e.starts_with("scan")), "{evicted:?}");
        }
        assert!(cap.bytes() <= 1000);
    }

    #[test]
    fn pinned_copies_stay_and_no_room_means_not_kept() {
        let cap = Arc::new(Cap::new(200, Path::new("/nonexistent")));
        let (_, pin_a) = reserve(&cap, "a", 100);
        let (_, pin_b) = reserve(&cap, "b", 100);
        let (evicted, pin) = reserve(&cap, "c", 100);
        assert!(evicted.is_empty() && pin.is_none(), "both are pinned");
        drop(pin_a);
        let (evicted, pin) = reserve(&cap, "c", 100);
        assert_eq!(evicted, ["a"]);
        assert!(pin.is_some());
        drop(pin_b);
        // Larger than the cap: never kept.
        assert!(reserve(&cap, "huge", 201).1.is_none());
        // A reader's pin keeps its copy.
        drop(pin);
        let reader = cap.touch_and_pin(Path::new("b")).unwrap();
        let (evicted, _) = reserve(&cap, "d", 100);
        assert_eq!(evicted, ["c"]);
        drop(reader);
    }

    #[test]
    fn bookkeeping_survives_churn() {
        let cap = Arc::new(Cap::new(10_000, Path::new("/nonexistent")));
        let mut x = 1u64;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let name = format!("k{}", (x >> 33) % 500);
            if x % 3 == 0 {
                cap.touch(Path::new(&name));
            } else {
                drop(reserve(&cap, &name, (x >> 40) % 300 + 1));
            }
            assert!(cap.bytes() <= 10_000);
        }
        let lru = cap.lock();
        let (mut n, mut bytes) = (0, 0);
        for seg in 0..2 {
            let mut i = lru.head[seg];
            while i != NIL {
                n += 1;
                bytes += lru.nodes[i].size;
                i = lru.nodes[i].next;
            }
        }
        assert_eq!(n, lru.index.len());
        assert_eq!(bytes, lru.total());
    }
}
