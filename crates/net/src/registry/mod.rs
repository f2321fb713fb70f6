//! Every open TCP connection of the process, admitted against a global cap and a cap per
//! client address, and reaped when it overstays.
//!
//! One registry serves all TCP listeners (API, mirror, DNS, their TLS twins), because what
//! runs out is the process's descriptors, not a listener's. The caps count *units*: one per
//! connection, one more for each HTTP/2 stream beside its first ([`ConnHandle::hold`], per
//! address and in all) and for each descriptor a response holds ([`ConnHandle::hold_descriptor`]:
//! a file it streams from, in all), so 2,000 clients that never read their downloads cannot
//! hold 4,000 descriptors.
//!
//! When a cap is reached, the connection that can best be spared goes first (the same order
//! within one address for the per-address cap):
//!
//! 1. the oldest idle keep-alive connection (what nginx reuses first when its connections run
//!    out): it loses nothing but a reconnection;
//! 2. else the oldest still sending its request (head or body) for [`LINGERING`] or more
//!    (slowloris, a slow upload);
//! 3. else the oldest whose answer has moved no byte for [`STUCK`]: a client that does not read;
//! 4. else (for the process's cap) the oldest connection of the address holding the most units,
//!    when it holds more than the newcomer's: a flood from a few hundred addresses cannot starve
//!    everyone else;
//! 5. else the oldest newcomer still sending. Connections of an address that holds almost
//!    nothing ([`LIGHT_UNITS`]) wait here too, whatever their tier: on a loaded server a lone
//!    client lingers like slowloris, and must not pay for the flood around it.
//!
//! Only then is the newcomer refused. Connections told to close count until their tasks drop
//! them (their descriptors are still open); past an allowance the listeners stop accepting
//! until those tasks catch up.
//!
//! Timeouts are kept by one reaper task that looks at every connection a few times a second,
//! rather than a timer per connection: a flood of 20,000 idle sockets then costs 20,000 map
//! entries, not 20,000 timer wake-ups.

mod evict;
use evict::closing_allowance;
mod state;

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use httpdns_core::cidr::CidrTable;
use tokio_util::sync::CancellationToken;

use crate::metrics::{CloseReason, ListenerMetrics, RefuseReason};
use state::Activity;
pub use state::{BodyWait, ConnState, InFlight, Signal};

/// The caps of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Units at most, all listeners together: a connection is one, and each descriptor or
    /// stream it holds besides ([`ConnHandle::hold`]) one more.
    pub max_connections: usize,
    /// Units from one client address at most (trusted proxies are exempt).
    pub max_per_address: usize,
}

impl ConnLimits {
    /// Defaults from the process's descriptor limit: half of it for connections and what they
    /// hold (the rest for the database, stored files, origin and upstream sockets), at most
    /// 50,000, and 512 per address (carrier-grade NAT puts many devices behind one).
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
    /// A request being answered whose body frames (or, without HTTP/2, socket writes) have
    /// not moved this long.
    pub stalled: Duration,
    /// Between two reads of a request body the server waits for (nginx's
    /// `client_body_timeout`).
    pub body: Duration,
    /// For a whole request body, from when the server first waited for it: one byte every few
    /// seconds resets the gap, not this.
    pub body_total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            stalled: Duration::from_secs(120),
            body: Duration::from_secs(10),
            body_total: Duration::from_secs(30),
        }
    }
}

/// A request that has moved no byte this long is the first to go when a cap is reached and
/// nothing idle or half-sent is left: a client that does not read its answer.
pub const STUCK: Duration = Duration::from_secs(5);

/// A connection still sending its request (head or body) this long, at the reaper's last look,
/// can be spared before busy ones; a younger one (a client that just connected, which a
/// loaded server may not even have read yet) only after them.
pub const LINGERING: Duration = Duration::from_secs(1);

/// Where a connection is, as the reaper sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Accepted, no request yet: must complete one within the header timeout.
    Fresh,
    /// Between requests, nothing read since.
    Idle,
    /// Between requests, part of the next one read.
    Head,
    /// Every request in progress waits for more of its body.
    Body,
    /// A request is being answered.
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
    /// When the phase began, or (busy) when a request last progressed.
    since: Instant,
    /// When a body frame last arrived (the body phase's gap).
    moved_at: Instant,
    seen_started: u32,
    /// Its tier as a candidate to spare, at the reaper's last look (see `Inner::tiers`).
    tier: Option<Tier>,
    /// Units held besides the connection's own.
    held: usize,
}

