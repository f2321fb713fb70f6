//! Robust aggregation of app feedback.
//!
//! Apps report, per connection attempt, whether it worked and how long the connect took. The
//! aggregate is kept per (node, client ISP, client region). Each reporting client (an IPv4
//! address, or an IPv6 /64) keeps its own exponentially weighted latency and success rate, and
//! the key's estimate is the **median over clients**, used only once at least `min_clients`
//! distinct clients reported. One client, however many reports it sends, moves only its own
//! average, so it can shift the median at most to the neighbouring client's value: that is the
//! outlier bound.
//!
//! When reports are signed by accounts, a client is an (account, address) pair and the median
//! is weighted so that **each account has the same say**, however many addresses report under
//! it: every client of an account weighs `1 / (that account's clients in the key)`. One app's
//! clients alone give the plain median; an account that brings a handful of extra addresses
//! gains no weight by it.
//!
//! The estimate fed to the score is `latency + failure_penalty_ms × (1 − success rate)`, so a
//! node that often fails to connect ranks like a slow one.
//!
//! Time is passed in (milliseconds), which keeps this module pure and testable.

use std::collections::HashMap;
use std::net::IpAddr;

use httpdns_core::Token;

/// Tuning of the aggregation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeedbackConfig {
    /// Distinct clients needed before an aggregate is used.
    pub min_clients: usize,
    /// Clients remembered per key (the most recent).
    pub max_clients_per_key: usize,
    /// A client's reports count for this long after its last one.
    pub client_ttl_ms: u64,
    /// Weight of a new sample in a client's averages.
    pub alpha: f64,
    /// Latency added for a success rate of 0.
    pub failure_penalty_ms: f64,
}

impl Default for FeedbackConfig {
    fn default() -> Self {
        Self {
            min_clients: 3,
            max_clients_per_key: 32,
            client_ttl_ms: 600_000,
            alpha: 0.3,
            failure_penalty_ms: 1000.0,
        }
    }
}

/// What the feedback is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub node: String,
    pub isp: Token,
    pub region: Token,
}

/// The aggregate of a key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Median of the clients' connect latency, in ms.
    pub latency_ms: f64,
    /// Median of the clients' success rates.
    pub success_rate: f64,
    pub clients: usize,
}

impl Estimate {
    /// The latency the score uses.
    pub fn effective_latency_ms(&self, cfg: &FeedbackConfig) -> f64 {
        self.latency_ms + cfg.failure_penalty_ms * (1.0 - self.success_rate.clamp(0.0, 1.0))
    }
}

#[derive(Debug, Clone, Copy)]
struct ClientStat {
    latency: Option<f64>,
    success: f64,
    last_ms: u64,
}

/// Who reported: the signing account (none: unauthenticated feedback) and the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reporter {
    pub account: Option<u32>,
    pub ip: IpAddr,
}

impl Reporter {
    pub fn anonymous(ip: IpAddr) -> Self {
        Self { account: None, ip }
    }
}

#[derive(Debug, Default)]
struct KeyStat {
    clients: HashMap<(Option<u32>, u128), ClientStat>,
    /// The estimate loaded from the database at start-up, used until enough clients report.
    restored: Option<Estimate>,
}

/// The reporting client's identity: the address, or the /64 for IPv6 (one subscriber).
fn client_id(ip: IpAddr) -> u128 {
    match ip.to_canonical() {
        IpAddr::V4(a) => u128::from(a.to_bits()),
        IpAddr::V6(a) => a.to_bits() & !((1u128 << 64) - 1),
    }
}

/// The weighted median of `(value, weight)` pairs: the value where half the total weight is
/// reached; exactly half at a boundary gives the mean of the two neighbours, so equal weights
/// give the plain median.
fn weighted_median(mut v: Vec<(f64, f64)>) -> f64 {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = v.iter().map(|x| x.1).sum();
    let half = total / 2.0;
    let mut acc = 0.0;
    for (i, (value, w)) in v.iter().enumerate() {
        acc += w;
        // A relative tolerance: weights like 1/3 do not sum to exactly one half.
        if (acc - half).abs() <= total * 1e-12 {
            return v.get(i + 1).map_or(*value, |next| (value + next.0) / 2.0);
        }
        if acc > half {
            return *value;
        }
    }
    v.last().map_or(0.0, |x| x.0)
}

/// Feedback aggregates of all keys.
#[derive(Debug, Default)]
pub struct Aggregator {
    cfg: FeedbackConfig,
    keys: HashMap<Key, KeyStat>,
}

/// Longest connect time taken from a report; longer ones are clamped.
pub const MAX_CONNECT_MS: f64 = 60_000.0;

