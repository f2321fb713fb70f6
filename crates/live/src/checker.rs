//! The active health checker: probes every checked node on its pool's schedule, with a fixed
//! number of worker tasks so that 10,000 nodes never mean 10,000 sockets at once.
//!
//! A scheduler task keeps each target's next due time (first probe at a random offset within
//! the interval, then every interval ± 10% jitter, so probes of many nodes spread out) and hands
//! due probes to the workers over a bounded channel. A node is never probed twice at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use httpdns_core::model::HealthCheckSpec;
use tokio::sync::{mpsc, watch, Mutex};
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

struct Scheduled {
    target: Arc<Target>,
    state: Arc<NodeState>,
    next: Instant,
    in_flight: Arc<AtomicBool>,
}

struct Job {
    target: Arc<Target>,
    state: Arc<NodeState>,
    in_flight: Arc<AtomicBool>,
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
        d - tenth + self.below(tenth * 2)
    }
}

/// Runs the checker until `shutdown`: follows `targets` (republished whenever the model
/// changes) with `workers` probe tasks.
pub async fn run(
    registry: Arc<HealthRegistry>,
    mut targets: watch::Receiver<Arc<Vec<Target>>>,
    observer: Arc<dyn ProbeObserver>,
    workers: usize,
    shutdown: CancellationToken,
) {
    let workers = workers.max(1);
    let (tx, rx) = mpsc::channel::<Job>(workers * 2);
    let rx = Arc::new(Mutex::new(rx));
    let mut pool = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (rx, observer) = (rx.clone(), observer.clone());
        pool.spawn(async move {
            loop {
                // Holding the lock only while waiting for a job: one idle worker waits on the
                // channel, the others wait their turn behind it.
                let job = { rx.lock().await.recv().await };
                let Some(job) = job else { return };
                let result = probe(job.target.addr, &job.target.check).await;
                let latency = result.as_ref().ok().map(|d| d.as_micros() as u64);
                let c = &job.target.check;
                let transition =
                    job.state.record(result.is_ok(), latency, c.healthy_threshold, c.unhealthy_threshold);
                observer.probed(&job.target, &result, transition);
                job.in_flight.store(false, Ordering::Release);
            }
        });
    }

    let mut jitter = Jitter::new();
    let mut schedule: HashMap<String, Scheduled> = HashMap::new();
    let reconcile = |list: &[Target], schedule: &mut HashMap<String, Scheduled>, jitter: &mut Jitter| {
        let now = Instant::now();
        let mut next: HashMap<String, Scheduled> = HashMap::with_capacity(list.len());
        for t in list {
            let kept = schedule.remove(&t.node_id).filter(|s| *s.target == *t);
            let entry = match kept {
                Some(s) => s,
                None => Scheduled {
                    target: Arc::new(t.clone()),
                    state: registry.state(&t.node_id),
                    next: now + jitter.below(Duration::from_millis(t.check.interval_ms)),
                    in_flight: Arc::new(AtomicBool::new(false)),
                },
            };
            next.insert(t.node_id.clone(), entry);
        }
        // Nodes no longer checked go back to up: without checks nothing may keep them out.
        for (id, _) in schedule.drain() {
            if !next.contains_key(&id) {
                registry.state(&id).reset();
            }
        }
        *schedule = next;
    };
    reconcile(&targets.borrow_and_update(), &mut schedule, &mut jitter);

    loop {
        let wake = schedule
            .values()
            .map(|s| s.next)
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = targets.changed() => {
                if changed.is_err() { break }
                let list = targets.borrow_and_update().clone();
                reconcile(&list, &mut schedule, &mut jitter);
            }
            () = tokio::time::sleep_until(wake) => {
                let now = Instant::now();
                for s in schedule.values_mut().filter(|s| s.next <= now) {
                    s.next = now + jitter.around(Duration::from_millis(s.target.check.interval_ms));
                    if s.in_flight.swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    let job = Job { target: s.target.clone(), state: s.state.clone(), in_flight: s.in_flight.clone() };
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        sent = tx.send(job) => if sent.is_err() { break },
                    }
                }
            }
        }
    }
    drop(tx);
    pool.abort_all();
}
