//! Every open TCP connection of the process, admitted against a global cap and a cap per
//! client address, and reaped when it overstays.
//!
//! One registry serves all TCP listeners (API, mirror, DNS, their TLS twins), because what
//! runs out is the process's descriptors, not a listener's. When a cap is reached, the
//! connection that can best be spared goes first: the oldest one that has never completed a
//! request (slowloris clients live here), else the oldest idle keep-alive connection (what
//! nginx reuses when its connections run out). Only when every connection is busy with a
//! request is the newcomer refused.
//!
//! Timeouts are kept by one reaper task that looks at every connection a few times a second,
//! rather than a timer per connection: a flood of 20,000 idle sockets then costs 20,000 map
//! entries, not 20,000 timer wake-ups.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use httpdns_core::cidr::CidrTable;
use tokio_util::sync::CancellationToken;

use crate::metrics::{CloseReason, ListenerMetrics, RefuseReason};

/// The caps of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Open connections at most, all listeners together.
    pub max_connections: usize,
    /// Open connections from one client address at most (trusted proxies are exempt).
    pub max_per_address: usize,
}

impl ConnLimits {
    /// Defaults from the process's descriptor limit: half of it for connections (the rest
    /// for the database, stored files, origin and upstream sockets), at most 50,000, and 512
    /// per address (carrier-grade NAT puts many devices behind one).
    pub fn for_descriptors(nofile: u64) -> Self {
        let max = (nofile / 2).clamp(64, 50_000) as usize;
        Self { max_connections: max, max_per_address: 512.min(max) }
    }
}

/// How long a connection may take in each phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From accept to the first complete request (TLS handshake and PROXY header included),
    /// and from the first byte of each later request to its complete head.
    pub header: Duration,
    /// Between requests on a kept-alive connection.
    pub idle: Duration,
    /// A request in progress whose connection moves no byte either way this long.
    pub stalled: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            stalled: Duration::from_secs(120),
        }
    }
}

/// What the protocol handler of one connection shares with the reaper: lock-free flags the
/// handler sets and the reaper reads and clears.
#[derive(Debug, Default)]
pub struct ConnState {
    /// Requests being handled now (an HTTP/2 connection can have many).
    in_flight: AtomicU32,
    /// Requests started so far (wrapping).
    started: AtomicU32,
    /// Bytes were read, or written, since the reaper last looked.
    read: AtomicBool,
    wrote: AtomicBool,
    /// Why the connection was told to close (`CloseReason as u8 + 1`); 0: not told.
    closing: AtomicU8,
    /// Its listener is shutting down: finish the request in progress, take no more.
    draining: AtomicBool,
    /// The connection's task, woken when told to close or drain. One waker rather than a
    /// `Notify`: the task polls this on every wake-up (each request), and a `Notify` takes a
    /// lock on each poll.
    waker: AtomicWaker,
}

/// What a connection was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Close at once ([`CloseReason`]).
    Close(CloseReason),
    /// Close once the requests in progress are answered.
    Drain,
}

impl ConnState {
    pub fn note_read(&self) {
        self.read.store(true, Ordering::Relaxed);
    }

    pub fn note_write(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    /// A request begins; the returned guard ends it when dropped (after its response body).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }

    /// Resolves once the connection has been told to close (timeout, eviction). One task per
    /// connection may wait on this (or on [`ConnState::signalled`]) at a time.
    pub fn closed(&self) -> impl Future<Output = CloseReason> + '_ {
        std::future::poll_fn(move |cx| {
            // Registered before the flag is read: a close told in between still wakes us.
            self.waker.register(cx.waker());
            self.close_reason().map_or(Poll::Pending, Poll::Ready)
        })
    }

    /// Resolves once the connection has been told to close or to drain.
    pub fn signalled(&self) -> impl Future<Output = Signal> + '_ {
        std::future::poll_fn(move |cx| {
            self.waker.register(cx.waker());
            if let Some(r) = self.close_reason() {
                Poll::Ready(Signal::Close(r))
            } else if self.draining.load(Ordering::Acquire) {
                Poll::Ready(Signal::Drain)
            } else {
                Poll::Pending
            }
        })
    }

    fn tell_drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.waker.wake();
    }

    pub fn close_reason(&self) -> Option<CloseReason> {
        CloseReason::from_index(self.closing.load(Ordering::Acquire).checked_sub(1)?)
    }

    fn tell_close(&self, reason: CloseReason) -> bool {
        let first =
            self.closing.compare_exchange(0, reason as u8 + 1, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if first {
            self.waker.wake();
        }
        first
    }
}

