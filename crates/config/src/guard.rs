//! Guarded rollouts: the spec an operator gives, and the decision each tick takes from both
//! sides' event rates (docs/config-center.md, "Guarded rollouts"). Pure: counts and times in,
//! a decision out.
//!
//! A side's error rate is its `request` events other than `ok` and `4xx` over its `request`
//! events; its fallback rate its `dns_fallback` events over its `request` events (the same
//! definitions as `/admin/v1/events/summary`). A place (carrier and region) or the whole fleet
//! fails the new version when the new side has at least `min_requests` requests, its rate is
//! over the limit, and it is worse than the old side's in the same place: a place where both
//! sides fail is an outage the config did not cause.

use std::collections::BTreeMap;

use httpdns_core::model::FieldError;
use serde::{Deserialize, Serialize};

/// What `PUT /admin/v1/config/{module}/rollout` takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutSpec {
    /// Shares of devices on the new version, growing, the last 1.
    pub steps: Vec<f64>,
    pub step_seconds: u64,
    pub max_error_rate: f64,
    pub max_fallback_rate: f64,
    /// Requests the new side needs (in a place, or in all) before its rates are judged, and
    /// before a step may end.
    #[serde(default = "default_min_requests")]
    pub min_requests: f64,
}

fn default_min_requests() -> f64 {
    100.0
}

impl RolloutSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.steps.is_empty() || self.steps.len() > 20 {
            return Err(FieldError::new("steps", "1 to 20 shares"));
        }
        for (i, s) in self.steps.iter().enumerate() {
            let after_previous = i == 0 || *s > self.steps[i - 1];
            if !(s.is_finite() && *s > 0.0 && *s <= 1.0 && after_previous) {
                return Err(FieldError::new(
                    format!("steps[{i}]"),
                    "shares grow, each above 0 and at most 1",
                ));
            }
        }
        if self.steps.last() != Some(&1.0) {
            return Err(FieldError::new("steps", "the last step is 1 (every device)"));
        }
        if !(1..=7 * 24 * 3600).contains(&self.step_seconds) {
            return Err(FieldError::new("step_seconds", "1 to 604800 seconds"));
        }
        for (field, v) in
            [("max_error_rate", self.max_error_rate), ("max_fallback_rate", self.max_fallback_rate)]
        {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(FieldError::new(field, "a rate from 0 to 1"));
            }
        }
        if !(self.min_requests.is_finite() && self.min_requests >= 0.0) {
            return Err(FieldError::new("min_requests", "a number of requests from 0"));
        }
        Ok(())
    }
}

/// Counts of one side in one place (or everywhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Side {
    pub requests: f64,
    pub errors: f64,
    pub fallbacks: f64,
}

impl Side {
    pub fn add(&mut self, o: &Side) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.fallbacks += o.fallbacks;
    }

    pub fn error_rate(&self) -> f64 {
        if self.requests > 0.0 {
            self.errors / self.requests
        } else {
            0.0
        }
    }

    pub fn fallback_rate(&self) -> f64 {
        if self.requests > 0.0 {
            self.fallbacks / self.requests
        } else {
            0.0
        }
    }
}

/// Both sides of one place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sides {
    pub new: Side,
    pub old: Side,
}

/// What a tick decides.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Keep the step (not long enough, or not enough evidence yet).
    Hold,
    /// Go on to this step.
    Advance(usize),
    /// Every device on the new version: the rollout is done.
    Done,
    /// Back to the previous version, and why.
    RollBack(String),
}

fn failing(spec: &RolloutSpec, where_: &str, s: &Sides) -> Option<String> {
    if s.new.requests < spec.min_requests.max(1.0) {
        return None;
    }
    let checks = [
        ("error rate", s.new.error_rate(), s.old.error_rate(), spec.max_error_rate),
        ("fallback rate", s.new.fallback_rate(), s.old.fallback_rate(), spec.max_fallback_rate),
    ];
    checks.iter().find(|(_, new, old, max)| new > max && new > old).map(|(what, new, old, max)| {
        format!("{where_}: {what} {new:.4} on the new version over the limit {max} (the previous version's {old:.4})")
    })
}

