//! A token bucket per client address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Entries kept before idle ones are swept.
const SWEEP_AT: usize = 50_000;

#[derive(Debug)]
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    // A std mutex: a map update per request, never held across an await.
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl RateLimiter {
    pub(crate) fn new(rate_per_s: f64, burst: f64) -> Self {
        Self { rate: rate_per_s, burst: burst.max(1.0), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a token for `client`; false when it has none left.
    pub(crate) fn allow(&self, client: IpAddr) -> bool {
        let now = Instant::now();
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= SWEEP_AT {
            let (burst, rate) = (self.burst, self.rate);
            // A bucket idle long enough to be full again carries no information.
            map.retain(|_, (_, last)| now.duration_since(*last).as_secs_f64() * rate < burst);
        }
        let (tokens, last) = map.entry(client).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.rate).min(self.burst);
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
        let a: IpAddr = "1.2.3.4".parse().unwrap();
        let b: IpAddr = "1.2.3.5".parse().unwrap();
        assert!(r.allow(a) && r.allow(a) && r.allow(a));
        assert!(!r.allow(a));
        assert!(r.allow(b), "per client");
    }
}