/// A request in progress on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a connection is, as the reaper sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Accepted, no request yet: must complete one within the header timeout.
    Fresh,
    /// Between requests, nothing read since.
    Idle,
    /// Between requests, part of the next one read.
    Head,
    /// A request is being handled.
    Busy,
}

#[derive(Debug)]
struct Slot {
    addr: IpAddr,
    exempt: bool,
    state: Arc<ConnState>,
    listener: Arc<ListenerMetrics>,
    timeouts: Timeouts,
    phase: Phase,
    /// When the phase began, or (busy) when a byte last moved.
    since: Instant,
    seen_started: u32,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// By admission order, so the oldest comes first.
    slots: BTreeMap<u64, Slot>,
    by_addr: HashMap<IpAddr, BTreeSet<u64>>,
}

/// The registry of open connections. Share it behind an `Arc`.
#[derive(Debug)]
pub struct ConnRegistry {
    limits: ConnLimits,
    exempt: Arc<CidrTable<()>>,
    inner: Mutex<Inner>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Full,
    PerAddress,
}

/// An admitted connection; dropping it unregisters the connection.
#[derive(Debug)]
pub struct Admitted {
    registry: Arc<ConnRegistry>,
    id: u64,
    pub state: Arc<ConnState>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        if let Some(slot) = inner.slots.remove(&self.id) {
            Inner::unindex(&mut inner.by_addr, slot.addr, self.id);
            slot.listener.open.dec();
        }
    }
}

/// How far the eviction scan looks for a connection to spare (bounds the cost of an accept).
const SCAN_LIMIT: usize = 4096;

impl Inner {
    fn unindex(by_addr: &mut HashMap<IpAddr, BTreeSet<u64>>, addr: IpAddr, id: u64) {
        if let Some(set) = by_addr.get_mut(&addr) {
            set.remove(&id);
            if set.is_empty() {
                by_addr.remove(&addr);
            }
        }
    }

    /// The connection to spare among `ids` (oldest first): one that never completed a
    /// request, else one idle between requests.
    fn victim(&self, ids: impl Iterator<Item = u64>) -> Option<u64> {
        let mut idle = None;
        for id in ids.take(SCAN_LIMIT) {
            let Some(slot) = self.slots.get(&id) else { continue };
            if slot.state.busy() {
                continue;
            }
            if matches!(slot.phase, Phase::Fresh | Phase::Head) {
                return Some(id);
            }
            idle.get_or_insert(id);
        }
        idle
    }

    fn evict(&mut self, id: u64) {
        if let Some(slot) = self.slots.remove(&id) {
            Inner::unindex(&mut self.by_addr, slot.addr, id);
            slot.listener.open.dec();
            if slot.state.tell_close(CloseReason::Evicted) {
                slot.listener.closed(CloseReason::Evicted);
            }
        }
    }
}

impl ConnRegistry {
    /// `exempt`: addresses without a per-address cap (trusted proxies carry many clients).
    pub fn new(limits: ConnLimits, exempt: Arc<CidrTable<()>>) -> Arc<Self> {
        Arc::new(Self { limits, exempt, inner: Mutex::default() })
    }

