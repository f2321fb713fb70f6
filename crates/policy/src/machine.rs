//! One place's state machine (docs/policy.md). Pure: the evidence, the threshold, the server's
//! own view and the time are passed in.
//!
//! ```text
//! healthy --(failure rate > threshold, >= min requests)--> degraded (share = ramp[0])
//! degraded --(probe cohort <= threshold, held a step, checks agree)--> recovering ramp[1]
//! recovering ramp[i] --(held a step, cohorts compare well)--> ramp[i+1] ... ramp[last] = healthy
//! recovering ramp[i] --(the ramped cohort regresses)--> ramp[i-1] (degraded at ramp[0]), held anew
//! ```

use std::time::Duration;

use httpdns_config::policy::PlaceState;
use httpdns_store::events::PolicyCounts;

use crate::settings::Settings;

/// A place's state and the step of the ramp it holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Status {
    pub state: PlaceState,
    /// Index into the ramp of the share in force (the last index when healthy).
    pub step: usize,
    /// When the step began (milliseconds since the Unix epoch).
    pub since_ms: i64,
}

impl Status {
    pub fn healthy(ramp: &[f64], now_ms: i64) -> Self {
        Self { state: PlaceState::Healthy, step: ramp.len() - 1, since_ms: now_ms }
    }

    /// The share of the place's rate in force.
    pub fn share(&self, ramp: &[f64]) -> f64 {
        match self.state {
            PlaceState::Healthy => 1.0,
            _ => ramp.get(self.step).copied().unwrap_or(1.0),
        }
    }
}

/// What was seen of a place since its step began (or, when healthy, since its last window
/// closed), by the device's side of the place's rate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Evidence {
    pub on: PolicyCounts,
    pub off: PolicyCounts,
    pub unknown: PolicyCounts,
}

impl Evidence {
    /// Every count scaled by `f`: a window's evidence fading into the next.
    pub fn decayed(&self, f: f64) -> Self {
        let d = |c: &PolicyCounts| PolicyCounts {
            requests: c.requests * f,
            reports: c.reports * f,
            errors: c.errors * f,
            fallbacks: c.fallbacks * f,
            latency_ms_sum: c.latency_ms_sum * f,
            latency_count: c.latency_count * f,
        };
        Self { on: d(&self.on), off: d(&self.off), unknown: d(&self.unknown) }
    }
}

/// Failures per request: failed requests and fallbacks to LocalDNS, at most 1.
pub fn failure_rate(c: &PolicyCounts) -> f64 {
    if c.requests > 0.0 {
        ((c.errors + c.fallbacks) / c.requests).min(1.0)
    } else {
        0.0
    }
}

/// Mean request latency in milliseconds, when any was reported.
pub fn latency(c: &PolicyCounts) -> Option<f64> {
    (c.latency_count > 0.0).then(|| c.latency_ms_sum / c.latency_count)
}

/// A ramped cohort regresses when its failure rate passes both the threshold and half again
/// the held-back cohort's, or its latency passes half again the held-back one's plus 50 ms:
/// the margins keep sampling noise from stepping back a healthy ramp.
pub const RATE_MARGIN: f64 = 1.5;
pub const LATENCY_MARGIN: f64 = 1.5;
pub const LATENCY_SLACK_MS: f64 = 50.0;

/// What a tick decided for one place.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Nothing changes; `reset` closes the evidence window (it held enough to judge).
    Stay { reset: bool },
    /// A new status, and why.
    Change { next: Status, reason: String },
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