impl Aggregator {
    pub fn new(cfg: FeedbackConfig) -> Self {
        Self { cfg, keys: HashMap::new() }
    }

    pub fn config(&self) -> &FeedbackConfig {
        &self.cfg
    }

    /// Records one report: `connect_ms` is used when `ok`.
    pub fn record(&mut self, key: Key, client: Reporter, ok: bool, connect_ms: Option<f64>, now_ms: u64) {
        let cfg = self.cfg;
        let stat = self.keys.entry(key).or_default();
        let id = (client.account, client_id(client.ip));
        if !stat.clients.contains_key(&id) && stat.clients.len() >= cfg.max_clients_per_key {
            // Make room by forgetting the client heard from least recently.
            if let Some(oldest) = stat.clients.iter().min_by_key(|(_, c)| c.last_ms).map(|(k, _)| *k) {
                stat.clients.remove(&oldest);
            }
        }
        let c = stat.clients.entry(id).or_insert(ClientStat {
            latency: None,
            success: if ok { 1.0 } else { 0.0 },
            last_ms: now_ms,
        });
        c.success += cfg.alpha * (if ok { 1.0 } else { 0.0 } - c.success);
        if ok {
            if let Some(ms) = connect_ms.filter(|m| m.is_finite() && *m >= 0.0) {
                let ms = ms.min(MAX_CONNECT_MS);
                c.latency = Some(match c.latency {
                    None => ms,
                    Some(old) => old + cfg.alpha * (ms - old),
                });
            }
        }
        c.last_ms = now_ms;
    }

    /// Seeds a key with an estimate saved before a restart.
    pub fn restore(&mut self, key: Key, estimate: Estimate) {
        self.keys.entry(key).or_default().restored = Some(estimate);
    }

    fn estimate_of(&self, stat: &KeyStat, now_ms: u64) -> Option<Estimate> {
        let live: Vec<(Option<u32>, &ClientStat)> = stat
            .clients
            .iter()
            .filter(|(_, c)| now_ms.saturating_sub(c.last_ms) <= self.cfg.client_ttl_ms)
            .map(|((account, _), c)| (*account, c))
            .collect();
        if live.len() >= self.cfg.min_clients {
            let mut per_account: HashMap<Option<u32>, f64> = HashMap::new();
            for (a, _) in &live {
                *per_account.entry(*a).or_default() += 1.0;
            }
            let weight = |a: &Option<u32>| 1.0 / per_account[a];
            let latencies: Vec<(f64, f64)> =
                live.iter().filter_map(|(a, c)| Some((c.latency?, weight(a)))).collect();
            let success = weighted_median(live.iter().map(|(a, c)| (c.success, weight(a))).collect());
            let latency =
                if latencies.is_empty() { self.cfg.failure_penalty_ms } else { weighted_median(latencies) };
            return Some(Estimate { latency_ms: latency, success_rate: success, clients: live.len() });
        }
        stat.restored
    }

    /// The estimate of one key, if there is enough feedback.
    pub fn estimate(&self, key: &Key, now_ms: u64) -> Option<Estimate> {
        self.keys.get(key).and_then(|s| self.estimate_of(s, now_ms))
    }