    pub fn limits(&self) -> ConnLimits {
        self.limits
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a connection from `addr` on a listener, sparing an older one if a cap is
    /// reached, or refuses it (counted in the listener's metrics).
    pub fn admit(
        self: &Arc<Self>,
        addr: IpAddr,
        listener: &Arc<ListenerMetrics>,
        timeouts: Timeouts,
    ) -> Result<Admitted, Refused> {
        let addr = addr.to_canonical();
        let exempt = !self.exempt.is_empty() && self.exempt.lookup(addr).is_some();
        let mut inner = self.lock();
        if !exempt {
            let from_addr = inner.by_addr.get(&addr).map_or(0, BTreeSet::len);
            if from_addr >= self.limits.max_per_address {
                let ids = inner.by_addr.get(&addr).into_iter().flatten().copied();
                match inner.victim(ids) {
                    Some(id) => inner.evict(id),
                    None => {
                        listener.refused(RefuseReason::PerAddress);
                        return Err(Refused::PerAddress);
                    }
                }
            }
        }
        if inner.slots.len() >= self.limits.max_connections {
            let ids = inner.slots.keys().copied();
            match inner.victim(ids) {
                Some(id) => inner.evict(id),
                None => {
                    listener.refused(RefuseReason::Full);
                    return Err(Refused::Full);
                }
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let state = Arc::new(ConnState::default());
        inner.slots.insert(
            id,
            Slot {
                addr,
                exempt,
                state: state.clone(),
                listener: listener.clone(),
                timeouts,
                phase: Phase::Fresh,
                since: Instant::now(),
                seen_started: 0,
            },
        );
        inner.by_addr.entry(addr).or_default().insert(id);
        listener.open.inc();
        Ok(Admitted { registry: self.clone(), id, state })
    }

    /// Tells every connection of `listener` to drain: finish what it is answering, then close.
    pub fn drain(&self, listener: &Arc<ListenerMetrics>) {
        for slot in self.lock().slots.values() {
            if Arc::ptr_eq(&slot.listener, listener) {
                slot.state.tell_drain();
            }
        }
    }

    /// Looks at every connection and tells those past their phase's timeout to close.
    pub fn reap(&self, now: Instant) -> usize {
        let mut told = 0;
        let mut inner = self.lock();
        for slot in inner.slots.values_mut() {
            let read = slot.state.read.swap(false, Ordering::Relaxed);
            let wrote = slot.state.wrote.swap(false, Ordering::Relaxed);
            let started = slot.state.started.load(Ordering::Relaxed);
            let busy = slot.state.busy();
            let new_request = started != slot.seen_started;
            slot.seen_started = started;
            let next = match (slot.phase, busy) {
                (_, true) => Phase::Busy,
                // Requests came and went since the last look: idle from now.
                (Phase::Busy, false) => Phase::Idle,
                (_, false) if new_request => Phase::Idle,
                (Phase::Idle, false) if read => Phase::Head,
                (phase, false) => phase,
            };
            if next != slot.phase || (next == Phase::Busy && (read || wrote)) {
                slot.since = now;
            }
            slot.phase = next;
            let (limit, reason) = match slot.phase {
                Phase::Fresh | Phase::Head => (slot.timeouts.header, CloseReason::HeaderTimeout),
                Phase::Idle => (slot.timeouts.idle, CloseReason::IdleTimeout),
                Phase::Busy => (slot.timeouts.stalled, CloseReason::Stalled),
            };
            if now.duration_since(slot.since) >= limit && slot.state.tell_close(reason) {
                slot.listener.closed(reason);
                told += 1;
            }
        }
        told
    }

    /// Runs [`ConnRegistry::reap`] every `every` until `shutdown`.
    pub async fn run_reaper(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.reap(Instant::now());
        }
    }

    /// How many connections one address has open (exempt ones included).
    pub fn open_from(&self, addr: IpAddr) -> usize {
        self.lock().by_addr.get(&addr.to_canonical()).map_or(0, BTreeSet::len)
    }

    /// Whether `addr` is exempt from the per-address cap.
    pub fn is_exempt(&self, addr: IpAddr) -> bool {
        let inner = self.lock();
        inner
            .by_addr
            .get(&addr.to_canonical())
            .and_then(|ids| ids.first())
            .is_some_and(|id| inner.slots[id].exempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Arc<ListenerMetrics> {
        crate::metrics::NetMetrics::new(&prometheus::Registry::new()).listener("test")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_full_registry_spares_the_oldest_connection_without_a_request() {
        let reg = ConnRegistry::new(ConnLimits { max_connections: 3, max_per_address: 3 }, Arc::default());
        let m = metrics();
        let t = Timeouts::default();
        let a = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
        let b = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
        let c = reg.admit(ip("10.0.0.3"), &m, t).unwrap();
        // `a` is serving a request; `b` is the oldest that never sent one.
        let _req = a.state.begin();
        let d = reg.admit(ip("10.0.0.4"), &m, t).unwrap();
        assert_eq!(b.state.close_reason(), Some(CloseReason::Evicted));
        assert_eq!(a.state.close_reason(), None);
        assert_eq!(reg.open(), 3);
        // Everyone busy: refused.
        let _r2 = (c.state.begin(), d.state.begin());
        assert_eq!(reg.admit(ip("10.0.0.5"), &m, t).unwrap_err(), Refused::Full);
        drop(b);
        assert_eq!(reg.open(), 3, "an evicted connection was already unregistered");
    }

    #[test]
    fn one_address_spares_its_own_connections_and_proxies_are_exempt() {
        let exempt = Arc::new(CidrTable::new([("10.9.0.0/16".parse().unwrap(), ())]));
        let reg = ConnRegistry::new(ConnLimits { max_connections: 100, max_per_address: 2 }, exempt);
        let m = metrics();
        let t = Timeouts::default();
        let other = reg.admit(ip("10.0.0.7"), &m, t).unwrap();
        let a1 = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
        let _a2 = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
        let _a3 = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
        assert_eq!(a1.state.close_reason(), Some(CloseReason::Evicted));
        assert_eq!(other.state.close_reason(), None, "another address is never spared for this one");
        let busy: Vec<_> = [&_a2, &_a3].iter().map(|c| c.state.begin()).collect();
        assert_eq!(reg.admit(ip("10.0.0.1"), &m, t).unwrap_err(), Refused::PerAddress);
        drop(busy);
        let proxied: Vec<_> = (0..10).map(|_| reg.admit(ip("10.9.1.1"), &m, t).unwrap()).collect();
        assert!(proxied.iter().all(|c| c.state.close_reason().is_none()));
        assert!(reg.is_exempt(ip("10.9.1.1")));
    }

    #[test]
    fn the_reaper_closes_each_phase_at_its_timeout() {
        let reg =
            ConnRegistry::new(ConnLimits { max_connections: 100, max_per_address: 100 }, Arc::default());
        let m = metrics();
        let s = Duration::from_secs(1);
        let t = Timeouts { header: 2 * s, idle: 5 * s, stalled: 10 * s };
        let silent = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
        let served = reg.admit(ip("10.0.0.2"), &m, t).unwrap();
        let slow = reg.admit(ip("10.0.0.3"), &m, t).unwrap();
        let t0 = Instant::now();
        // `served` completes a request at once, `slow` starts one and then moves nothing.
        drop(served.state.begin());
        let stuck = slow.state.begin();
        reg.reap(t0 + s);
        assert_eq!(reg.reap(t0 + 2 * s), 1);
        assert_eq!(silent.state.close_reason(), Some(CloseReason::HeaderTimeout));
        assert_eq!(served.state.close_reason(), None, "idle, within the keep-alive time");
        // Part of a next request arrives on the kept-alive connection.
        served.state.note_read();
        reg.reap(t0 + 3 * s);
        reg.reap(t0 + 4 * s);
        assert_eq!(served.state.close_reason(), None);
        reg.reap(t0 + 5 * s);
        assert_eq!(served.state.close_reason(), Some(CloseReason::HeaderTimeout));
        // The busy one moves a byte at 8 s, then nothing: closed 10 s later.
        slow.state.note_write();
        reg.reap(t0 + 8 * s);
        reg.reap(t0 + 17 * s);
        assert_eq!(slow.state.close_reason(), None);
        reg.reap(t0 + 18 * s);
        assert_eq!(slow.state.close_reason(), Some(CloseReason::Stalled));
        drop(stuck);
    }

    #[test]
    fn kept_alive_connections_close_after_the_idle_time() {
        let reg =
            ConnRegistry::new(ConnLimits { max_connections: 100, max_per_address: 100 }, Arc::default());
        let m = metrics();
        let s = Duration::from_secs(1);
        let t = Timeouts { header: 2 * s, idle: 5 * s, stalled: 10 * s };
        let c = reg.admit(ip("10.0.0.1"), &m, t).unwrap();
        let t0 = Instant::now();
        drop(c.state.begin());
        reg.reap(t0 + s);
        reg.reap(t0 + 5 * s);
        assert_eq!(c.state.close_reason(), None);
        reg.reap(t0 + 6 * s);
        assert_eq!(c.state.close_reason(), Some(CloseReason::IdleTimeout));
    }
}
