//! The active health checker: probes every checked node on its pool's schedule, with a bounded
//! number of probes in flight, so that 10,000 nodes never mean 10,000 sockets at once.
//!
//! One task keeps each target's next due time in a heap (first probe at a random offset within
//! the interval, then every interval ± 10% jitter, so probes of many nodes spread out) and
//! polls the probes in flight, at most `workers` of them. A node is never probed twice at once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use httpdns_core::model::HealthCheckSpec;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::health::{HealthRegistry, NodeState, Transition};
use crate::probe::{probe, ProbeError};

/// A node to check.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub node_id: String,
    pub addr: SocketAddr,
    pub check: HealthCheckSpec,
}

/// Told of every probe, for metrics and logs.
pub trait ProbeObserver: Send + Sync + 'static {
    fn probed(&self, target: &Target, result: &Result<Duration, ProbeError>, transition: Transition);
}

/// A small xorshift generator for jitter, seeded from the OS: jitter needs spread, not secrecy.
struct Jitter(u64);

impl Jitter {
    fn new() -> Self {
        let mut b = [0u8; 8];
        let _ = getrandom::fill(&mut b);
        Self(u64::from_le_bytes(b) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A duration uniformly in `[0, d)`.
    fn below(&mut self, d: Duration) -> Duration {
        let ms = d.as_millis().max(1) as u64;
        Duration::from_millis(self.next() % ms)
    }

    /// `d` ± 10%.
    fn around(&mut self, d: Duration) -> Duration {
        let tenth = d / 10;
        d.saturating_sub(tenth) + self.below(tenth * 2)
    }
}

/// How long the scheduler lets due probes gather before it wakes: one wake starts every probe
/// that came due in the window, instead of one thread wake-up per probe (at 500 probes a
/// second, context switches were the largest single cost of checking in a profile). Probes
/// start at most this late, which is nothing against intervals of seconds.
const GATHER: Duration = Duration::from_millis(50);

/// Runs the checker until `shutdown`: follows `targets` (republished whenever the model
/// changes) with at most `workers` probes in flight.
///
/// One task does it all: a heap of due times, and the probes in flight polled together, so a
/// probe costs its sockets and no task hand-offs; completions that arrive together are
/// handled in one wake.
pub async fn run(
    registry: Arc<HealthRegistry>,
    mut targets: watch::Receiver<Arc<Vec<Target>>>,
    observer: Arc<dyn ProbeObserver>,
    workers: usize,
    shutdown: CancellationToken,
) {
    let workers = workers.max(1);
    let mut schedule = Schedule::new(registry);
    schedule.reconcile(&targets.borrow_and_update());
    let mut in_flight = FuturesUnordered::new();
    let sleep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    loop {
        let now = Instant::now();
        while in_flight.len() < workers {
            let Some(job) = schedule.pop_due(now) else { break };
            in_flight.push(async move {
                let result = probe(job.target.addr, &job.target.check).await;
                (job, result)
            });
        }
        // With every worker busy, only a completion can start the next probe.
        let wake = match schedule.next_due() {
            Some(next) if in_flight.len() < workers => next.max(now + GATHER),
            _ => now + Duration::from_secs(3600),
        };
        sleep.as_mut().reset(wake);
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = targets.changed() => {
                if changed.is_err() { break }
                let list = targets.borrow_and_update().clone();
                schedule.reconcile(&list);
            }
            Some((job, result)) = in_flight.next(), if !in_flight.is_empty() => {
                // The result of a node no longer checked (or checked differently now) is
                // dropped: recording it could take down a node that nothing checks any more.
                if schedule.done(&job) {
                    let latency = result.as_ref().ok().map(|d: &Duration| d.as_micros() as u64);
                    let c = &job.target.check;
                    let transition =
                        job.state.record(result.is_ok(), latency, c.healthy_threshold, c.unhealthy_threshold);
                    observer.probed(&job.target, &result, transition);
                }
            }
            () = &mut sleep => {}
        }
    }
}

/// A probe started: what it checks and where its result goes.
struct Job {
    target: Arc<Target>,
    state: Arc<NodeState>,
    /// The schedule entry it belongs to (a changed target is a new entry).
    generation: u64,
}

struct Entry {
    target: Arc<Target>,
    state: Arc<NodeState>,
    generation: u64,
    in_flight: bool,
}

/// Every checked node with its next due time, in a min-heap: taking the due ones costs
/// O(log n) each, not a scan of every node per wake.
struct Schedule {
    registry: Arc<HealthRegistry>,
    entries: HashMap<String, Entry>,
    /// (due, node id, generation); entries of removed or changed targets are skipped.
    heap: BinaryHeap<Reverse<(Instant, Arc<str>, u64)>>,
    generations: u64,
    jitter: Jitter,
}

impl Schedule {
    fn new(registry: Arc<HealthRegistry>) -> Self {
        Self {
            registry,
            entries: HashMap::new(),
            heap: BinaryHeap::new(),
            generations: 0,
            jitter: Jitter::new(),
        }
    }