    /// Every key with an estimate.
    pub fn estimates(&self, now_ms: u64) -> Vec<(Key, Estimate)> {
        let mut out: Vec<(Key, Estimate)> = self
            .keys
            .iter()
            .filter_map(|(k, s)| self.estimate_of(s, now_ms).map(|e| (k.clone(), e)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Forgets clients silent for longer than the client TTL and keys left with nothing.
    pub fn expire(&mut self, now_ms: u64) {
        let ttl = self.cfg.client_ttl_ms;
        self.keys.retain(|_, s| {
            s.clients.retain(|_, c| now_ms.saturating_sub(c.last_ms) <= ttl);
            !s.clients.is_empty() || s.restored.is_some()
        });
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            node: "n1".into(),
            isp: Token::parse("unicom").unwrap(),
            region: Token::parse("shanghai").unwrap(),
        }
    }

    fn ip(i: u8) -> Reporter {
        Reporter::anonymous(IpAddr::from([10, 0, 0, i]))
    }

    #[test]
    fn needs_enough_distinct_clients() {
        let mut a = Aggregator::new(FeedbackConfig::default());
        for _ in 0..50 {
            a.record(key(), ip(1), true, Some(10.0), 0);
            a.record(key(), ip(2), true, Some(12.0), 0);
        }
        assert_eq!(a.estimate(&key(), 0), None, "two clients are not enough");
        a.record(key(), ip(3), true, Some(14.0), 0);
        let e = a.estimate(&key(), 0).unwrap();
        assert_eq!((e.latency_ms, e.success_rate, e.clients), (12.0, 1.0, 3));
    }

    #[test]
    fn one_flooding_client_cannot_move_the_median_past_its_neighbours() {
        let mut a = Aggregator::new(FeedbackConfig::default());
        for i in 1..=5 {
            a.record(key(), ip(i), true, Some(10.0 + f64::from(i)), 0);
        }
        let before = a.estimate(&key(), 0).unwrap();
        assert_eq!(before.latency_ms, 13.0);
        for _ in 0..10_000 {
            a.record(key(), ip(5), false, None, 1);
            a.record(key(), ip(5), true, Some(60_000.0), 1);
        }
        let after = a.estimate(&key(), 1).unwrap();
        // The flood moved only client 5: the median latency stays among the honest values and
        // the median success rate stays 1.
        assert_eq!(after.latency_ms, 13.0);
        assert_eq!(after.success_rate, 1.0);
        let cfg = FeedbackConfig::default();
        assert_eq!(after.effective_latency_ms(&cfg), before.effective_latency_ms(&cfg));
    }

    #[test]
    fn ipv6_clients_are_counted_per_64() {
        let mut a = Aggregator::new(FeedbackConfig::default());
        for i in 0..10u16 {
            let ip: IpAddr = format!("2408:8000:1:2::{i:x}").parse().unwrap();
            a.record(key(), Reporter::anonymous(ip), true, Some(5.0), 0);
        }
        assert_eq!(a.estimate(&key(), 0), None, "one subscriber, many addresses");
    }

    #[test]
    fn failures_raise_the_effective_latency() {
        let cfg = FeedbackConfig::default();
        let mut a = Aggregator::new(cfg);
        for i in 1..=3 {
            for _ in 0..20 {
                a.record(key(), ip(i), false, None, 0);
            }
            a.record(key(), ip(i), true, Some(20.0), 0);
        }
        let e = a.estimate(&key(), 0).unwrap();
        assert!(e.success_rate < 0.35, "{e:?}");
        assert!(e.effective_latency_ms(&cfg) > 600.0);
    }

    #[test]
    fn clients_expire_and_restored_estimates_stand_in() {
        let cfg = FeedbackConfig { client_ttl_ms: 1000, ..FeedbackConfig::default() };
        let mut a = Aggregator::new(cfg);
        for i in 1..=3 {
            a.record(key(), ip(i), true, Some(7.0), 0);
        }
        assert!(a.estimate(&key(), 1000).is_some());
        assert!(a.estimate(&key(), 1001).is_none());
        a.expire(2000);
        assert!(a.is_empty());
        a.restore(key(), Estimate { latency_ms: 9.0, success_rate: 1.0, clients: 4 });
        assert_eq!(a.estimate(&key(), 5000).unwrap().latency_ms, 9.0);
    }

    #[test]
    fn an_account_gains_no_weight_from_more_addresses() {
        let mut a = Aggregator::new(FeedbackConfig::default());
        let from = |account, i: u8| Reporter { account: Some(account), ip: IpAddr::from([10, 0, 1, i]) };
        // Two apps whose users see 100 ms.
        for i in 1..=5 {
            a.record(key(), from(1, i), true, Some(100.0), 0);
            a.record(key(), from(2, i), true, Some(100.0), 0);
        }
        // A third account reports 2000 ms from twenty addresses: more clients than both apps.
        for i in 100..120 {
            a.record(key(), from(3, i), true, Some(2000.0), 0);
        }
        let e = a.estimate(&key(), 0).unwrap();
        assert_eq!(e.latency_ms, 100.0, "each account has one say: {e:?}");
        assert_eq!(e.clients, 30);
        // Unweighted, the twenty addresses would have set the median.
        let mut plain = Aggregator::new(FeedbackConfig::default());
        for i in 1..=10 {
            plain.record(key(), ip(i), true, Some(100.0), 0);
        }
        for i in 100..120 {
            plain.record(key(), ip(i), true, Some(2000.0), 0);
        }
        assert_eq!(plain.estimate(&key(), 0).unwrap().latency_ms, 2000.0);
    }

    #[test]
    fn weighted_median_is_the_plain_median_for_equal_weights() {
        assert_eq!(weighted_median(vec![(1.0, 1.0), (3.0, 1.0), (2.0, 1.0)]), 2.0);
        assert_eq!(weighted_median(vec![(1.0, 0.25), (2.0, 0.25), (3.0, 0.25), (4.0, 0.25)]), 2.5);
        assert_eq!(weighted_median(vec![(1.0, 1.0 / 3.0), (5.0, 1.0 / 3.0), (9.0, 1.0 / 3.0)]), 5.0);
        assert_eq!(weighted_median(vec![(1.0, 0.1), (7.0, 0.9)]), 7.0);
    }
}
