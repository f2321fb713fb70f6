//! The answer cache: per network and name, by TTL, with refresh ahead and stale reuse.
//!
//! Pure: every method takes the current time, so tests drive it with a paused tokio clock.
//! Keyed by network (`"wifi:home"`, `"cellular"`): answers are chosen for the client's
//! address, so after a Wi-Fi/cellular switch the other network's answers point at the wrong
//! carrier and must not be reused.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// At most this many entries are kept; the oldest go first. A phone resolves a few dozen names.
pub const MAX_ENTRIES: usize = 4096;

#[derive(Debug, Clone)]
struct Entry {
    ips: Vec<IpAddr>,
    ttl: Duration,
    stored: Instant,
    refreshing: bool,
    /// Consecutive failed refreshes, and when the next may start.
    failures: u32,
    retry_at: Option<Instant>,
}

/// Wait after the n-th failed refresh in a row: 5 s doubling, at most 5 min, so a service
/// that refuses a name is not asked again on every use.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(5)
        .saturating_mul(1 << failures.saturating_sub(1).min(6))
        .min(Duration::from_secs(300))
}

/// What the cache holds for a name, relative to `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Within its TTL. `refresh` is set once the entry is past 75% of it: the caller answers
    /// from the cache and refreshes in the background (only the first caller is told).
    Fresh {
        ips: Vec<IpAddr>,
        remaining: Duration,
        refresh: bool,
    },
    /// Past its TTL by `age`. The caller may reuse it ("optimistic DNS") while refreshing;
    /// `refresh` as above.
    Expired {
        ips: Vec<IpAddr>,
        age: Duration,
        refresh: bool,
    },
    Miss,
}

#[derive(Debug, Default)]
pub struct Cache {
    entries: HashMap<(String, String), Entry>,
}

impl Cache {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn lookup(&mut self, network: &str, name: &str, now: Instant) -> Lookup {
        let Some(e) = self.entries.get_mut(&(network.to_owned(), name.to_owned())) else {
            return Lookup::Miss;
        };
        let age = now.saturating_duration_since(e.stored);
        let due = e.retry_at.is_none_or(|t| now >= t);
        let refresh = !e.refreshing && due && age * 4 >= e.ttl * 3;
        if refresh {
            e.refreshing = true;
        }
        if age < e.ttl {
            Lookup::Fresh { ips: e.ips.clone(), remaining: e.ttl.saturating_sub(age), refresh }
        } else {
            Lookup::Expired { ips: e.ips.clone(), age: age.saturating_sub(e.ttl), refresh }
        }
    }

    /// Whether a lookup of `name` would not be answered fresh without a refresh (a miss, an
    /// expired entry, or one past 75% of its TTL), without marking anything: for pre-resolve.
    pub fn needs_answer(&self, network: &str, name: &str, now: Instant) -> bool {
        self.entries
            .get(&(network.to_owned(), name.to_owned()))
            .is_none_or(|e| now.saturating_duration_since(e.stored) * 4 >= e.ttl * 3)
    }

    /// The addresses held for `name`, fresh or not, without marking anything.
    pub fn peek(&self, network: &str, name: &str) -> Option<Vec<IpAddr>> {
        self.entries.get(&(network.to_owned(), name.to_owned())).map(|e| e.ips.clone())
    }

    /// Up to `limit` names cached for `network`, the most recently stored first: the names in
    /// use, re-resolved after a network change.
    pub fn names(&self, network: &str, limit: usize) -> Vec<String> {
        let mut list: Vec<(&String, Instant)> = self
            .entries
            .iter()
            .filter(|((n, _), _)| n == network)
            .map(|((_, name), e)| (name, e.stored))
            .collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        list.into_iter().take(limit).map(|(n, _)| n.clone()).collect()
    }

