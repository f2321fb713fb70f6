//! The fleet's figures from every replica's stored rows (pure): per place and per convergence
//! side, the error and fallback rates and which reasons pass the alert rule
//! (`/admin/v1/events/summary`); per place and bucket, the counts the console charts
//! (`/admin/v1/events/series`); per place, the LocalDNS verdicts (`/admin/v1/localdns/map`).
//! The API only formats what these return.

use std::collections::BTreeMap;

use httpdns_store::events::{request_failed, EventBucket, EventCounts, EventKey};
use serde::Serialize;

use crate::schema::EventType;
use crate::verdict::Verdict;
use crate::EventSettings;

/// Figures are rounded to three decimals: weighted counts are fractions, and more digits only
/// say how the weights fell.
pub fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `part / whole`, rounded, and 0 for an empty whole.
pub fn rate(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        round(part / whole)
    } else {
        0.0
    }
}

/// Request and fallback events of one place or side, summed.
#[derive(Debug, Default, Clone)]
pub struct Rates {
    requests: f64,
    /// Request and fallback events as received (unweighted).
    reports: f64,
    errors: f64,
    fallbacks: f64,
    errors_by: BTreeMap<String, f64>,
    fallbacks_by: BTreeMap<String, f64>,
}

/// What [`Rates`] say, judged by the alert rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    pub requests: f64,
    pub reports: f64,
    pub errors: f64,
    pub error_rate: f64,
    pub top_error: Option<String>,
    pub fallbacks: f64,
    pub fallback_rate: f64,
    pub top_fallback_reason: Option<String>,
    pub alert: bool,
    pub alert_errors: Vec<String>,
    pub alert_fallback_reasons: Vec<String>,
}

impl Figures {
    /// The larger of the two rates: the worst places are what an operator reads first.
    pub fn worst(&self) -> f64 {
        self.error_rate.max(self.fallback_rate)
    }
}

impl Rates {
    /// Adds a stored row and the reports (unweighted events) behind it.
    pub fn add(&mut self, k: &EventKey, c: &EventCounts, reports: f64) {
        if k.event == EventType::Request.as_str() || k.event == EventType::DnsFallback.as_str() {
            self.reports += reports;
        }
        if k.event == EventType::Request.as_str() {
            self.requests += c.count;
            if request_failed(&k.reason) {
                self.errors += c.count;
                *self.errors_by.entry(k.reason.clone()).or_default() += c.count;
            }
        } else if k.event == EventType::DnsFallback.as_str() {
            self.fallbacks += c.count;
            *self.fallbacks_by.entry(k.reason.clone()).or_default() += c.count;
        }
    }

    fn top(by: &BTreeMap<String, f64>) -> Option<String> {
        by.iter().max_by(|a, b| a.1.total_cmp(b.1)).map(|(r, _)| r.clone())
    }

    /// The rates, and the reasons whose own share of the requests passes the alert rate, as
    /// the shipped Prometheus rules judge (unrounded). Only with enough weighted requests and
    /// real reports both: one event claiming to stand for a million is one report.
    pub fn figures(&self, settings: &EventSettings) -> Figures {
        let judged =
            self.requests >= settings.alert_min_requests && self.reports >= settings.alert_min_reports;
        let over = |by: &BTreeMap<String, f64>| -> Vec<String> {
            by.iter()
                .filter(|(_, n)| judged && **n / self.requests > settings.alert_rate)
                .map(|(r, _)| r.clone())
                .collect()
        };
        let (alert_errors, alert_fallback_reasons) = (over(&self.errors_by), over(&self.fallbacks_by));
        Figures {
            requests: round(self.requests),
            reports: round(self.reports),
            errors: round(self.errors),
            error_rate: rate(self.errors, self.requests),
            top_error: Self::top(&self.errors_by),
            fallbacks: round(self.fallbacks),
            fallback_rate: rate(self.fallbacks, self.requests),
            top_fallback_reason: Self::top(&self.fallbacks_by),
            alert: !alert_errors.is_empty() || !alert_fallback_reasons.is_empty(),
            alert_errors,
            alert_fallback_reasons,
        }
    }
}

/// A place: carrier and region.
pub type Place = (String, String);

/// The summary's rates.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Per place, the worst first.
    pub places: Vec<(Place, Figures)>,
    /// Per convergence side (`on`, `off`, `unknown`).
    pub sides: Vec<(String, Figures)>,
}

/// The summary's rates of the rows (each with its reports).
pub fn summarize<'a>(
    rows: impl IntoIterator<Item = &'a (EventKey, EventCounts, f64)>,
    settings: &EventSettings,
) -> Summary {
    let mut by_place: BTreeMap<Place, Rates> = BTreeMap::new();
    let mut by_side: BTreeMap<String, Rates> = BTreeMap::new();
    for (k, c, reports) in rows {
        by_place.entry((k.isp.clone(), k.region.clone())).or_default().add(k, c, *reports);
        by_side.entry(k.group.clone()).or_default().add(k, c, *reports);
    }
    let mut places: Vec<(Place, Figures)> =
        by_place.into_iter().map(|(place, r)| (place, r.figures(settings))).collect();
    // Stable: equally bad places stay in carrier and region order.
    places.sort_by(|a, b| b.1.worst().total_cmp(&a.1.worst()));
    let sides = by_side.into_iter().map(|(side, r)| (side, r.figures(settings))).collect();
    Summary { places, sides }
}