impl Slot {
    fn units(&self) -> usize {
        1 + self.held
    }
}

/// What the reaper last saw a connection doing, as a candidate to spare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    /// Between requests.
    Idle = 0,
    /// Sending its request (head or body) for [`LINGERING`] or more.
    Lingering = 1,
    /// Answering, with nothing moved for [`STUCK`].
    Stuck = 2,
}

#[derive(Debug, Default)]
struct PerAddress {
    ids: BTreeSet<u64>,
    units: usize,
    exempt: bool,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// By admission order, so the oldest comes first.
    slots: BTreeMap<u64, Slot>,
    by_addr: HashMap<IpAddr, PerAddress>,
    /// Addresses (not exempt) by their units, the heaviest last.
    by_load: BTreeSet<(usize, IpAddr)>,
    /// Units of every slot.
    units: usize,
    /// Connections by [`Tier`], oldest first, as the reaper last saw them: an admission at a
    /// cap finds its candidate without scanning every connection (a flood admits thousands a
    /// second).
    tiers: [BTreeSet<u64>; 3],
    /// Connections told to close whose tasks have not yet dropped them, with the units they
    /// held: their descriptors are still open, so they still count against the process's
    /// descriptors ([`CLOSING_ALLOWANCE`]).
    closing: HashMap<u64, usize>,
    closing_units: usize,
}

/// The registry of open connections. Share it behind an `Arc`.
#[derive(Debug)]
pub struct ConnRegistry {
    limits: ConnLimits,
    exempt: Arc<CidrTable<()>>,
    inner: Mutex<Inner>,
}

/// Why a connection (or a unit it asked for) was not admitted.
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

impl Admitted {
    /// A handle the connection's requests carry, to hold units against its caps.
    pub fn handle(&self) -> ConnHandle {
        ConnHandle { registry: self.registry.clone(), id: self.id }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        inner.remove(self.id);
        if let Some(units) = inner.closing.remove(&self.id) {
            inner.closing_units -= units;
        }
    }
}

/// One connection's access to the registry, for what it holds besides itself. Cheap to clone;
/// an extension on every routed request of an HTTP listener.
#[derive(Debug, Clone)]
pub struct ConnHandle {
    registry: Arc<ConnRegistry>,
    id: u64,
}

impl ConnHandle {
    /// Counts one more unit (an open file a response streams from, a concurrent HTTP/2
    /// stream) against the connection's address and the process, sparing another connection
    /// as [`ConnRegistry::admit`] does when a cap is reached; released when dropped.
    pub fn hold(&self) -> Result<Held, Refused> {
        self.registry.hold(self.id, true)?;
        Ok(Held(self.clone()))
    }

    /// Like [`ConnHandle::hold`], for a descriptor the response holds (a file it streams
    /// from): counted against the process's cap only, since descriptors are the process's and a
    /// client behind a shared address may have many downloads in flight. Still counted in its
    /// address's load, so a heavy address gives way first.
    pub fn hold_descriptor(&self) -> Result<Held, Refused> {
        self.registry.hold(self.id, false)?;
        Ok(Held(self.clone()))
    }
}

/// A unit held by a connection ([`ConnHandle::hold`]).
#[derive(Debug)]
pub struct Held(ConnHandle);

