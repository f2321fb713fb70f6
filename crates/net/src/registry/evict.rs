//! Which connection goes at a cap: the tiers of connections a cap can spare (idle, lingering,
//! stuck, then the heaviest address's), and the bookkeeping of units per address.

use std::net::IpAddr;

use super::state::Activity;
use super::{ConnLimits, Inner, Refused, Slot, Tier};
use crate::metrics::CloseReason;

/// The connections a cap could spare, one per tier (the oldest of each).
#[derive(Debug, Default)]
struct Victims {
    idle: Option<u64>,
    lingering: Option<u64>,
    stuck: Option<u64>,
    /// Newcomers, and connections of addresses that hold almost nothing.
    young: Option<u64>,
}

impl Victims {
    /// Idle, else lingering, else stuck; and, when `young` is allowed, a connection that has
    /// only just come.
    fn best(&self, young: bool) -> Option<u64> {
        self.idle.or(self.lingering).or(self.stuck).or(if young { self.young } else { None })
    }
}

/// How far the eviction scan looks for a connection to spare (bounds the cost of an accept).
const SCAN_LIMIT: usize = 4096;

/// An address holding fewer units than this is light: its connections are spared after every
/// other address's of the same tier, so that a flood from other addresses cannot evict a lone
/// client that a loaded server has been slow to read.
pub(super) const LIGHT_UNITS: usize = 4;

/// Units of connections told to close but not yet gone that the process tolerates beyond its
/// cap: half the cap, at least 64. Under a flood that makes and loses connections faster than
/// their tasks close them, the listeners stop accepting past this
/// ([`ConnRegistry::backlogged`](super::ConnRegistry::backlogged)) until the tasks catch up,
/// rather than the process running out of descriptors (the cap is half of them). Accepting and refusing instead would only feed the flood's churn.
pub(super) fn closing_allowance(max: usize) -> usize {
    (max / 2).max(64)
}

