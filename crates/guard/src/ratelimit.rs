//! Token buckets by key (a client address, an account id).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Instant;

/// Entries kept before idle ones are swept.
const SWEEP_AT: usize = 50_000;

#[derive(Debug)]
pub struct RateLimiter<K> {
    rate: f64,
    burst: f64,
    // A blocking mutex: a map update per request, never held across an await.
    buckets: Mutex<HashMap<K, (f64, Instant)>>,
}

impl<K: Hash + Eq> RateLimiter<K> {
    /// A limiter whose keys share one rate and burst (see [`RateLimiter::allow_at`] for keys
    /// with rates of their own).
    pub fn new(rate_per_s: f64, burst: f64) -> Self {
        Self { rate: rate_per_s, burst: burst.max(1.0), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a token for `key`; false when it has none left.
    pub fn allow(&self, key: K) -> bool {
        self.allow_at(key, self.rate, self.burst)
    }

    /// Whether `key` has a token left, without taking it.
    pub fn peek(&self, key: &K) -> bool {
        let now = Instant::now();
        let map = self.buckets.lock();
        map.get(key).is_none_or(|(tokens, last)| {
            (tokens + now.duration_since(*last).as_secs_f64() * self.rate).min(self.burst) >= 1.0
        })
    }

    /// Takes a token for `key` at `rate` per second with `burst` tokens at most.
    pub fn allow_at(&self, key: K, rate: f64, burst: f64) -> bool {
        let now = Instant::now();
        let mut map = self.buckets.lock();
        if map.len() >= SWEEP_AT {
            let (burst, rate) = (self.burst, self.rate);
            // A bucket idle long enough to be full again carries no information.
            map.retain(|_, (_, last)| now.duration_since(*last).as_secs_f64() * rate < burst);
        }
        let (tokens, last) = map.entry(key).or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refuse() {
        let r = RateLimiter::new(0.001, 3.0);
        let a: std::net::IpAddr = "1.2.3.4".parse().unwrap();
        let b: std::net::IpAddr = "1.2.3.5".parse().unwrap();
        assert!(r.allow(a) && r.allow(a) && r.allow(a));
        assert!(!r.allow(a));
        assert!(r.allow(b), "per client");
    }
}