/// The decision at `elapsed_s` into step `step`, from the rates of each place (keyed
/// `isp/region`) since the step began.
pub fn decide(spec: &RolloutSpec, step: usize, elapsed_s: u64, places: &BTreeMap<String, Sides>) -> Decision {
    let mut all = Sides::default();
    for (place, s) in places {
        if let Some(why) = failing(spec, place, s) {
            return Decision::RollBack(why);
        }
        all.new.add(&s.new);
        all.old.add(&s.old);
    }
    if let Some(why) = failing(spec, "all places", &all) {
        return Decision::RollBack(why);
    }
    if elapsed_s < spec.step_seconds || all.new.requests < spec.min_requests {
        return Decision::Hold;
    }
    if step + 1 < spec.steps.len() {
        Decision::Advance(step + 1)
    } else {
        Decision::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RolloutSpec {
        serde_json::from_str(
            r#"{"steps": [0.1, 0.5, 1], "step_seconds": 60, "max_error_rate": 0.01, "max_fallback_rate": 0.02}"#,
        )
        .unwrap()
    }

    fn side(requests: f64, errors: f64, fallbacks: f64) -> Side {
        Side { requests, errors, fallbacks }
    }

    #[test]
    fn steps_advance_on_good_evidence_and_roll_back_on_a_worse_new_side() {
        let s = spec();
        s.validate().unwrap();
        let good: BTreeMap<String, Sides> = [(
            "unicom/shanghai".to_owned(),
            Sides { new: side(200.0, 1.0, 0.0), old: side(2000.0, 10.0, 5.0) },
        )]
        .into();
        assert_eq!(decide(&s, 0, 30, &good), Decision::Hold, "the step is not over");
        assert_eq!(decide(&s, 0, 60, &good), Decision::Advance(1));
        assert_eq!(decide(&s, 2, 60, &good), Decision::Done);
        let thin: BTreeMap<String, Sides> =
            [("a/b".to_owned(), Sides { new: side(50.0, 40.0, 0.0), old: side(50.0, 0.0, 0.0) })].into();
        assert_eq!(decide(&s, 0, 600, &thin), Decision::Hold, "too few requests to judge or to go on");
        let mut bad = good.clone();
        bad.insert(
            "telecom/beijing".into(),
            Sides { new: side(100.0, 0.0, 10.0), old: side(1000.0, 0.0, 1.0) },
        );
        match decide(&s, 0, 10, &bad) {
            Decision::RollBack(why) => assert!(why.starts_with("telecom/beijing: fallback rate"), "{why}"),
            d => panic!("{d:?}"),
        }
        let outage: BTreeMap<String, Sides> =
            [("a/b".to_owned(), Sides { new: side(100.0, 50.0, 0.0), old: side(1000.0, 600.0, 0.0) })].into();
        assert_eq!(decide(&s, 0, 60, &outage), Decision::Advance(1), "both sides fail: not the config");
    }

    #[test]
    fn specs_name_the_field_at_fault() {
        let bad =
            |json: &str| serde_json::from_str::<RolloutSpec>(json).unwrap().validate().unwrap_err().field;
        let base = r#""step_seconds": 60, "max_error_rate": 0.01, "max_fallback_rate": 0.01"#;
        assert_eq!(bad(&format!(r#"{{"steps": [0.5, 0.2, 1], {base}}}"#)), "steps[1]");
        assert_eq!(bad(&format!(r#"{{"steps": [0.5], {base}}}"#)), "steps");
        assert_eq!(
            bad(r#"{"steps": [1], "step_seconds": 0, "max_error_rate": 0.01, "max_fallback_rate": 0.01}"#),
            "step_seconds"
        );
        assert_eq!(
            bad(r#"{"steps": [1], "step_seconds": 5, "max_error_rate": 2, "max_fallback_rate": 0.01}"#),
            "max_error_rate"
        );
    }
}
