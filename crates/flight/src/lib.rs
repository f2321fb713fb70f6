//! One piece of shared work per key, owned by nobody who waits for it.
//!
//! Every single flight in httpdns (upstream DNS queries, the client library's lookups, config
//! reloads) has the same failure to avoid: the request that started the work goes away (its
//! client hung up, its future was dropped), and everyone who joined it waits for a result that
//! never comes. Here the work runs on a task of its own, so it finishes however its starter
//! ends; its entry is removed by a guard inside that task, so it goes even when the work
//! panics; and every waiter, the starter included, waits at most the bound it passes.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Why a caller got no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlightError {
    /// The work did not finish within the caller's bound (it goes on for the others).
    #[error("the shared work did not finish in time")]
    TimedOut,
    /// The work ended without a result: it panicked, or its runtime shut down.
    #[error("the shared work ended without a result")]
    Abandoned,
}

/// What a caller got: the result, and whether it joined work another caller had started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared<V> {
    pub value: V,
    pub joined: bool,
}

/// The work in flight, by key. Cheap to clone: clones share the map.
pub struct SingleFlight<K, V> {
    inflight: Arc<Mutex<HashMap<K, Entry<V>>>>,
}

struct Entry<V> {
    /// Which run of the key this is, so a finished run never removes a newer one.
    generation: u64,
    result: watch::Receiver<Option<V>>,
}

impl<K, V> Clone for SingleFlight<K, V> {
    fn clone(&self) -> Self {
        Self { inflight: self.inflight.clone() }
    }
}

impl<K, V> Default for SingleFlight<K, V> {
    fn default() -> Self {
        Self { inflight: Arc::default() }
    }
}

impl<K, V> std::fmt::Debug for SingleFlight<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.inflight.lock().len();
        f.debug_struct("SingleFlight").field("in_flight", &n).finish()
    }
}

impl<K, V> SingleFlight<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
{
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys have work in flight.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether work for `key` is in flight.
    pub fn contains(&self, key: &K) -> bool {
        self.lock().contains_key(key)
    }

    /// Joins the work in flight for `key`, or starts `make()` on a task of its own; waits for
    /// its result at most `wait`. `make` is called only when this call starts the work.
    pub async fn run<F, Fut>(&self, key: K, wait: Duration, make: F) -> Result<Shared<V>, FlightError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        let (mut rx, joined) = self.join_or_start(key, make);
        let got = tokio::time::timeout(wait, rx.wait_for(Option::is_some)).await;
        match got {
            Err(_) => Err(FlightError::TimedOut),
            Ok(Err(_)) => Err(FlightError::Abandoned),
            Ok(Ok(v)) => Ok(Shared { value: v.clone().expect("waited for Some"), joined }),
        }
    }

    /// Starts `make()` for `key` unless work for it is in flight, without waiting for it.
    /// Returns whether this call started it.
    pub fn spawn<F, Fut>(&self, key: K, make: F) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        !self.join_or_start(key, make).1
    }

    fn join_or_start<F, Fut>(&self, key: K, make: F) -> (watch::Receiver<Option<V>>, bool)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        let mut map = self.lock();
        if let Some(e) = map.get(&key) {
            return (e.result.clone(), true);
        }
        let (tx, rx) = watch::channel(None);
        let generation = next_generation();
        map.insert(key.clone(), Entry { generation, result: rx.clone() });
        drop(map);
        let guard = Unlist { inflight: self.inflight.clone(), key: Some(key), generation };
        let work = make();
        tokio::spawn(async move {
            // Unlisted before the result is sent: a caller that sees the result and asks
            // again starts fresh work instead of joining this finished run.
            let _guard = guard;
            let value = work.await;
            drop(_guard);
            let _ = tx.send(Some(value));
        });
        (rx, false)
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<K, Entry<V>>> {
        self.inflight.lock()
    }
}

fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Removes the key's entry when the work ends, however it ends (a panic unwinds through it).
struct Unlist<K: Eq + Hash, V> {
    inflight: Arc<Mutex<HashMap<K, Entry<V>>>>,
    key: Option<K>,
    generation: u64,
}

impl<K: Eq + Hash, V> Drop for Unlist<K, V> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut map = self.inflight.lock();
        if map.get(&key).is_some_and(|e| e.generation == self.generation) {
            map.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LONG: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn concurrent_callers_share_one_run() {
        let flight = SingleFlight::<&str, u32>::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let mut joins = Vec::new();
        for _ in 0..20 {
            let (flight, runs) = (flight.clone(), runs.clone());
            joins.push(tokio::spawn(async move {
                flight
                    .run("k", LONG, || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        7
                    })
                    .await
            }));
        }
        let mut joined = 0;
        for j in joins {
            let got = j.await.unwrap().unwrap();
            assert_eq!(got.value, 7);
            joined += usize::from(got.joined);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(joined, 19);
        assert!(flight.is_empty(), "the finished run is unlisted");
    }

    /// The bug this crate exists for: the starter goes away mid-wait, and the next caller
    /// still gets the result in time.
    #[tokio::test]
    async fn the_starter_hanging_up_harms_nobody() {
        let flight = SingleFlight::<&str, u32>::new();
        let starter = {
            let flight = flight.clone();
            tokio::spawn(async move {
                flight
                    .run("k", LONG, || async {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        1
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        starter.abort();
        let _ = starter.await;
        let started = std::time::Instant::now();
        let got = flight.run("k", LONG, || async { unreachable!("joins the running work") }).await.unwrap();
        assert_eq!(got, Shared { value: 1, joined: true });
        assert!(started.elapsed() < Duration::from_secs(1));
        // A dropped `run` future (not a task) behaves the same.
        let dropped = flight.run("j", LONG, || async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            2
        });
        let _ = tokio::time::timeout(Duration::from_millis(10), dropped).await;
        let got = flight.run("j", LONG, || async { unreachable!() }).await.unwrap();
        assert_eq!(got.value, 2);
    }

    #[tokio::test]
    async fn a_panic_ends_the_wait_and_the_next_caller_starts_over() {
        let flight = SingleFlight::<&str, u32>::new();
        let got = flight.run("k", LONG, || async { panic!("work failed") }).await;
        assert_eq!(got, Err(FlightError::Abandoned));
        assert!(flight.is_empty(), "a panic unlists the key");
        let got = flight.run("k", LONG, || async { 3 }).await.unwrap();
        assert_eq!(got, Shared { value: 3, joined: false });
    }

    #[tokio::test]
    async fn waits_are_bounded_and_the_work_goes_on() {
        let flight = SingleFlight::<&str, u32>::new();
        let got = flight
            .run("k", Duration::from_millis(20), || async {
                tokio::time::sleep(Duration::from_millis(150)).await;
                4
            })
            .await;
        assert_eq!(got, Err(FlightError::TimedOut));
        assert!(flight.contains(&"k"), "still running for others");
        let got = flight.run("k", LONG, || async { unreachable!() }).await.unwrap();
        assert_eq!(got.value, 4);
    }

    #[tokio::test]
    async fn spawn_starts_once_without_waiting() {
        let flight = SingleFlight::<&str, u32>::new();
        assert!(flight.spawn("k", || async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            5
        }));
        assert!(!flight.spawn("k", || async { unreachable!() }));
        let got = flight.run("k", LONG, || async { unreachable!() }).await.unwrap();
        assert_eq!(got, Shared { value: 5, joined: true });
    }
}
