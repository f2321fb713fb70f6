//! The controller's settings (`HTTPDNS_POLICY_*`, `HTTPDNS_CONTROL_TICK_MS`, CONTRACT).

use std::time::Duration;

/// How the controller decides.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `HTTPDNS_POLICY_AUTO`: false turns the controller off (every place follows the
    /// document; figures are still kept).
    pub auto: bool,
    /// `HTTPDNS_POLICY_RAMP`: the shares of a recovery, increasing, the last 1. The first is
    /// the probe share of a degraded place.
    pub ramp: Vec<f64>,
    /// `HTTPDNS_POLICY_STEP_SECONDS`: how long each step holds before the next.
    pub step: Duration,
    /// `HTTPDNS_POLICY_MIN_REQUESTS`: the evidence (request events, weighted) a decision needs.
    pub min_requests: f64,
    /// `HTTPDNS_POLICY_MIN_REPORTS`: the reports (events as received, unweighted) that evidence
    /// must rest on besides: a few heavily weighted events are not evidence.
    pub min_reports: f64,
    /// `HTTPDNS_CONTROL_TICK_MS`: how often the controller decides.
    pub tick: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            auto: true,
            ramp: vec![0.01, 0.05, 0.25, 1.0],
            step: Duration::from_secs(300),
            min_requests: 100.0,
            min_reports: 20.0,
            tick: Duration::from_millis(60_000),
        }
    }
}

impl Settings {
    /// Whether `c` is enough to judge by: [`Settings::min_requests`] weighted requests resting on
    /// [`Settings::min_reports`] raw reports.
    pub fn enough(&self, c: &httpdns_store::events::PolicyCounts) -> bool {
        c.requests >= self.min_requests && c.reports >= self.min_reports
    }

    /// Evidence that arrives this soon after a change is not counted: devices move to a new
    /// step only at their next config poll (at once on a long poll), and what they did before
    /// reaches the controller late (their event batches, the replicas' flushes, the tick). Half
    /// the step's hold: the other half judges the step.
    pub fn settle(&self) -> Duration {
        self.step / 2
    }
}

/// Parses `HTTPDNS_POLICY_RAMP`: two or more shares, each in `(0, 1]`, increasing, the last 1.
pub fn parse_ramp(text: &str) -> Result<Vec<f64>, String> {
    let steps: Vec<f64> = text
        .split(',')
        .map(|s| s.trim().parse::<f64>().map_err(|_| format!("{s:?} is not a number")))
        .collect::<Result<_, _>>()?;
    let valid = steps.len() >= 2
        && steps.iter().all(|s| s.is_finite() && *s > 0.0 && *s <= 1.0)
        && steps.windows(2).all(|w| w[0] < w[1])
        && steps.last() == Some(&1.0);
    if valid {
        Ok(steps)
    } else {
        Err("must be two or more increasing shares in (0, 1] ending with 1, such as 0.01,0.05,0.25,1".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramps_rise_to_one() {
        assert_eq!(parse_ramp("0.01, 0.05,0.25,1").unwrap(), vec![0.01, 0.05, 0.25, 1.0]);
        for bad in ["1", "0.5,0.25,1", "0.1,0.5", "0,1", "0.1,x,1", "0.1,0.1,1"] {
            assert!(parse_ramp(bad).is_err(), "{bad}");
        }
    }
}