/// The series' fields, in the order of [`Series`]' arrays.
pub const SERIES_FIELDS: [&str; 4] = ["requests", "errors", "fallbacks", "host_switches"];
const REQUESTS: usize = 0;
const ERRORS: usize = 1;
const FALLBACKS: usize = 2;
const SWITCHES: usize = 3;

/// One place's figures over time: totals and one value per bucket, per [`SERIES_FIELDS`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub totals: [f64; 4],
    pub buckets: Vec<[f64; 4]>,
}

impl Series {
    fn new(n: usize) -> Self {
        Self { totals: [0.0; 4], buckets: vec![[0.0; 4]; n] }
    }

    fn add(&mut self, bucket: usize, field: usize, n: f64) {
        self.totals[field] += n;
        if let Some(b) = self.buckets.get_mut(bucket) {
            b[field] += n;
        }
    }

    /// Adds `other`'s totals and buckets (the totals on their own: they may hold rows of no
    /// bucket asked for).
    fn merge(&mut self, other: &Series) {
        for (t, n) in self.totals.iter_mut().zip(other.totals) {
            *t += n;
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            for (m, n) in mine.iter_mut().zip(theirs) {
                *m += n;
            }
        }
    }

    /// What ranks a place: its requests, fallbacks and host switches.
    fn volume(&self) -> f64 {
        self.totals[REQUESTS] + self.totals[FALLBACKS] + self.totals[SWITCHES]
    }
}

/// What the console charts.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// The places drawn on their own, the most events first.
    pub shown: Vec<(Place, Series)>,
    /// The rest summed, and how many places they are; `None` when every place is shown.
    pub others: Option<(usize, Series)>,
}

/// The chart of `n` buckets: the `top` places with the most events on their own, the rest
/// summed.
pub fn series(rows: &[EventBucket], n: usize, top: usize) -> Chart {
    let (request, fallback, switch) =
        (EventType::Request.as_str(), EventType::DnsFallback.as_str(), EventType::HostSwitch.as_str());
    let mut places: BTreeMap<Place, Series> = BTreeMap::new();
    for r in rows {
        let Ok(bucket) = usize::try_from(r.bucket) else { continue };
        let s = places.entry((r.isp.clone(), r.region.clone())).or_insert_with(|| Series::new(n));
        if r.event == request {
            s.add(bucket, REQUESTS, r.count);
            if request_failed(&r.reason) {
                s.add(bucket, ERRORS, r.count);
            }
        } else if r.event == fallback {
            s.add(bucket, FALLBACKS, r.count);
        } else if r.event == switch {
            s.add(bucket, SWITCHES, r.count);
        }
    }
    let mut ranked: Vec<(Place, Series)> = places.into_iter().collect();
    ranked.sort_by(|a, b| b.1.volume().total_cmp(&a.1.volume()).then_with(|| a.0.cmp(&b.0)));
    let rest = if ranked.len() > top { ranked.split_off(top) } else { Vec::new() };
    let others = (!rest.is_empty()).then(|| {
        let mut sum = Series::new(n);
        for (_, s) in &rest {
            sum.merge(s);
        }
        (rest.len(), sum)
    });
    Chart { shown: ranked, others }
}

/// One place of the LocalDNS map: its reports and each verdict's count.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdicts {
    pub reports: f64,
    pub counts: BTreeMap<Verdict, f64>,
}

impl Verdicts {
    pub fn count(&self, v: Verdict) -> f64 {
        self.counts.get(&v).copied().unwrap_or(0.0)
    }

    /// The share of reports that were not consistent.
    fn bad(&self) -> f64 {
        1.0 - rate(self.count(Verdict::Consistent), self.reports)
    }
}

/// The LocalDNS map's places from the `localdns_compare` rows (the reason is the verdict;
/// others are skipped), the least consistent first.
pub fn localdns_places<'a>(
    rows: impl IntoIterator<Item = &'a (EventKey, EventCounts, f64)>,
) -> Vec<(Place, Verdicts)> {
    let mut places: BTreeMap<Place, BTreeMap<Verdict, f64>> = BTreeMap::new();
    for (k, c, _) in rows {
        let Some(v) = Verdict::ALL.into_iter().find(|v| v.as_str() == k.reason) else { continue };
        *places.entry((k.isp.clone(), k.region.clone())).or_default().entry(v).or_default() += c.count;
    }
    let mut map: Vec<(Place, Verdicts)> = places
        .into_iter()
        .map(|(place, counts)| (place, Verdicts { reports: counts.values().sum(), counts }))
        .collect();
    map.sort_by(|a, b| b.1.bad().total_cmp(&a.1.bad()));
    map
}

#[cfg(test)]
mod tests;