    /// Follows a new target list: unchanged targets keep their place in the schedule, new or
    /// changed ones start at a random offset within their interval, so probes spread out.
    fn reconcile(&mut self, list: &[Target]) {
        let now = Instant::now();
        let mut next: HashMap<String, Entry> = HashMap::with_capacity(list.len());
        for t in list {
            let kept = self.entries.remove(&t.node_id).filter(|e| *e.target == *t);
            let entry = match kept {
                // The state the snapshot reads now: a node deleted and added again between two
                // looks at the list has a new one (the registry forgot the old with the node),
                // and probing the old one would take nothing out of answers.
                Some(mut e) => {
                    e.state = self.registry.state(&t.node_id);
                    e
                }
                None => {
                    self.generations += 1;
                    let due = now + self.jitter.below(Duration::from_millis(t.check.interval_ms));
                    self.heap.push(Reverse((due, Arc::from(t.node_id.as_str()), self.generations)));
                    Entry {
                        target: Arc::new(t.clone()),
                        state: self.registry.state(&t.node_id),
                        generation: self.generations,
                        in_flight: false,
                    }
                }
            };
            next.insert(t.node_id.clone(), entry);
        }
        // Nodes no longer checked go back to up: without checks nothing may keep them out.
        // Through the entry's own state: asking the registry would bring a deleted node's back.
        for (id, entry) in self.entries.drain() {
            if !next.contains_key(&id) {
                entry.state.reset();
            }
        }
        self.entries = next;
        // Skipped entries are dropped as they come due; after many changes within one
        // interval, drop them at once.
        if self.heap.len() > 2 * self.entries.len() + 1024 {
            let entries = &self.entries;
            self.heap.retain(|Reverse((_, id, g))| entries.get(&**id).is_some_and(|e| e.generation == *g));
        }
    }

