//! The ordered CDN host list and its health, as seed `000` §3.3–3.4 describes it, with
//! Envoy-style outlier detection as an option.
//!
//! Hosts are tried in `hostListConfig` order. A host is ejected ("isDisabled") after
//! `consecutive_failures` failures in a row (the seed: 1). An ejected host is not used until a
//! background `HEAD` probe of a real URL on it answers 2xx. The first probe comes after the
//! longer of the revive interval and its ejection time (`base_ejection` × number of times it
//! was ejected, capped at `max_ejection`, as Envoy grows it; 0 in the seed), later ones every
//! revive interval. Pure: every method takes the current time.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EjectionPolicy {
    /// Failures in a row that eject a host. 1 is the seed's behaviour.
    pub consecutive_failures: u32,
    /// Ejection time for the first ejection; the n-th ejection lasts n times this.
    pub base_ejection: Duration,
    pub max_ejection: Duration,
}

impl EjectionPolicy {
    /// Seed `000`: disable a host on its first failure, probe it at the next revive interval.
    pub const SEED: Self =
        Self { consecutive_failures: 1, base_ejection: Duration::ZERO, max_ejection: Duration::ZERO };

    /// Envoy's outlier detection defaults: 5 consecutive failures, 30 s base ejection time,
    /// at most 300 s.
    pub const ENVOY: Self = Self {
        consecutive_failures: 5,
        base_ejection: Duration::from_secs(30),
        max_ejection: Duration::from_secs(300),
    };

    fn ejection_time(&self, ejections: u32) -> Duration {
        self.base_ejection.saturating_mul(ejections).min(self.max_ejection.max(self.base_ejection))
    }
}

impl Default for EjectionPolicy {
    fn default() -> Self {
        Self::SEED
    }
}

#[derive(Debug, Clone)]
struct HostState {
    host: String,
    disabled: bool,
    failures: u32,
    ejections: u32,
    /// Earliest time of the next revive probe, while disabled.
    probe_at: Instant,
    /// The URL whose failure disabled the host: probes ask for a real object, not `/`, which
    /// a CDN may well answer 404.
    probe_url: Option<String>,
}

impl HostState {
    fn new(host: String, now: Instant) -> Self {
        Self { host, disabled: false, failures: 0, ejections: 0, probe_at: now, probe_url: None }
    }
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureEffect {
    /// Counted; the host stays in use (threshold not reached).
    Counted,
    /// The host is now disabled.
    Ejected,
    /// Another failure disabled it already (a concurrent request).
    AlreadyDisabled,
}

#[derive(Debug, Clone)]
pub struct HostPool {
    policy: EjectionPolicy,
    hosts: Vec<HostState>,
}

impl HostPool {
    pub fn new(hosts: Vec<String>, policy: EjectionPolicy) -> Self {
        let now = Instant::now();
        Self { policy, hosts: hosts.into_iter().map(|host| HostState::new(host, now)).collect() }
    }

    /// Replaces the host list (a new config version), keeping the state of hosts that remain,
    /// so a publish does not revive a dead host or forget a counting one.
    pub fn set_hosts(&mut self, hosts: Vec<String>) {
        let now = Instant::now();
        let mut old = std::mem::take(&mut self.hosts);
        self.hosts = hosts
            .into_iter()
            .map(|host| match old.iter().position(|s| s.host == host) {
                Some(i) => old.swap_remove(i),
                None => HostState::new(host, now),
            })
            .collect();
    }

    pub fn hosts(&self) -> Vec<String> {
        self.hosts.iter().map(|h| h.host.clone()).collect()
    }

    /// Enabled hosts in failover order; the first is the current host.
    pub fn candidates(&self) -> Vec<String> {
        self.hosts.iter().filter(|h| !h.disabled).map(|h| h.host.clone()).collect()
    }

    pub fn is_disabled(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.host == host && h.disabled)
    }

    pub fn report_success(&mut self, host: &str) {
        if let Some(h) = self.hosts.iter_mut().find(|h| h.host == host) {
            h.failures = 0;
        }
    }

    /// A 5xx or a connection failure while the network works.
    pub fn report_failure(
        &mut self,
        host: &str,
        url: &str,
        now: Instant,
        revive_interval: Duration,
    ) -> FailureEffect {
        let policy = self.policy;
        let Some(h) = self.hosts.iter_mut().find(|h| h.host == host) else { return FailureEffect::Counted };
        if h.disabled {
            return FailureEffect::AlreadyDisabled;
        }
        h.failures += 1;
        if h.failures < policy.consecutive_failures.max(1) {
            return FailureEffect::Counted;
        }
        h.disabled = true;
        h.failures = 0;
        h.ejections = h.ejections.saturating_add(1);
        h.probe_at = now + revive_interval.max(policy.ejection_time(h.ejections));
        h.probe_url = Some(url.to_owned());
        FailureEffect::Ejected
    }