impl Inner {
    /// Adds `delta` units to `addr`'s count (its entry exists), keeping `by_load` in order.
    pub(super) fn add_units(&mut self, addr: IpAddr, delta: isize) {
        let Some(per) = self.by_addr.get_mut(&addr) else { return };
        if !per.exempt {
            self.by_load.remove(&(per.units, addr));
        }
        per.units = per.units.checked_add_signed(delta).expect("units never go below zero");
        self.units = self.units.checked_add_signed(delta).expect("units never go below zero");
        if !per.exempt && per.units > 0 {
            self.by_load.insert((per.units, addr));
        }
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<Slot> {
        let slot = self.slots.remove(&id)?;
        if let Some(t) = slot.tier {
            self.tiers[t as usize].remove(&id);
        }
        self.add_units(slot.addr, -(slot.units() as isize));
        if let Some(per) = self.by_addr.get_mut(&slot.addr) {
            per.ids.remove(&id);
            if per.ids.is_empty() {
                self.by_addr.remove(&slot.addr);
            }
        }
        slot.listener.open.dec();
        Some(slot)
    }

    pub(super) fn release(&mut self, id: u64) {
        match self.slots.get_mut(&id) {
            Some(slot) => {
                slot.held -= 1;
                let addr = slot.addr;
                self.add_units(addr, -1);
            }
            // Evicted: its units moved to the closing count, and leave it with the descriptor.
            None => {
                if let Some(units) = self.closing.get_mut(&id) {
                    *units -= 1;
                    self.closing_units -= 1;
                }
            }
        }
    }

    /// Whether `addr` holds almost nothing ([`LIGHT_UNITS`]; trusted proxies never do).
    pub(super) fn light(&self, addr: IpAddr) -> bool {
        self.by_addr.get(&addr).is_some_and(|p| !p.exempt && p.units < LIGHT_UNITS)
    }

    /// Units of the address with the most (trusted proxies aside), and its oldest connection
    /// other than `keep`.
    pub(super) fn heaviest(&self, keep: Option<u64>) -> Option<(usize, u64)> {
        let &(units, addr) = self.by_load.last()?;
        let id = self.by_addr.get(&addr)?.ids.iter().copied().find(|id| Some(*id) != keep)?;
        Some((units, id))
    }

    /// The candidates among `ids` (oldest first), by the tiers of the module's comment; never
    /// `keep`. Scans `ids`: for one address's connections (at most its cap).
    fn victims(&self, ids: impl Iterator<Item = u64>, keep: Option<u64>) -> Victims {
        let mut v = Victims::default();
        for id in ids.take(SCAN_LIMIT) {
            if Some(id) == keep {
                continue;
            }
            let Some(slot) = self.slots.get(&id) else { continue };
            if !self.spareable(slot) {
                continue;
            }
            match slot.tier {
                Some(Tier::Idle) => {
                    v.idle = Some(id);
                    return v;
                }
                Some(Tier::Lingering) if !self.light(slot.addr) => {
                    v.lingering.get_or_insert(id);
                }
                Some(Tier::Stuck) if !self.light(slot.addr) => {
                    v.stuck.get_or_insert(id);
                }
                _ => {
                    v.young.get_or_insert(id);
                }
            }
        }
        v
    }

    /// Whether `slot` may be spared at all now: idle or sending, or answering but stuck.
    fn spareable(&self, slot: &Slot) -> bool {
        match slot.state.activity() {
            // Idle as the reaper saw it, or sending: a connection whose answer has only just
            // been handed to the socket is not idle yet (its client may still be reading it),
            // but it is no longer answering either.
            Activity::None | Activity::Body => slot.tier != Some(Tier::Stuck),
            Activity::Busy => slot.tier == Some(Tier::Stuck),
        }
    }

    /// The process-wide candidate of the first three tiers, from the tier sets: the oldest idle
    /// connection, else the oldest lingering one, else the oldest stuck one, of addresses that
    /// are not light; never `keep`.
    fn tiered_victim(&self, keep: Option<u64>) -> Option<u64> {
        for (tier, set) in self.tiers.iter().enumerate() {
            for &id in set.iter().take(SCAN_LIMIT) {
                let Some(slot) = self.slots.get(&id) else { continue };
                if Some(id) == keep || !self.spareable(slot) || slot.tier.map(|t| t as usize) != Some(tier) {
                    continue;
                }
                if tier == Tier::Idle as usize || !self.light(slot.addr) {
                    return Some(id);
                }
            }
        }
        None
    }

    pub(super) fn evict(&mut self, id: u64) {
        debug_assert!(self.slots.contains_key(&id));
        if let Some(slot) = self.remove(id) {
            self.closing.insert(id, slot.units());
            self.closing_units += slot.units();
            // An idle connection is closed, not reset: what the socket still holds of its last
            // answer reaches the client.
            if slot.tier == Some(Tier::Idle) {
                slot.state.close_gracefully();
            }
            if slot.state.tell_close(CloseReason::Evicted) {
                slot.listener.closed(CloseReason::Evicted);
            }
        }
    }

    /// Makes room for one more unit from `addr` (unless exempt), sparing a connection if a cap
    /// is reached; never `keep`.
    pub(super) fn make_room(
        &mut self,
        limits: ConnLimits,
        addr: IpAddr,
        exempt: bool,
        keep: Option<u64>,
        per_address: bool,
    ) -> Result<(), Refused> {
        if !exempt && per_address {
            let (units, ids) = self.by_addr.get(&addr).map_or((0, None), |p| (p.units, Some(&p.ids)));
            if units >= limits.max_per_address {
                let ids = ids.into_iter().flatten().copied();
                match self.victims(ids, keep).best(true) {
                    Some(id) => self.evict(id),
                    None => return Err(Refused::PerAddress),
                }
            }
        }
        if self.units >= limits.max_connections {
            let victim = self.tiered_victim(keep).or_else(|| {
                // Everyone is answering and moving, or has only just come: the address holding
                // the most units gives one up for a lighter one (a flood from a few hundred
                // addresses cannot starve every other client); else the oldest newcomer.
                let mine = if exempt { 0 } else { self.by_addr.get(&addr).map_or(0, |p| p.units) };
                // The last resort, a newcomer or a light address's connection, only for a light
                // (or trusted) one: a busy address must not take a lone client's place.
                let light = exempt || mine < LIGHT_UNITS;
                self.heaviest(keep).filter(|(units, _)| *units > mine + 1).map(|(_, id)| id).or_else(|| {
                    light.then(|| self.victims(self.slots.keys().copied(), keep).best(true)).flatten()
                })
            });
            match victim {
                Some(id) => self.evict(id),
                None => return Err(Refused::Full),
            }
        }
        Ok(())
    }
}
