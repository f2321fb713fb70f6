//! The policy controller's settings from the environment (CONTRACT, docs/policy.md):
//! `HTTPDNS_POLICY_AUTO`, `HTTPDNS_POLICY_RAMP`, `HTTPDNS_POLICY_STEP_SECONDS` and
//! `HTTPDNS_POLICY_MIN_REQUESTS`, `HTTPDNS_POLICY_MIN_REPORTS`. The tick (`HTTPDNS_CONTROL_TICK_MS`) is the guarded rollouts'
//! too, read once in `config.rs`.

use std::time::Duration;

use httpdns_policy::settings::{parse_ramp, Settings};

use crate::config::{err, parse_bool, ConfigError};

/// The settings, each absent variable at its default.
pub(crate) fn load(env: &impl Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
    let d = Settings::default();
    let number = |name: &str, min: f64, max: f64| -> Result<Option<f64>, ConfigError> {
        env(name)
            .map(|v| {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite() && (min..=max).contains(n))
                    .ok_or_else(|| err(name, format!("{v:?} must be a number from {min} to {max}")))
            })
            .transpose()
    };
    Ok(Settings {
        auto: match env("HTTPDNS_POLICY_AUTO") {
            Some(v) => parse_bool("HTTPDNS_POLICY_AUTO", &v)?,
            None => d.auto,
        },
        ramp: match env("HTTPDNS_POLICY_RAMP") {
            Some(v) => parse_ramp(&v).map_err(|m| err("HTTPDNS_POLICY_RAMP", m))?,
            None => d.ramp,
        },
        // Fractions of a second are for time-compressed tests; the same code paths.
        step: number("HTTPDNS_POLICY_STEP_SECONDS", 0.1, 86_400.0)?.map_or(d.step, Duration::from_secs_f64),
        min_requests: number("HTTPDNS_POLICY_MIN_REQUESTS", 1.0, 1e9)?.unwrap_or(d.min_requests),
        min_reports: number("HTTPDNS_POLICY_MIN_REPORTS", 1.0, 1e9)?.unwrap_or(d.min_reports),
        tick: d.tick,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_values_name_the_variable() {
        assert_eq!(load(&|_| None).unwrap(), Settings::default());
        let s = load(&|k| match k {
            "HTTPDNS_POLICY_AUTO" => Some("false".into()),
            "HTTPDNS_POLICY_RAMP" => Some("0.1,1".into()),
            "HTTPDNS_POLICY_STEP_SECONDS" => Some("0.5".into()),
            "HTTPDNS_POLICY_MIN_REPORTS" => Some("5".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!((s.auto, s.ramp, s.step), (false, vec![0.1, 1.0], Duration::from_millis(500)));
        assert_eq!(s.min_reports, 5.0);
        for (k, v) in [
            ("HTTPDNS_POLICY_RAMP", "1,0.5"),
            ("HTTPDNS_POLICY_MIN_REQUESTS", "0"),
            ("HTTPDNS_POLICY_MIN_REPORTS", "0.5"),
            ("HTTPDNS_POLICY_STEP_SECONDS", "soon"),
            ("HTTPDNS_POLICY_AUTO", "maybe"),
        ] {
            let e = load(&|n| (n == k).then(|| v.to_owned())).unwrap_err();
            assert_eq!(e.setting, k);
        }
    }
}