    /// Disabled hosts whose probe is due, with the URL to probe.
    pub fn due_probes(&self, now: Instant) -> Vec<(String, String)> {
        self.hosts
            .iter()
            .filter(|h| h.disabled && h.probe_at <= now)
            .filter_map(|h| Some((h.host.clone(), h.probe_url.clone()?)))
            .collect()
    }

    /// The result of a revive probe.
    pub fn probe_result(&mut self, host: &str, ok: bool, now: Instant, revive_interval: Duration) {
        if let Some(h) = self.hosts.iter_mut().find(|h| h.host == host && h.disabled) {
            if ok {
                h.disabled = false;
                h.failures = 0;
                h.probe_url = None;
            } else {
                h.probe_at = now + revive_interval;
            }
        }
    }

    /// The earliest pending probe time, for the background task's sleep.
    pub fn next_probe_at(&self) -> Option<Instant> {
        self.hosts.iter().filter(|h| h.disabled).map(|h| h.probe_at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(policy: EjectionPolicy) -> HostPool {
        HostPool::new(vec!["a.cdn.com".into(), "b.cdn.com".into(), "c.cdn.com".into()], policy)
    }

    const REVIVE: Duration = Duration::from_secs(600);

    #[tokio::test(start_paused = true)]
    async fn seed_behaviour_ejects_on_first_failure_and_revives_by_probe() {
        let mut p = pool(EjectionPolicy::SEED);
        assert_eq!(p.candidates()[0], "a.cdn.com");
        let now = Instant::now();
        assert_eq!(
            p.report_failure("a.cdn.com", "https://a.cdn.com/x.jpg", now, REVIVE),
            FailureEffect::Ejected
        );
        assert_eq!(p.candidates(), ["b.cdn.com", "c.cdn.com"]);
        // No probe before the revive interval.
        assert!(p.due_probes(Instant::now()).is_empty());
        tokio::time::advance(REVIVE).await;
        assert_eq!(
            p.due_probes(Instant::now()),
            [("a.cdn.com".to_string(), "https://a.cdn.com/x.jpg".to_string())]
        );
        // A failed probe waits another interval.
        p.probe_result("a.cdn.com", false, Instant::now(), REVIVE);
        assert!(p.due_probes(Instant::now()).is_empty());
        tokio::time::advance(REVIVE).await;
        p.probe_result("a.cdn.com", true, Instant::now(), REVIVE);
        assert_eq!(p.candidates()[0], "a.cdn.com", "traffic moves back to the primary");
    }

    #[tokio::test(start_paused = true)]
    async fn envoy_thresholds_and_growing_ejection() {
        let policy = EjectionPolicy {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(75),
        };
        let mut p = pool(policy);
        let revive = Duration::from_secs(10);
        let fail = |p: &mut HostPool| p.report_failure("a.cdn.com", "u", Instant::now(), revive);
        assert_eq!(fail(&mut p), FailureEffect::Counted);
        // A success in between resets the count.
        p.report_success("a.cdn.com");
        assert_eq!(fail(&mut p), FailureEffect::Counted);
        assert_eq!(fail(&mut p), FailureEffect::Counted);
        assert_eq!(fail(&mut p), FailureEffect::Ejected);
        // First ejection: 30 s before the first probe, not the 10 s interval.
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(p.due_probes(Instant::now()).is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(p.due_probes(Instant::now()).len(), 1);
        p.probe_result("a.cdn.com", true, Instant::now(), revive);
        // Second ejection: 60 s; third: capped at 75 s.
        for expected in [60, 75] {
            for _ in 0..3 {
                fail(&mut p);
            }
            tokio::time::advance(Duration::from_secs(expected - 1)).await;
            assert!(p.due_probes(Instant::now()).is_empty(), "ejection {expected}s");
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(p.due_probes(Instant::now()).len(), 1);
            p.probe_result("a.cdn.com", true, Instant::now(), revive);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn new_host_lists_keep_known_state() {
        let mut p = pool(EjectionPolicy::SEED);
        p.report_failure("b.cdn.com", "u", Instant::now(), REVIVE);
        p.set_hosts(vec!["d.cdn.com".into(), "b.cdn.com".into()]);
        assert_eq!(p.candidates(), ["d.cdn.com"]);
        assert!(p.is_disabled("b.cdn.com"));
        p.set_hosts(vec![]);
        assert!(p.candidates().is_empty());
    }
}