/// Decides one place. `checks_ok`: the server's own health checks see the place's nodes up
/// (or it has none of its own).
pub fn decide(
    status: &Status,
    ev: &Evidence,
    threshold: f64,
    checks_ok: bool,
    now_ms: i64,
    s: &Settings,
) -> Outcome {
    let held = Duration::from_millis((now_ms - status.since_ms).max(0) as u64) >= s.step;
    let last = s.ramp.len() - 1;
    let to = |state: PlaceState, step: usize| Status { state, step, since_ms: now_ms };
    match status.state {
        PlaceState::Healthy => {
            // Devices that do not say their side are counted with those on HTTPDNS (older
            // apps and the vendors' SDKs all use it).
            let mut seen = ev.on;
            seen.add(&ev.unknown);
            if !s.enough(&seen) {
                return Outcome::Stay { reset: false };
            }
            let rate = failure_rate(&seen);
            if rate > threshold {
                Outcome::Change {
                    next: to(PlaceState::Degraded, 0),
                    reason: format!(
                        "failure rate {} of {:.0} requests passed the place's threshold {}",
                        pct(rate),
                        seen.requests,
                        pct(threshold)
                    ),
                }
            } else {
                Outcome::Stay { reset: true }
            }
        }
        PlaceState::Degraded => {
            if !s.enough(&ev.on) {
                return Outcome::Stay { reset: false };
            }
            let rate = failure_rate(&ev.on);
            if rate > threshold {
                return Outcome::Stay { reset: true };
            }
            if !held || !checks_ok {
                return Outcome::Stay { reset: false };
            }
            let next = if last == 1 { to(PlaceState::Healthy, last) } else { to(PlaceState::Recovering, 1) };
            Outcome::Change {
                next,
                reason: format!(
                    "the probe share succeeds again: failure rate {} of {:.0} requests, threshold {}",
                    pct(rate),
                    ev.on.requests,
                    pct(threshold)
                ),
            }
        }
        PlaceState::Recovering => {
            if !s.enough(&ev.on) {
                return Outcome::Stay { reset: false };
            }
            let (on, off) = (failure_rate(&ev.on), failure_rate(&ev.off));
            let slower = match (latency(&ev.on), latency(&ev.off)) {
                (Some(a), Some(b)) if ev.off.latency_count > 0.0 => a > b * LATENCY_MARGIN + LATENCY_SLACK_MS,
                _ => false,
            };
            let worse = on > threshold && (ev.off.requests <= 0.0 || on > off * RATE_MARGIN);
            let share = s.ramp[status.step];
            if worse || slower {
                let back = status.step - 1;
                let state = if back == 0 { PlaceState::Degraded } else { PlaceState::Recovering };
                let why = if worse {
                    format!("failure rate {} against the held-back {}", pct(on), pct(off))
                } else {
                    format!(
                        "latency {:.0} ms against the held-back {:.0} ms",
                        latency(&ev.on).unwrap_or(0.0),
                        latency(&ev.off).unwrap_or(0.0)
                    )
                };
                return Outcome::Change {
                    next: to(state, back),
                    reason: format!(
                        "regression at the {} step: {why}; stepping back and holding",
                        pct(share)
                    ),
                };
            }
            if !held {
                return Outcome::Stay { reset: false };
            }
            let step = status.step + 1;
            let state = if step == last { PlaceState::Healthy } else { PlaceState::Recovering };
            Outcome::Change {
                next: to(state, step),
                reason: format!(
                    "the {} step held: failure rate {} against the held-back {} over {:.0} requests",
                    pct(share),
                    pct(on),
                    pct(off),
                    ev.on.requests
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings { min_requests: 100.0, step: Duration::from_secs(300), ..Settings::default() }
    }

    fn counts(requests: f64, failures: f64, latency: f64) -> PolicyCounts {
        PolicyCounts {
            requests,
            reports: requests,
            errors: failures,
            fallbacks: 0.0,
            latency_ms_sum: latency * requests,
            latency_count: requests,
        }
    }

    const STEP: i64 = 300_000;

    /// Weighted requests without the reports behind them move nothing: one failing event sampled
    /// at `1e-6` (a million requests) neither degrades a healthy place nor recovers a degraded one.
    #[test]
    fn heavy_weights_without_reports_decide_nothing() {
        let s = settings();
        let one_heavy = PolicyCounts { reports: 1.0, ..counts(1e6, 1e6, 10.0) };
        let healthy = Status::healthy(&s.ramp, 0);
        let ev = Evidence { on: one_heavy, ..Default::default() };
        assert_eq!(decide(&healthy, &ev, 0.01, true, 1, &s), Outcome::Stay { reset: false });
        let nineteen = PolicyCounts { reports: 19.0, ..counts(1e6, 1e6, 10.0) };
        let ev = Evidence { on: nineteen, ..Default::default() };
        assert_eq!(decide(&healthy, &ev, 0.01, true, 1, &s), Outcome::Stay { reset: false });
        let twenty = PolicyCounts { reports: 20.0, ..counts(1e6, 1e6, 10.0) };
        let ev = Evidence { on: twenty, ..Default::default() };
        assert!(matches!(decide(&healthy, &ev, 0.01, true, 1, &s), Outcome::Change { .. }));
        let degraded = Status { state: PlaceState::Degraded, step: 0, since_ms: 0 };
        let good_but_one =
            Evidence { on: PolicyCounts { reports: 1.0, ..counts(1e6, 0.0, 10.0) }, ..Default::default() };
        assert_eq!(
            decide(&degraded, &good_but_one, 0.01, true, STEP * 2, &s),
            Outcome::Stay { reset: false }
        );
    }

    #[test]
    fn a_failing_place_degrades_only_with_enough_evidence() {
        let s = settings();
        let healthy = Status::healthy(&s.ramp, 0);
        let few = Evidence { unknown: counts(99.0, 50.0, 10.0), ..Default::default() };
        assert_eq!(decide(&healthy, &few, 0.01, true, 1, &s), Outcome::Stay { reset: false });
        let fine = Evidence { on: counts(200.0, 1.0, 10.0), ..Default::default() };
        assert_eq!(decide(&healthy, &fine, 0.01, true, 1, &s), Outcome::Stay { reset: true });
        let bad =
            Evidence { on: counts(80.0, 10.0, 10.0), unknown: counts(40.0, 5.0, 10.0), ..Default::default() };
        let Outcome::Change { next, reason } = decide(&healthy, &bad, 0.05, true, 7, &s) else { panic!() };
        assert_eq!(next, Status { state: PlaceState::Degraded, step: 0, since_ms: 7 });
        assert_eq!(next.share(&s.ramp), 0.01);
        assert!(reason.contains("12.50%"), "{reason}");
        // Devices held back by the policy do not count toward a degrade.
        let off =
            Evidence { off: counts(500.0, 500.0, 10.0), on: counts(100.0, 0.0, 10.0), ..Default::default() };
        assert_eq!(decide(&healthy, &off, 0.01, true, 1, &s), Outcome::Stay { reset: true });
    }

    #[test]
    fn recovery_waits_for_the_probe_the_hold_and_the_checks() {
        let s = settings();
        let degraded = Status { state: PlaceState::Degraded, step: 0, since_ms: 0 };
        let good = Evidence { on: counts(150.0, 0.0, 10.0), ..Default::default() };
        assert_eq!(decide(&degraded, &good, 0.02, true, STEP - 1, &s), Outcome::Stay { reset: false });
        assert_eq!(decide(&degraded, &good, 0.02, false, STEP, &s), Outcome::Stay { reset: false });
        let still = Evidence { on: counts(150.0, 50.0, 10.0), ..Default::default() };
        assert_eq!(decide(&degraded, &still, 0.02, true, STEP, &s), Outcome::Stay { reset: true });
        let Outcome::Change { next, .. } = decide(&degraded, &good, 0.02, true, STEP, &s) else { panic!() };
        assert_eq!((next.state, next.step), (PlaceState::Recovering, 1));
    }

    #[test]
    fn the_ramp_steps_up_to_healthy_and_back_on_a_regression() {
        let s = settings();
        let mut st = Status { state: PlaceState::Recovering, step: 1, since_ms: 0 };
        let good =
            Evidence { on: counts(200.0, 1.0, 40.0), off: counts(200.0, 1.0, 40.0), ..Default::default() };
        let mut now = 0;
        let mut seen = vec![];
        while st.state != PlaceState::Healthy {
            now += STEP;
            let Outcome::Change { next, .. } = decide(&st, &good, 0.02, true, now, &s) else {
                panic!("{st:?}")
            };
            st = next;
            seen.push(st.share(&s.ramp));
        }
        assert_eq!(seen, vec![0.25, 1.0]);
        // At 25%: the ramped cohort fails where the held-back one does not.
        let at25 = Status { state: PlaceState::Recovering, step: 2, since_ms: 0 };
        let bad =
            Evidence { on: counts(200.0, 30.0, 40.0), off: counts(200.0, 2.0, 40.0), ..Default::default() };
        let Outcome::Change { next, reason } = decide(&at25, &bad, 0.02, true, 1, &s) else { panic!() };
        assert_eq!((next.state, next.step, next.since_ms), (PlaceState::Recovering, 1, 1), "{reason}");
        assert!(reason.contains("regression at the 25.00% step"), "{reason}");
        // Slower by far: also a regression. Both sides failing alike (the place, not HTTPDNS): not.
        let slow =
            Evidence { on: counts(200.0, 0.0, 400.0), off: counts(200.0, 0.0, 40.0), ..Default::default() };
        assert!(matches!(decide(&at25, &slow, 0.02, true, 1, &s), Outcome::Change { .. }));
        let alike =
            Evidence { on: counts(200.0, 20.0, 40.0), off: counts(200.0, 20.0, 40.0), ..Default::default() };
        assert_eq!(decide(&at25, &alike, 0.02, true, 1, &s), Outcome::Stay { reset: false });
        // Stepping back from the first recovering step is degraded again.
        let first = Status { state: PlaceState::Recovering, step: 1, since_ms: 0 };
        let Outcome::Change { next, .. } = decide(&first, &bad, 0.02, true, 1, &s) else { panic!() };
        assert_eq!((next.state, next.step), (PlaceState::Degraded, 0));
    }
}
