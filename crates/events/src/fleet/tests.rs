use httpdns_store::events::{EventBucket, EventCounts, EventKey};

use super::*;

fn key(event: &str, place: (&str, &str), reason: &str, group: &str) -> EventKey {
    EventKey {
        event: event.into(),
        isp: place.0.into(),
        region: place.1.into(),
        reason: reason.into(),
        host: String::new(),
        group: group.into(),
        cohort: "on".into(),
    }
}

fn row(
    event: &str,
    place: (&str, &str),
    reason: &str,
    count: f64,
    reports: f64,
) -> (EventKey, EventCounts, f64) {
    (key(event, place, reason, "on"), EventCounts { count, ..EventCounts::default() }, reports)
}

const SH: (&str, &str) = ("unicom", "shanghai");
const BJ: (&str, &str) = ("telecom", "beijing");

#[test]
fn a_4xx_is_no_error_and_the_top_reasons_are_the_largest() {
    let rows = [
        row("request", SH, "ok", 900.0, 900.0),
        row("request", SH, "4xx", 50.0, 50.0),
        row("request", SH, "timeout", 30.0, 30.0),
        row("request", SH, "5xx", 20.0, 20.0),
        row("dns_fallback", SH, "HTTPDNS_TIMEOUT", 4.0, 4.0),
        row("dns_fallback", SH, "HTTPDNS_ERROR", 6.0, 6.0),
        // Neither requests nor fallbacks: counted in no rate and no report.
        row("host_switch", SH, "5xx", 7.0, 7.0),
    ];
    let f = &summarize(&rows, &EventSettings::default()).places[0].1;
    assert_eq!((f.requests, f.errors, f.fallbacks, f.reports), (1000.0, 50.0, 10.0, 1010.0));
    assert_eq!((f.error_rate, f.fallback_rate), (0.05, 0.01));
    assert_eq!(f.top_error.as_deref(), Some("timeout"));
    assert_eq!(f.top_fallback_reason.as_deref(), Some("HTTPDNS_ERROR"));
    // 3% and 2% pass the 1% alert rate; each fallback reason alone (0.4%, 0.6%) does not.
    assert_eq!(f.alert_errors, ["5xx", "timeout"]);
    assert!(f.alert_fallback_reasons.is_empty());
    assert!(f.alert);
}

#[test]
fn heavy_weights_without_reports_judge_nothing() {
    let settings = EventSettings::default();
    // One event sampled at 1e-6: a million requests by weight, one report.
    let heavy = [row("request", SH, "timeout", 1e6, 1.0)];
    let f = &summarize(&heavy, &settings).places[0].1;
    assert_eq!(f.error_rate, 1.0);
    assert!(!f.alert, "one report is not evidence: {f:?}");
    // The same rate from enough reports alerts.
    let many = [row("request", SH, "timeout", 1e6, settings.alert_min_reports)];
    assert!(summarize(&many, &settings).places[0].1.alert);
    // And enough reports without enough requests does not.
    let few = [row("request", SH, "timeout", settings.alert_min_requests - 1.0, 1000.0)];
    assert!(!summarize(&few, &settings).places[0].1.alert);
}

#[test]
fn places_come_worst_first_and_sides_each_their_own() {
    let mut rows = vec![
        row("request", BJ, "ok", 100.0, 100.0),
        row("request", SH, "ok", 90.0, 90.0),
        row("request", SH, "timeout", 10.0, 10.0),
    ];
    rows.push((key("request", BJ, "5xx", "off"), EventCounts { count: 1.0, ..EventCounts::default() }, 1.0));
    let Summary { places, sides } = summarize(&rows, &EventSettings::default());
    let order: Vec<&str> = places.iter().map(|((_, region), _)| region.as_str()).collect();
    assert_eq!(order, ["shanghai", "beijing"]);
    let sides: Vec<(&str, f64)> = sides.iter().map(|(s, f)| (s.as_str(), f.errors)).collect();
    assert_eq!(sides, [("off", 1.0), ("on", 10.0)]);
}

fn bucket(b: i64, event: &str, place: (&str, &str), reason: &str, count: f64) -> EventBucket {
    EventBucket {
        bucket: b,
        event: event.into(),
        isp: place.0.into(),
        region: place.1.into(),
        reason: reason.into(),
        count,
    }
}

#[test]
fn the_series_ranks_places_by_volume_and_sums_the_rest() {
    let rows = [
        bucket(0, "request", SH, "ok", 10.0),
        bucket(1, "request", SH, "timeout", 5.0),
        bucket(1, "request", SH, "4xx", 2.0),
        bucket(0, "dns_fallback", BJ, "HTTPDNS_TIMEOUT", 3.0),
        bucket(2, "host_switch", ("mobile", "guangzhou"), "5xx", 1.0),
        bucket(2, "request", ("mobile", "wuhan"), "ok", 1.0),
        // Outside the buckets asked for: in the totals only; a negative one nowhere.
        bucket(3, "request", ("mobile", "wuhan"), "ok", 1.0),
        bucket(-1, "request", SH, "ok", 100.0),
    ];
    let Chart { shown, others } = series(&rows, 3, 2);
    let names: Vec<&str> = shown.iter().map(|((_, r), _)| r.as_str()).collect();
    assert_eq!(names, ["shanghai", "beijing"]);
    let sh = &shown[0].1;
    assert_eq!(sh.totals, [17.0, 5.0, 0.0, 0.0]);
    assert_eq!(sh.buckets, vec![[10.0, 0.0, 0.0, 0.0], [7.0, 5.0, 0.0, 0.0], [0.0; 4]]);
    let (n, rest) = others.expect("two places beyond the top two");
    assert_eq!(n, 2);
    assert_eq!(rest.totals, [2.0, 0.0, 0.0, 1.0]);
    assert_eq!(rest.buckets[2], [1.0, 0.0, 0.0, 1.0]);
    assert!(series(&rows, 3, 4).others.is_none(), "no others when every place is shown");
}

#[test]
fn the_localdns_map_puts_the_least_consistent_first_and_skips_unknown_verdicts() {
    let rows = [
        row("localdns_compare", BJ, "consistent", 9.0, 9.0),
        row("localdns_compare", BJ, "hijacked", 1.0, 1.0),
        row("localdns_compare", SH, "consistent", 1.0, 1.0),
        row("localdns_compare", SH, "cross_carrier", 3.0, 3.0),
        row("localdns_compare", SH, "no_such_verdict", 50.0, 50.0),
    ];
    let map = localdns_places(&rows);
    assert_eq!(map[0].0 .1, "shanghai");
    assert_eq!(map[0].1.reports, 4.0);
    assert_eq!(map[0].1.count(Verdict::CrossCarrier), 3.0);
    assert_eq!(map[1].1.count(Verdict::Hijacked), 1.0);
    assert_eq!(map[1].1.count(Verdict::Stale), 0.0);
}

#[test]
fn rates_round_to_three_decimals_and_an_empty_whole_is_zero() {
    assert_eq!(rate(1.0, 3.0), 0.333);
    assert_eq!(rate(5.0, 0.0), 0.0);
    assert_eq!(round(2.0 / 3.0), 0.667);
}
