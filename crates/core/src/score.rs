//! The node score of seed `004`, with its weights taken from configuration.
//!
//! ```text
//! score = w_latency   * 1 / (1 + latency_ms / 100)
//!       + w_bandwidth * min(bandwidth_mbps / 1000, 1)
//!       + w_load      * (1 - load_pct / 100)
//!       + w_geo       * (1.0 if node.region == client.region else 0.5)
//! ```
//!
//! The seed's Python writes the geo term as `1 if same else 0.5 * 0.1`, which by operator
//! precedence gives a same-region node a full 1.0; the intended weights are 40/30/20/10, which
//! is what this module computes.

use serde::{Deserialize, Serialize};

use crate::model::FieldError;

/// Weights of the four score terms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    pub latency: f64,
    pub bandwidth: f64,
    pub load: f64,
    pub geo: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Self { latency: 0.4, bandwidth: 0.3, load: 0.2, geo: 0.1 }
    }
}

impl Weights {
    pub fn validate(&self) -> Result<(), FieldError> {
        for (field, w) in [
            ("scoring.weights.latency", self.latency),
            ("scoring.weights.bandwidth", self.bandwidth),
            ("scoring.weights.load", self.load),
            ("scoring.weights.geo", self.geo),
        ] {
            if !w.is_finite() || w < 0.0 {
                return Err(FieldError::new(field, "must be a finite number >= 0"));
            }
        }
        if self.latency + self.bandwidth + self.load + self.geo <= 0.0 {
            return Err(FieldError::new("scoring.weights", "at least one weight must be > 0"));
        }
        Ok(())
    }
}

/// The inputs of one node's score for one client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreInput {
    pub latency_ms: f64,
    pub bandwidth_mbps: f64,
    pub load_pct: f64,
    pub same_region: bool,
}

/// Each weighted term of a score, kept apart so operators can be shown why a node ranks where
/// it does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScoreTerms {
    pub latency: f64,
    pub bandwidth: f64,
    pub load: f64,
    pub geo: f64,
}

impl ScoreTerms {
    pub fn total(&self) -> f64 {
        self.latency + self.bandwidth + self.load + self.geo
    }
}

/// Computes the weighted terms. Inputs out of range are clamped so that a bad metric report
/// can never produce a score above a perfect node's or below zero.
pub fn terms(w: &Weights, i: &ScoreInput) -> ScoreTerms {
    let latency = i.latency_ms.max(0.0);
    let bandwidth = i.bandwidth_mbps.max(0.0);
    let load = i.load_pct.clamp(0.0, 100.0);
    ScoreTerms {
        latency: w.latency * (1.0 / (1.0 + latency / 100.0)),
        bandwidth: w.bandwidth * (bandwidth / 1000.0).min(1.0),
        load: w.load * (1.0 - load / 100.0),
        geo: w.geo * if i.same_region { 1.0 } else { 0.5 },
    }
}

/// The total score.
pub fn score(w: &Weights, i: &ScoreInput) -> f64 {
    terms(w, i).total()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn hand_computed_scores() {
        let w = Weights::default();
        // latency 15 ms: 0.4 / 1.15 = 0.347826...; bandwidth 1000: 0.3; load 20: 0.16; same: 0.1.
        let s = score(
            &w,
            &ScoreInput { latency_ms: 15.0, bandwidth_mbps: 1000.0, load_pct: 20.0, same_region: true },
        );
        close(s, 0.4 / 1.15 + 0.3 + 0.16 + 0.1);
        close(s, 0.907_826_086_956_521_7);

        // latency 100: 0.2; bandwidth 500: 0.15; load 50: 0.1; other region: 0.05.
        let s = score(
            &w,
            &ScoreInput { latency_ms: 100.0, bandwidth_mbps: 500.0, load_pct: 50.0, same_region: false },
        );
        close(s, 0.5);

        // A perfect node scores exactly 1.0; bandwidth above 1000 does not help further.
        let s = score(
            &w,
            &ScoreInput { latency_ms: 0.0, bandwidth_mbps: 40_000.0, load_pct: 0.0, same_region: true },
        );
        close(s, 1.0);
    }

    #[test]
    fn geo_term_is_not_the_seeds_precedence_slip() {
        let w = Weights::default();
        let base = ScoreInput { latency_ms: 0.0, bandwidth_mbps: 0.0, load_pct: 100.0, same_region: true };
        close(terms(&w, &base).geo, 0.1);
        close(terms(&w, &ScoreInput { same_region: false, ..base }).geo, 0.05);
    }

    #[test]
    fn out_of_range_inputs_are_clamped() {
        let w = Weights::default();
        let t = terms(
            &w,
            &ScoreInput { latency_ms: -5.0, bandwidth_mbps: -1.0, load_pct: 150.0, same_region: false },
        );
        close(t.latency, 0.4);
        close(t.bandwidth, 0.0);
        close(t.load, 0.0);
    }

    #[test]
    fn weights_are_validated() {
        Weights::default().validate().unwrap();
        let bad = Weights { latency: -0.1, ..Weights::default() };
        assert_eq!(bad.validate().unwrap_err().field, "scoring.weights.latency");
        let zero = Weights { latency: 0.0, bandwidth: 0.0, load: 0.0, geo: 0.0 };
        assert!(zero.validate().is_err());
    }
}