    /// The next probe due at `now`, rescheduled one interval (± 10%) later. A node whose last
    /// probe is still running is not probed twice at once; its turn is skipped.
    fn pop_due(&mut self, now: Instant) -> Option<Job> {
        loop {
            let Reverse((due, _, _)) = self.heap.peek()?;
            if *due > now {
                return None;
            }
            let Reverse((due, id, generation)) = self.heap.pop()?;
            let Some(entry) = self.entries.get_mut(&*id).filter(|e| e.generation == generation) else {
                continue;
            };
            let interval = Duration::from_millis(entry.target.check.interval_ms);
            // Counted from when it was due, not from when it started (up to [`GATHER`] later),
            // so the cadence stays the interval; after a long stall, from now.
            let base = if now.duration_since(due) < interval { due } else { now };
            let next = base + self.jitter.around(interval);
            self.heap.push(Reverse((next, id, generation)));
            if entry.in_flight {
                continue;
            }
            entry.in_flight = true;
            return Some(Job { target: entry.target.clone(), state: entry.state.clone(), generation });
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Marks a probe finished; whether its entry is still the one in force.
    fn done(&mut self, job: &Job) -> bool {
        match self.entries.get_mut(&job.target.node_id).filter(|e| e.generation == job.generation) {
            Some(e) => {
                e.in_flight = false;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use httpdns_core::model::{HealthCheckKind, HealthCheckMethod};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::health::Transition;

    fn target(id: &str, addr: SocketAddr, kind: HealthCheckKind, interval_ms: u64) -> Target {
        Target {
            node_id: id.into(),
            addr,
            check: HealthCheckSpec {
                kind,
                port: addr.port(),
                path: Some("/health".into()),
                method: HealthCheckMethod::Get,
                sni: None,
                interval_ms,
                timeout_ms: 2000,
                healthy_threshold: 1,
                unhealthy_threshold: 1,
                expected_status: Vec::new(),
                body_match: None,
            },
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_node_comes_due_once_per_interval_and_never_twice_at_once() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut s = Schedule::new(Arc::new(HealthRegistry::default()));
        s.reconcile(&[
            target("a", addr, HealthCheckKind::Tcp, 1000),
            target("b", addr, HealthCheckKind::Tcp, 1000),
            target("c", addr, HealthCheckKind::Tcp, 1000),
        ]);
        // First probes are spread over the first interval.
        tokio::time::advance(Duration::from_millis(1000)).await;
        let mut jobs = Vec::new();
        while let Some(j) = s.pop_due(Instant::now()) {
            jobs.push(j);
        }
        let mut ids: Vec<_> = jobs.iter().map(|j| j.target.node_id.clone()).collect();
        ids.sort();
        assert_eq!(ids, ["a", "b", "c"]);
        // Still running an interval later: their turn is skipped, not doubled.
        tokio::time::advance(Duration::from_millis(1200)).await;
        assert!(s.pop_due(Instant::now()).is_none(), "a node in flight is not probed again");
        for j in &jobs {
            assert!(s.done(j));
        }
        tokio::time::advance(Duration::from_millis(1200)).await;
        let running: Vec<_> = std::iter::from_fn(|| s.pop_due(Instant::now())).collect();
        assert_eq!(running.len(), 3);
        // A removed node is never due again; a changed one is a new entry. Probes of either
        // that were running when the list changed report into nothing.
        s.reconcile(&[target("a", addr, HealthCheckKind::Tcp, 500)]);
        assert!(running.iter().all(|j| !s.done(j)), "results of removed or changed targets are dropped");
        tokio::time::advance(Duration::from_millis(5000)).await;
        let due: Vec<_> = std::iter::from_fn(|| s.pop_due(Instant::now())).collect();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].target.check.interval_ms, 500);
    }

    /// A node deleted and added again between two target lists (the watch channel keeps only
    /// the latest) gets a new state from the registry; its probes must report into that one,
    /// which the snapshot reads, and a dropped target must not bring a forgotten state back.
    #[test]
    fn probes_follow_the_registry_state_of_a_readded_node() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let registry = Arc::new(HealthRegistry::default());
        let mut s = Schedule::new(registry.clone());
        let a = target("a", addr, HealthCheckKind::Tcp, 1000);
        s.reconcile(&[a.clone(), target("b", addr, HealthCheckKind::Tcp, 1000)]);
        let first = registry.state("a");
        // Deleted (the catalog forgets its state), then added again with the same spec.
        registry.retain(&["b"].into_iter().collect());
        let view = registry.view(["a", "b"]);
        s.reconcile(&[a.clone(), target("b", addr, HealthCheckKind::Tcp, 1000)]);
        let now = registry.state("a");
        assert!(!Arc::ptr_eq(&first, &now));
        assert!(Arc::ptr_eq(&s.entries["a"].state, &now), "the kept entry follows the new state");
        assert!(view.get(0).is_some_and(|v| std::ptr::eq(v, &*now)));
        // b dropped from the list after the registry forgot it: reset through the entry, not
        // re-created in the registry.
        registry.retain(&["a"].into_iter().collect());
        s.reconcile(&[a]);
        assert_eq!(registry.counts(), (1, 0), "only a is known");
    }

    struct Count(AtomicUsize);

    impl ProbeObserver for Count {
        fn probed(&self, _: &Target, result: &Result<Duration, ProbeError>, _: Transition) {
            assert!(result.is_ok(), "{result:?}");
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Many nodes due at once never mean more than `workers` connections at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_workers_probes_are_in_flight() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (o, m) = (open.clone(), most.clone());
        tokio::spawn(async move {
            loop {
                let (mut sock, _) = listener.accept().await.unwrap();
                let (o, m) = (o.clone(), m.clone());
                tokio::spawn(async move {
                    let now = o.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    let mut buf = [0u8; 512];
                    let _ = sock.read(&mut buf).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    o.fetch_sub(1, Ordering::SeqCst);
                    let _ = sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
                });
            }
        });
        let targets: Vec<Target> =
            (0..40).map(|i| target(&format!("n{i}"), addr, HealthCheckKind::Http, 100)).collect();
        let (_tx, rx) = watch::channel(Arc::new(targets));
        let observer = Arc::new(Count(AtomicUsize::new(0)));
        let stop = CancellationToken::new();
        let checker =
            tokio::spawn(run(Arc::new(HealthRegistry::default()), rx, observer.clone(), 4, stop.clone()));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while observer.0.load(Ordering::Relaxed) < 80 {
            assert!(std::time::Instant::now() < deadline, "probes keep running");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.cancel();
        checker.await.unwrap();
        let most = most.load(Ordering::SeqCst);
        assert!(most <= 4, "{most} probes at once with 4 workers");
        assert!(most >= 2, "probes do run side by side ({most})");
    }
}