    pub fn insert(&mut self, network: &str, name: &str, ips: Vec<IpAddr>, ttl: Duration, now: Instant) {
        if self.entries.len() >= MAX_ENTRIES {
            if let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.stored).map(|(k, _)| k.clone()) {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(
            (network.to_owned(), name.to_owned()),
            Entry { ips, ttl, stored: now, refreshing: false, failures: 0, retry_at: None },
        );
    }

    /// A refresh that failed: a later use tries again after a growing wait.
    pub fn refresh_failed(&mut self, network: &str, name: &str, now: Instant) {
        if let Some(e) = self.entries.get_mut(&(network.to_owned(), name.to_owned())) {
            e.refreshing = false;
            e.failures = e.failures.saturating_add(1);
            e.retry_at = Some(now + backoff(e.failures));
        }
    }

    /// A refresh that was handed out but not started (the caller looks the name up itself).
    pub fn refresh_released(&mut self, network: &str, name: &str) {
        if let Some(e) = self.entries.get_mut(&(network.to_owned(), name.to_owned())) {
            e.refreshing = false;
        }
    }

    pub fn remove(&mut self, network: &str, name: &str) {
        self.entries.remove(&(network.to_owned(), name.to_owned()));
    }

    /// Writes the cache to `path` atomically (temp file, fsync, rename), with wall-clock
    /// times, since `Instant`s mean nothing to the next process.
    pub fn save(&self, path: &Path, now: Instant) -> std::io::Result<()> {
        crate::fsutil::write_atomic(path, &self.to_bytes(now))
    }

    /// What [`Cache::save`] writes.
    pub fn to_bytes(&self, now: Instant) -> Vec<u8> {
        let wall = httpdns_core::clock::now();
        let records: Vec<Record> = self
            .entries
            .iter()
            .map(|((network, name), e)| {
                let age = now.saturating_duration_since(e.stored);
                let stored = wall.checked_sub(age).unwrap_or(UNIX_EPOCH);
                Record {
                    network: network.clone(),
                    name: name.clone(),
                    ips: e.ips.clone(),
                    ttl_ms: e.ttl.as_millis() as u64,
                    stored_unix_ms: stored.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64,
                }
            })
            .collect();
        serde_json::to_vec(&File { version: 1, records }).expect("cache records serialise")
    }

    /// Loads what `save` wrote. Entries expired for longer than `keep_expired` are dropped
    /// (the SDKs' "expiredThresholdMillis"). A missing or unreadable file is an empty cache:
    /// the cache is an optimisation and must never stop the app.
    pub fn load(path: &Path, now: Instant, keep_expired: Duration) -> Self {
        let mut cache = Self::new();
        let Ok(bytes) = std::fs::read(path) else { return cache };
        let Ok(file) = serde_json::from_slice::<File>(&bytes) else {
            tracing::warn!(path = %path.display(), "Ignoring an unreadable DNS cache file.");
            return cache;
        };
        let wall_now = httpdns_core::clock::unix_ms();
        for r in file.records.into_iter().take(MAX_ENTRIES) {
            let age = Duration::from_millis(wall_now.saturating_sub(r.stored_unix_ms));
            let ttl = Duration::from_millis(r.ttl_ms);
            if age > ttl + keep_expired || r.ips.is_empty() {
                continue;
            }
            let Some(stored) = now.checked_sub(age) else { continue };
            cache.entries.insert(
                (r.network, r.name),
                Entry { ips: r.ips, ttl, stored, refreshing: false, failures: 0, retry_at: None },
            );
        }
        cache
    }
}

#[derive(Serialize, Deserialize)]
struct File {
    version: u32,
    records: Vec<Record>,
}

#[derive(Serialize, Deserialize)]
struct Record {
    network: String,
    name: String,
    ips: Vec<IpAddr>,
    ttl_ms: u64,
    stored_unix_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn fresh_then_refresh_at_75_percent_then_expired() {
        let mut c = Cache::new();
        c.insert("wifi", "a.example.com", vec![ip("1.1.1.1")], Duration::from_secs(100), Instant::now());
        let l = c.lookup("wifi", "a.example.com", Instant::now());
        assert_eq!(
            l,
            Lookup::Fresh { ips: vec![ip("1.1.1.1")], remaining: Duration::from_secs(100), refresh: false }
        );
        tokio::time::advance(Duration::from_secs(74)).await;
        assert!(matches!(
            c.lookup("wifi", "a.example.com", Instant::now()),
            Lookup::Fresh { refresh: false, .. }
        ));
        tokio::time::advance(Duration::from_secs(1)).await;
        // Past 75%: the first user is told to refresh, later ones are not (one refresh at a time).
        assert!(matches!(
            c.lookup("wifi", "a.example.com", Instant::now()),
            Lookup::Fresh { refresh: true, .. }
        ));
        assert!(matches!(
            c.lookup("wifi", "a.example.com", Instant::now()),
            Lookup::Fresh { refresh: false, .. }
        ));
        c.refresh_failed("wifi", "a.example.com", Instant::now());
        // After a failure the next refresh waits 5 s, then 10 s after a second failure.
        assert!(matches!(
            c.lookup("wifi", "a.example.com", Instant::now()),
            Lookup::Fresh { refresh: false, .. }
        ));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(matches!(
            c.lookup("wifi", "a.example.com", Instant::now()),
            Lookup::Fresh { refresh: true, .. }
        ));
        c.refresh_failed("wifi", "a.example.com", Instant::now());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(matches!(
            c.lookup("wifi", "a.example.com", Instant::now()),
            Lookup::Fresh { refresh: false, .. }
        ));
        tokio::time::advance(Duration::from_secs(16)).await;
        assert_eq!(
            c.lookup("wifi", "a.example.com", Instant::now()),
            Lookup::Expired { ips: vec![ip("1.1.1.1")], age: Duration::from_secs(5), refresh: true }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn peeks_without_marking() {
        let mut c = Cache::new();
        c.insert("wifi", "a.example.com", vec![ip("1.1.1.1")], Duration::from_secs(100), Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        c.insert("wifi", "b.example.com", vec![ip("2.2.2.2")], Duration::from_secs(100), Instant::now());
        c.insert("cellular", "c.example.com", vec![ip("3.3.3.3")], Duration::from_secs(100), Instant::now());
        assert_eq!(c.names("wifi", 10), ["b.example.com", "a.example.com"]);
        assert_eq!(c.names("wifi", 1), ["b.example.com"]);
        assert!(!c.needs_answer("wifi", "a.example.com", Instant::now()));
        assert!(c.needs_answer("wifi", "z.example.com", Instant::now()));
        tokio::time::advance(Duration::from_secs(74)).await;
        assert!(c.needs_answer("wifi", "a.example.com", Instant::now()), "past 75%");
        // Nothing was marked: the first lookup still gets the refresh.
        assert!(matches!(
            c.lookup("wifi", "a.example.com", Instant::now()),
            Lookup::Fresh { refresh: true, .. }
        ));
        assert_eq!(c.peek("wifi", "a.example.com"), Some(vec![ip("1.1.1.1")]));
        assert_eq!(c.peek("wifi", "c.example.com"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn networks_do_not_share_answers() {
        let mut c = Cache::new();
        c.insert("wifi:home", "a.example.com", vec![ip("1.1.1.1")], Duration::from_secs(60), Instant::now());
        assert_eq!(c.lookup("cellular", "a.example.com", Instant::now()), Lookup::Miss);
        assert!(matches!(c.lookup("wifi:home", "a.example.com", Instant::now()), Lookup::Fresh { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_size_evicts_the_oldest() {
        let mut c = Cache::new();
        for i in 0..MAX_ENTRIES + 5 {
            c.insert(
                "n",
                &format!("h{i}.example.com"),
                vec![ip("1.1.1.1")],
                Duration::from_secs(60),
                Instant::now(),
            );
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(c.len(), MAX_ENTRIES);
        assert_eq!(c.lookup("n", "h0.example.com", Instant::now()), Lookup::Miss);
        assert!(matches!(
            c.lookup("n", &format!("h{}.example.com", MAX_ENTRIES + 4), Instant::now()),
            Lookup::Fresh { .. }
        ));
    }

    #[tokio::test]
    async fn persists_and_drops_long_expired_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dns-cache.json");
        let mut c = Cache::new();
        let now = Instant::now();
        c.insert("wifi", "keep.example.com", vec![ip("1.1.1.1")], Duration::from_secs(600), now);
        c.insert(
            "wifi",
            "old.example.com",
            vec![ip("2.2.2.2")],
            Duration::from_secs(1),
            now - Duration::from_secs(100),
        );
        c.save(&path, now).unwrap();
        let mut loaded = Cache::load(&path, Instant::now(), Duration::from_secs(10));
        assert_eq!(loaded.len(), 1);
        let Lookup::Fresh { ips, remaining, .. } = loaded.lookup("wifi", "keep.example.com", Instant::now())
        else {
            panic!("kept entry is fresh")
        };
        assert_eq!(ips, vec![ip("1.1.1.1")]);
        assert!(remaining > Duration::from_secs(590));
        // A keep-expired window long enough brings the old one back as expired.
        let mut all = Cache::load(&path, Instant::now(), Duration::from_secs(1000));
        assert!(matches!(all.lookup("wifi", "old.example.com", Instant::now()), Lookup::Expired { .. }));
        // Garbage is an empty cache, not an error.
        std::fs::write(&path, b"{not json").unwrap();
        assert!(Cache::load(&path, Instant::now(), Duration::ZERO).is_empty());
    }
}
