//! Each place's threshold, from its own history (docs/policy.md):
//!
//! ```text
//! r_m       = (errors + fallbacks) / requests of minute m, over the minutes of the last
//!             HISTORY_DAYS with at least MIN_MINUTE_REQUESTS requests (weighted) resting on
//!             MIN_MINUTE_REPORTS reports (raw) (devices held back by
//!             the policy excluded)
//! threshold = clamp(mean(r) + 3 * stddev(r), FLOOR, CEILING)   with MIN_MINUTES minutes or more
//!           = DEFAULT                                          with fewer
//! ```
//!
//! A noisy place (a carrier whose rate swings from minute to minute) gets a threshold above
//! its swings, so it does not flap; a quiet one gets one near its mean, so an outage shows at
//! once. Never below the seed's 1%.

/// The floor: seed 004 switches at a 1% failure rate.
pub const FLOOR: f64 = 0.01;
/// Above half the requests failing, any place is in trouble whatever its history.
pub const CEILING: f64 = 0.5;
/// Without enough history: a rate five times the seed's.
pub const DEFAULT: f64 = 0.05;
/// Minutes of history a derived threshold needs (half an hour).
pub const MIN_MINUTES: i64 = 30;
/// Requests a minute needs to count (a minute of 3 requests, one failed, says nothing).
pub const MIN_MINUTE_REQUESTS: f64 = 20.0;
/// Reports (events as received) such a minute needs besides: a minute of one event sampled at
/// `1e-6` weighs a million requests and still says nothing.
pub const MIN_MINUTE_REPORTS: f64 = 5.0;
/// How far back the history reaches (bounded by the events' retention).
pub const HISTORY_DAYS: i64 = 7;

/// The threshold from `n` minute rates with sum `sum` and sum of squares `sum_sq`.
pub fn from_moments(n: i64, sum: f64, sum_sq: f64) -> f64 {
    if n < MIN_MINUTES {
        return DEFAULT;
    }
    let n = n as f64;
    let mean = sum / n;
    let variance = (sum_sq / n - mean * mean).max(0.0);
    (mean + 3.0 * variance.sqrt()).clamp(FLOOR, CEILING)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(rates: &[f64]) -> (i64, f64, f64) {
        (rates.len() as i64, rates.iter().sum(), rates.iter().map(|r| r * r).sum())
    }

    #[test]
    fn noisy_places_get_room_and_quiet_ones_the_floor() {
        let quiet = moments(&[0.001; 60]);
        assert_eq!(from_moments(quiet.0, quiet.1, quiet.2), FLOOR);
        let noisy: Vec<f64> = (0..60).map(|i| if i % 2 == 0 { 0.02 } else { 0.06 }).collect();
        let (n, s, q) = moments(&noisy);
        let t = from_moments(n, s, q);
        assert!((t - 0.10).abs() < 1e-9, "mean 4% + 3 x 2% = {t}");
        let young = moments(&[0.3; 10]);
        assert_eq!(from_moments(young.0, young.1, young.2), DEFAULT);
        let broken = moments(&[0.9; 60]);
        assert_eq!(from_moments(broken.0, broken.1, broken.2), CEILING);
    }
}
