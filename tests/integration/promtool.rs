//! The shipped alert rules (`deploy/prometheus/alerts.yml`) evaluated by `promtool test rules`
//! on series a running server exported: scrapes become `input_series` one minute apart.
//! Shared with the drill (`tests/drill`), which includes this file.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The samples of the metric `name` in a scrape, by their full series text.
pub(crate) fn samples(metrics: &str, name: &str) -> HashMap<String, f64> {
    let prefix = format!("{name}{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The client events' series the shipped app rules read: the weighted counts and the reports
/// they rest on.
pub(crate) fn app_samples(metrics: &str) -> HashMap<String, f64> {
    let mut all = samples(metrics, "httpdns_app_events_total");
    all.extend(samples(metrics, "httpdns_app_event_reports_total"));
    all
}

/// The labels of a series text `name{a="x",b="y"}` (values without quotes or commas).
pub(crate) fn labels(series: &str) -> BTreeMap<String, String> {
    let inner = series.split_once('{').map_or("", |(_, r)| r.trim_end_matches('}'));
    inner
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.trim_matches('"').to_owned()))
        })
        .collect()
}

/// Go's `humanizePercentage`: `%.4g%%` of `v × 100` (four significant digits, trailing zeros
/// dropped).
pub(crate) fn humanize_percentage(v: f64) -> String {
    let p = v * 100.0;
    if p == 0.0 {
        return "0%".into();
    }
    let exp = p.abs().log10().floor() as i32;
    let decimals = (3 - exp).max(0) as usize;
    let mut s = format!("{p:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_owned();
    }
    format!("{s}%")
}

/// One alert `promtool` should find.
pub(crate) struct Expected {
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

/// The annotations of rule `alert` in the shipped file, rendered for `e` (the templates use
/// `{{ $labels.x }}` and `{{ $value | humanizePercentage }}` only).
fn annotations(rules: &serde_norway::Value, alert: &str, e: &Expected) -> BTreeMap<String, String> {
    let rule = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter())
        .find(|r| r["alert"].as_str() == Some(alert))
        .unwrap_or_else(|| panic!("no rule {alert}"));
    let mut out = BTreeMap::new();
    for (k, v) in rule["annotations"].as_mapping().unwrap() {
        let mut text = v.as_str().unwrap().to_owned();
        text = text.replace("{{ $value | humanizePercentage }}", &humanize_percentage(e.value));
        for (name, value) in &e.labels {
            text = text.replace(&format!("{{{{ $labels.{name} }}}}"), value);
        }
        out.insert(k.as_str().unwrap().to_owned(), text);
    }
    out
}

pub(crate) fn rules_path() -> std::path::PathBuf {
    std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/alerts.yml")).unwrap()
}

/// Runs `promtool test rules` on `scrapes` (one minute apart, a missing series written as
/// `missing`), expecting exactly `expected` of `alert` at the last scrape and nothing of each
/// of `quiet`. `Err` carries promtool's report and the test file; `Ok(false)`: no promtool.
pub(crate) fn check(
    dir: &Path,
    scrapes: &[HashMap<String, f64>],
    missing: &str,
    alert: &str,
    expected: &[Expected],
    quiet: &[&str],
) -> Result<bool, String> {
    let rules_file = rules_path();
    let rules: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(&rules_file).unwrap()).unwrap();
    let mut names: Vec<&String> = scrapes.iter().flat_map(|m| m.keys()).collect();
    names.sort();
    names.dedup();
    let mut yaml = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n",
        rules_file.display()
    );
    for name in names {
        let values: Vec<String> =
            scrapes.iter().map(|m| m.get(name).map_or(missing.to_owned(), |v| v.to_string())).collect();
        yaml.push_str(&format!("      - series: '{name}'\n        values: '{}'\n", values.join(" ")));
    }
    let eval = format!("{}m", scrapes.len() - 1);
    yaml.push_str(&format!("    alert_rule_test:\n      - eval_time: {eval}\n        alertname: {alert}\n"));
    if expected.is_empty() {
        yaml.push_str("        exp_alerts: []\n");
    } else {
        yaml.push_str("        exp_alerts:\n");
    }
    let quote = |s: &str| serde_json::to_string(s).unwrap();
    for e in expected {
        yaml.push_str("          - exp_labels:\n");
        for (k, v) in &e.labels {
            yaml.push_str(&format!("              {k}: {}\n", quote(v)));
        }
        yaml.push_str("            exp_annotations:\n");
        for (k, v) in annotations(&rules, alert, e) {
            yaml.push_str(&format!("              {k}: {}\n", quote(&v)));
        }
    }
    for q in quiet {
        yaml.push_str(&format!(
            "      - eval_time: {eval}\n        alertname: {q}\n        exp_alerts: []\n"
        ));
    }
    let file = dir.join(format!("promtool-{alert}.yml"));
    std::fs::write(&file, &yaml).unwrap();
    let out = match std::process::Command::new("promtool").arg("test").arg("rules").arg(&file).output() {
        Ok(out) => out,
        Err(e) => {
            httpdns_test_support::skipped(
                "the alert rules under promtool",
                &format!("promtool is not installed ({e}); apt-get install prometheus"),
            );
            return Ok(false);
        }
    };
    if out.status.success() {
        Ok(true)
    } else {
        Err(format!(
            "promtool test rules failed:\n{}\n{}\n--- {} ---\n{yaml}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            file.display()
        ))
    }
}

/// What `HttpdnsAppFallbackRateHigh` should say on the counters `last` (their increase since
/// zero): per (isp, region, reason), fallbacks over requests when over 1% of at least 100
/// requests. The same arithmetic as the rule, so promtool checks the shipped expression.
pub(crate) fn fallback_alerts(last: &HashMap<String, f64>) -> Vec<Expected> {
    let mut requests: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut reports: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut fallbacks: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    for (series, v) in last {
        let l = labels(series);
        let place = (l["isp"].clone(), l["region"].clone());
        if series.starts_with("httpdns_app_event_reports_total{") {
            if l["event"] == "request" {
                *reports.entry(place).or_default() += v;
            }
            continue;
        }
        match l["event"].as_str() {
            "request" => *requests.entry(place).or_default() += v,
            "dns_fallback" => *fallbacks.entry((place.0, place.1, l["reason"].clone())).or_default() += v,
            _ => {}
        }
    }
    fallbacks
        .into_iter()
        .filter_map(|((isp, region, reason), n)| {
            let place = (isp.clone(), region.clone());
            let r = *requests.get(&place)?;
            let seen = reports.get(&place).copied().unwrap_or(0.0);
            let value = n / r;
            (r >= 100.0 && seen >= 20.0 && value > 0.01).then(|| Expected {
                labels: [
                    ("severity".to_owned(), "page".to_owned()),
                    ("isp".to_owned(), isp),
                    ("region".to_owned(), region),
                    ("reason".to_owned(), reason),
                ]
                .into_iter()
                .collect(),
                value,
            })
        })
        .collect()
}
