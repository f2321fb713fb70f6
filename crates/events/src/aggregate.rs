//! Per-minute counts of events in memory, between flushes. Pure: minutes passed in.
//!
//! Memory is bounded twice: the (carrier, region) pairs that become labels are capped (a pair
//! past the cap counts as `other`/`other`, so a flood of forged regions cannot grow the maps
//! or the Prometheus series), and minutes not yet flushed are capped (a store outage longer
//! than that drops the oldest minute, counted).

use std::collections::{BTreeMap, HashMap, HashSet};

use httpdns_store::events::{EventCounts, EventKey, EventRow};

/// The label of a carrier or region past the cap, or of keys folded for the same reason.
pub const OTHER: &str = "other";

#[derive(Debug, Default)]
struct Minute {
    counts: HashMap<EventKey, EventCounts>,
    /// Events added under each key, unweighted: each [`Aggregator::add`] is one event.
    reports: HashMap<EventKey, f64>,
    /// Changed since the last flush that took it.
    dirty: bool,
}

/// Counts by minute and key.
#[derive(Debug)]
pub struct Aggregator {
    minutes: BTreeMap<i64, Minute>,
    pairs: HashSet<(String, String)>,
    max_pairs: usize,
    max_minutes: usize,
    /// Minutes dropped unflushed because too many were waiting.
    pub dropped_minutes: u64,
}

impl Aggregator {
    pub fn new(max_pairs: usize, max_minutes: usize) -> Self {
        Self {
            minutes: BTreeMap::new(),
            pairs: HashSet::new(),
            max_pairs,
            max_minutes: max_minutes.max(2),
            dropped_minutes: 0,
        }
    }

    /// The (isp, region) labels to count under: themselves while the pair cap allows.
    pub fn labels(&mut self, isp: &str, region: &str) -> (String, String) {
        let pair = (isp.to_owned(), region.to_owned());
        if self.pairs.contains(&pair) {
            return pair;
        }
        if self.pairs.len() < self.max_pairs {
            self.pairs.insert(pair.clone());
            return pair;
        }
        (OTHER.to_owned(), OTHER.to_owned())
    }

    /// Adds `counts` under `key` in `minute`. The key's labels must come from [`Self::labels`].
    pub fn add(&mut self, minute: i64, key: EventKey, counts: &EventCounts) {
        let m = self.minutes.entry(minute).or_default();
        *m.reports.entry(key.clone()).or_default() += 1.0;
        m.counts.entry(key).or_default().add(counts);
        m.dirty = true;
        while self.minutes.len() > self.max_minutes {
            self.minutes.pop_first();
            self.dropped_minutes += 1;
        }
    }

    /// Every row of the minutes changed since they were last taken (whole minutes: a row
    /// replaces the replica's earlier value). They count as clean until [`Self::failed`].
    pub fn take_dirty(&mut self) -> Vec<EventRow> {
        self.take_dirty_reported().0
    }

    /// [`Self::take_dirty`], with each row's events as received (unweighted), in the same order.
    pub fn take_dirty_reported(&mut self) -> (Vec<EventRow>, Vec<f64>) {
        let (mut rows, mut reports) = (Vec::new(), Vec::new());
        for (minute, m) in self.minutes.iter_mut().filter(|(_, m)| m.dirty) {
            m.dirty = false;
            for (k, c) in &m.counts {
                rows.push(EventRow { minute: *minute, key: k.clone(), counts: *c });
                reports.push(m.reports.get(k).copied().unwrap_or(0.0));
            }
        }
        (rows, reports)
    }

    /// A flush of `rows` failed: their minutes are dirty again.
    pub fn failed(&mut self, rows: &[EventRow]) {
        for r in rows {
            if let Some(m) = self.minutes.get_mut(&r.minute) {
                m.dirty = true;
            }
        }
    }

    /// Forgets clean minutes before `minute` (they are in the store; no event lands there
    /// any more, since events count in the minute they arrive).
    pub fn forget_before(&mut self, minute: i64) {
        self.minutes.retain(|m, v| *m >= minute || v.dirty);
    }

    /// Minutes held in memory.
    pub fn len(&self) -> usize {
        self.minutes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.minutes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(isp: &str) -> EventKey {
        EventKey {
            event: "request".into(),
            isp: isp.into(),
            region: "shanghai".into(),
            reason: "ok".into(),
            host: String::new(),
            group: "on".into(),
            cohort: "unknown".into(),
        }
    }
    const ONE: EventCounts = EventCounts { count: 1.0, duration_ms_sum: 10.0, duration_count: 1.0 };

    #[test]
    fn flushes_whole_minutes_and_retries_failures() {
        let mut a = Aggregator::new(10, 60);
        a.add(100, key("unicom"), &ONE);
        a.add(100, key("unicom"), &ONE);
        a.add(101, key("telecom"), &ONE);
        let rows = a.take_dirty();
        assert_eq!(rows.len(), 2);
        assert!(a.take_dirty().is_empty(), "clean until changed");
        a.add(101, key("unicom"), &ONE);
        let rows = a.take_dirty();
        assert_eq!(rows.len(), 2, "minute 101 again, whole: {rows:?}");
        a.failed(&rows);
        assert_eq!(a.take_dirty().len(), 2, "a failed flush is taken again");
        a.add(100, key("unicom"), &ONE);
        let row = a.take_dirty().into_iter().find(|r| r.minute == 100).unwrap();
        assert_eq!(row.counts.count, 3.0);
        a.forget_before(101);
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn reports_count_events_unweighted() {
        let mut a = Aggregator::new(10, 60);
        let sampled = EventCounts { count: 100.0, duration_ms_sum: 1000.0, duration_count: 100.0 };
        a.add(100, key("unicom"), &sampled);
        a.add(100, key("unicom"), &sampled);
        a.add(100, key("telecom"), &ONE);
        let (rows, reports) = a.take_dirty_reported();
        let of = |isp: &str| {
            let i = rows.iter().position(|r| r.key.isp == isp).unwrap();
            (rows[i].counts.count, reports[i])
        };
        assert_eq!(of("unicom"), (200.0, 2.0), "two events weighing 100 each");
        assert_eq!(of("telecom"), (1.0, 1.0));
    }

    #[test]
    fn labels_and_minutes_are_capped() {
        let mut a = Aggregator::new(2, 3);
        assert_eq!(a.labels("unicom", "a"), ("unicom".into(), "a".into()));
        assert_eq!(a.labels("unicom", "b"), ("unicom".into(), "b".into()));
        assert_eq!(a.labels("forged", "c"), (OTHER.into(), OTHER.into()));
        assert_eq!(a.labels("unicom", "a"), ("unicom".into(), "a".into()), "known pairs stay");
        for m in 0..5 {
            a.add(m, key("unicom"), &ONE);
        }
        assert_eq!((a.len(), a.dropped_minutes), (3, 2));
    }
}