impl Drop for Held {
    fn drop(&mut self) {
        let mut inner = self.0.registry.lock();
        inner.release(self.0.id);
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

    /// Units counted now: connections and what they hold.
    pub fn units(&self) -> usize {
        self.lock().units
    }

    /// Whether connections told to close but not yet gone hold more than the allowance beyond
    /// the cap: an accept loop then waits (see [`ConnRegistry::accept_pause`]), leaving new
    /// connections in the kernel's queue, which costs no descriptor.
    pub fn backlogged(&self) -> bool {
        let inner = self.lock();
        let max = self.limits.max_connections;
        inner.units + inner.closing_units >= max + closing_allowance(max)
    }

    /// Waits while the registry is [backlogged](ConnRegistry::backlogged), a millisecond at a
    /// time and at most 100 ms (a stuck close must not stop a listener).
    pub async fn accept_pause(&self) {
        for _ in 0..100 {
            if !self.backlogged() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        // Every change to `Inner` is whole before the lock is released (no call out while
        // held), so a panic elsewhere leaves it consistent.
        self.inner.lock()
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
        let now = Instant::now();
        let mut inner = self.lock();
        if let Err(why) = inner.make_room(self.limits, addr, exempt, None, true) {
            listener.refused(match why {
                Refused::Full => RefuseReason::Full,
                Refused::PerAddress => RefuseReason::PerAddress,
            });
            return Err(why);
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
                since: now,
                moved_at: now,
                seen_started: 0,
                tier: None,
                held: 0,
            },
        );
        let per = inner.by_addr.entry(addr).or_default();
        per.ids.insert(id);
        per.exempt = exempt;
        inner.add_units(addr, 1);
        listener.open.inc();
        Ok(Admitted { registry: self.clone(), id, state })
    }

    fn hold(&self, id: u64, per_address: bool) -> Result<(), Refused> {
        let mut inner = self.lock();
        // Told to close already (evicted): nothing more for it.
        let Some(slot) = inner.slots.get(&id) else { return Err(Refused::Full) };
        let (addr, exempt) = (slot.addr, slot.exempt);
        inner.make_room(self.limits, addr, exempt, Some(id), per_address)?;
        let Some(slot) = inner.slots.get_mut(&id) else { return Err(Refused::Full) };
        slot.held += 1;
        inner.add_units(addr, 1);
        Ok(())
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
        let Inner { slots, tiers, .. } = &mut *inner;
        for (id, slot) in slots.iter_mut() {
            let (read, progressed) = slot.state.take_progress();
            let started = slot.state.started();
            let new_request = started != slot.seen_started;
            slot.seen_started = started;
            let next = match (slot.phase, slot.state.activity()) {
                (_, Activity::Busy) => Phase::Busy,
                (_, Activity::Body) => Phase::Body,
                // Requests came and went since the last look: idle from now.
                (Phase::Busy | Phase::Body, Activity::None) => Phase::Idle,
                (_, Activity::None) if new_request => Phase::Idle,
                (Phase::Idle, Activity::None) if read => Phase::Head,
                (phase, Activity::None) => phase,
            };
            if next != slot.phase {
                slot.since = now;
                slot.moved_at = now;
            } else if progressed {
                slot.moved_at = now;
                if next == Phase::Busy {
                    slot.since = now;
                }
            }
            slot.phase = next;
            let age = now.saturating_duration_since(slot.since);
            let tier = match next {
                Phase::Idle => Some(Tier::Idle),
                Phase::Fresh | Phase::Head | Phase::Body if age >= LINGERING => Some(Tier::Lingering),
                Phase::Busy if age >= STUCK => Some(Tier::Stuck),
                _ => None,
            };
            if tier != slot.tier {
                if let Some(t) = slot.tier {
                    tiers[t as usize].remove(id);
                }
                if let Some(t) = tier {
                    tiers[t as usize].insert(*id);
                }
                slot.tier = tier;
            }
            let t = &slot.timeouts;
            let over = |since: Instant, limit: Duration| now.saturating_duration_since(since) >= limit;
            let reason = match slot.phase {
                Phase::Fresh | Phase::Head => {
                    over(slot.since, t.header).then_some(CloseReason::HeaderTimeout)
                }
                Phase::Idle => over(slot.since, t.idle).then_some(CloseReason::IdleTimeout),
                Phase::Busy => over(slot.since, t.stalled).then_some(CloseReason::Stalled),
                Phase::Body => (over(slot.since, t.body_total) || over(slot.moved_at, t.body))
                    .then_some(CloseReason::BodyTimeout),
            };
            if let Some(reason) = reason {
                if slot.state.tell_close(reason) {
                    slot.listener.closed(reason);
                    told += 1;
                }
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
        self.lock().by_addr.get(&addr.to_canonical()).map_or(0, |p| p.ids.len())
    }

    /// Whether `addr` is exempt from the per-address cap.
    pub fn is_exempt(&self, addr: IpAddr) -> bool {
        let inner = self.lock();
        inner
            .by_addr
            .get(&addr.to_canonical())
            .and_then(|p| p.ids.first())
            .is_some_and(|id| inner.slots[id].exempt)
    }
}

#[cfg(test)]
mod tests;
