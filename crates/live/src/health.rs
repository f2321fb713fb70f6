//! Node health shared between the checker (writer) and the answer path (reader).
//!
//! Each node id has one [`NodeState`] for the life of the process, handed out by the
//! [`HealthRegistry`]. A snapshot gets a [`HealthView`]: the states of its nodes by snapshot
//! index, so asking whether a node is up is one relaxed atomic load, with no lock and no map
//! lookup on the answer path.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use httpdns_core::snapshot::NodeHealth;

/// The health of one node.
#[derive(Debug)]
pub struct NodeState {
    up: AtomicBool,
    successes: AtomicU32,
    failures: AtomicU32,
    /// Smoothed probe latency in microseconds; 0 when never measured.
    latency_us: AtomicU64,
}

impl Default for NodeState {
    /// Nodes start up: a new node serves until its checks say otherwise, as in Envoy.
    fn default() -> Self {
        Self {
            up: AtomicBool::new(true),
            successes: AtomicU32::new(0),
            failures: AtomicU32::new(0),
            latency_us: AtomicU64::new(0),
        }
    }
}

/// What a probe result changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    None,
    WentUp,
    WentDown,
}

impl NodeState {
    /// Forgets all results: the node is up and unmeasured again (its checks were removed).
    pub fn reset(&self) {
        self.up.store(true, Ordering::Relaxed);
        self.successes.store(0, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        self.latency_us.store(0, Ordering::Relaxed);
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// The smoothed probe latency, if any probe succeeded.
    pub fn latency_ms(&self) -> Option<f64> {
        match self.latency_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(us as f64 / 1000.0),
        }
    }

    /// Records a probe result with Envoy-style thresholds: `unhealthy` consecutive failures
    /// take a node down, `healthy` consecutive successes bring it back. Only the checker task
    /// of this node writes, so the read-modify-write sequences need no lock.
    pub fn record(&self, ok: bool, latency_us: Option<u64>, healthy: u32, unhealthy: u32) -> Transition {
        if ok {
            self.failures.store(0, Ordering::Relaxed);
            let n = self.successes.fetch_add(1, Ordering::Relaxed).saturating_add(1);
            if let Some(sample) = latency_us {
                let old = self.latency_us.load(Ordering::Relaxed);
                // An exponentially weighted average (1/4 new), so one slow probe moves it little.
                let next = if old == 0 { sample.max(1) } else { (old * 3 + sample) / 4 };
                self.latency_us.store(next.max(1), Ordering::Relaxed);
            }
            if !self.is_up() && n >= healthy {
                self.up.store(true, Ordering::Relaxed);
                return Transition::WentUp;
            }
        } else {
            self.successes.store(0, Ordering::Relaxed);
            let n = self.failures.fetch_add(1, Ordering::Relaxed).saturating_add(1);
            if self.is_up() && n >= unhealthy {
                self.up.store(false, Ordering::Relaxed);
                return Transition::WentDown;
            }
        }
        Transition::None
    }
}

/// Every node's state by id.
#[derive(Debug, Default)]
pub struct HealthRegistry {
    // A blocking mutex: taken when a snapshot is published or checks are rescheduled, never on the
    // answer path and never across an await.
    states: Mutex<HashMap<String, Arc<NodeState>>>,
}

impl HealthRegistry {
    /// The state of `id`, created up if new.
    pub fn state(&self, id: &str) -> Arc<NodeState> {
        let mut map = self.states.lock();
        known_or_new(&mut map, id)
    }

    /// A view for a snapshot whose node ids are `ids`, in snapshot index order.
    pub fn view<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> HealthView {
        let mut map = self.states.lock();
        HealthView(ids.into_iter().map(|id| known_or_new(&mut map, id)).collect())
    }

    /// Forgets nodes not in `keep` (deleted nodes), so the map does not grow forever. `keep`
    /// must hold the nodes of the published snapshot: the catalog hands a snapshot with the
    /// same nodes the view of the one before.
    pub fn retain(&self, keep: &std::collections::HashSet<&str>) {
        let mut map = self.states.lock();
        map.retain(|id, _| keep.contains(id.as_str()));
    }

    /// Counts of up and down nodes.
    pub fn counts(&self) -> (usize, usize) {
        let map = self.states.lock();
        let up = map.values().filter(|s| s.is_up()).count();
        (up, map.len() - up)
    }
}

/// The state of `id`, created up if new. Looked up before the id is copied: a snapshot of
/// 100,000 nodes asks for every one of them, and nearly all are known.
fn known_or_new(map: &mut HashMap<String, Arc<NodeState>>, id: &str) -> Arc<NodeState> {
    if let Some(s) = map.get(id) {
        return s.clone();
    }
    map.entry(id.to_owned()).or_default().clone()
}

/// The states of one snapshot's nodes, by snapshot index. Cloned by reference: a snapshot
/// derived with the same nodes takes its predecessor's view as it is.
#[derive(Debug, Default, Clone)]
pub struct HealthView(Arc<[Arc<NodeState>]>);

impl HealthView {
    /// The state of the snapshot's node at `index`: no lock, no lookup by id.
    pub fn get(&self, index: usize) -> Option<&NodeState> {
        self.0.get(index).map(|s| &**s)
    }
}

impl NodeHealth for HealthView {
    fn is_up(&self, node: u32) -> bool {
        self.0.get(node as usize).is_none_or(|s| s.is_up())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_take_nodes_down_and_back() {
        let s = NodeState::default();
        assert!(s.is_up());
        assert_eq!(s.record(false, None, 2, 3), Transition::None);
        assert_eq!(s.record(false, None, 2, 3), Transition::None);
        assert_eq!(s.record(false, None, 2, 3), Transition::WentDown);
        assert!(!s.is_up());
        assert_eq!(s.record(true, Some(1000), 2, 3), Transition::None);
        assert_eq!(s.record(false, None, 2, 3), Transition::None, "a failure resets the success streak");
        assert_eq!(s.record(true, Some(1000), 2, 3), Transition::None);
        assert_eq!(s.record(true, Some(1000), 2, 3), Transition::WentUp);
        assert_eq!(s.latency_ms(), Some(1.0));
    }

    #[test]
    fn views_share_state_across_snapshots() {
        let r = HealthRegistry::default();
        let v1 = r.view(["a", "b"]);
        let v2 = r.view(["b", "a", "c"]);
        for _ in 0..3 {
            r.state("a").record(false, None, 1, 3);
        }
        assert!(!v1.is_up(0) && v1.is_up(1));
        assert!(v2.is_up(0) && !v2.is_up(1) && v2.is_up(2));
        assert_eq!(r.counts(), (2, 1));
        r.retain(&["b"].into_iter().collect());
        assert_eq!(r.counts(), (1, 0));
    }
}
