//! Per-domain query counts of this replica, by minute: by front-end, and by the client's
//! carrier and region, for `GET /admin/v1/domains/{name}/stats` and the busiest-names series
//! of `/metrics`.
//!
//! Every front-end counts the address questions (A, AAAA, and `/d`, `/resolve`, `/v2/d`
//! names) of managed domains here, keyed by the domain resource that answered (a wildcard's
//! name for the names it covers). The counts live in memory for [`WINDOW_MINUTES`]; each
//! minute holds at most [`MAX_NAMES`] names (more fold into [`OTHER`]), each name at most
//! [`MAX_KEYS`] (front-end, carrier, region) triples, and the minute at most [`MAX_ENTRIES`]
//! triples in all (more fold into carrier and region `other`, one per name and front-end), so
//! neither memory nor the series' cardinality follows the client population or the number of
//! managed names: at most about 60 × ([`MAX_ENTRIES`] + [`MAX_NAMES`] × 7) counters, some
//! tens of megabytes, in the worst case.
//! The map is split into shards by name, each behind its own mutex held for one increment,
//! so front-ends on different threads rarely meet.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};

// The maps on the answer path hash with foldhash (SipHash would be most of a count's cost);
// their keys are managed names and bounded labels, not what a client chooses.
use foldhash::HashMap as FastMap;

use httpdns_core::{ClientView, Token};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};

/// Minutes of counts kept: the longest window a stats request may ask.
pub const WINDOW_MINUTES: u64 = 60;
/// Names counted per minute (across shards) before the rest fold into [`OTHER`].
pub const MAX_NAMES: usize = 4096;
/// (front-end, carrier, region) triples per name and minute before the rest fold.
pub const MAX_KEYS: usize = 256;
/// (front-end, carrier, region) triples per minute, over every name.
pub const MAX_ENTRIES: usize = 16_384;
/// The name that counts what the caps fold.
pub const OTHER: &str = "(other)";
/// How many of the busiest names `/metrics` exports.
pub const TOP_NAMES: usize = 20;

const SHARDS: usize = 16;
/// Distinct (carrier, region) pairs a shard keeps labels for before the rest fold.
const MAX_PLACES: usize = 4096;
/// The place of what the caps folded: carrier and region `other`.
const OTHER_PLACE: u64 = u64::MAX;

/// A front-end and a place: the place as a hash of its carrier and region, so that counting
/// a question neither clones the tokens (their reference counts are shared by every thread
/// answering) nor hashes them twice; each shard keeps the labels of its places once.
type Key = (&'static str, u64);

#[derive(Debug, Default)]
struct Minute {
    at: u64,
    names: FastMap<Box<str>, FastMap<Key, u64>>,
    /// Triples in `names`, over every name.
    entries: usize,
}

#[derive(Debug, Default)]
struct Shard {
    /// Oldest first; at most [`WINDOW_MINUTES`].
    minutes: VecDeque<Minute>,
    /// The carrier and region of each place hash counted in this shard.
    places: FastMap<u64, (Option<Token>, Option<Token>)>,
}

/// The per-domain counts (see the module docs).
#[derive(Debug)]
pub struct DomainTally {
    shards: Box<[Mutex<Shard>]>,
}

impl Default for DomainTally {
    fn default() -> Self {
        Self { shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect() }
    }
}

/// The counts of one domain over a window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainStats {
    pub total: u64,
    pub by_frontend: BTreeMap<&'static str, u64>,
    /// (carrier, region) → queries; unknown carriers and regions as `unknown`.
    pub by_place: BTreeMap<(String, String), u64>,
    /// Queries per minute (Unix minute), oldest first, minutes without queries left out.
    pub per_minute: Vec<(u64, u64)>,
}

impl DomainTally {
    /// Counts one question for `domain` (the resource's name) from `frontend`, at `minute`
    /// (Unix seconds / 60).
    pub fn record(&self, domain: &str, frontend: &'static str, view: &ClientView, minute: u64) {
        let place = place_of(view);
        let mut guard = self.shards[shard_of(domain)].lock();
        let Shard { minutes, places } = &mut *guard;
        let current = match minutes.back_mut() {
            Some(m) if m.at == minute => m,
            // A clock step backwards counts into the newest minute rather than reorder them.
            Some(m) if m.at > minute => m,
            _ => {
                while minutes.front().is_some_and(|m| m.at + WINDOW_MINUTES <= minute)
                    || minutes.len() >= WINDOW_MINUTES as usize
                {
                    minutes.pop_front();
                }
                minutes.push_back(Minute { at: minute, names: FastMap::default(), entries: 0 });
                minutes.back_mut().expect("just pushed")
            }
        };
        let full = current.entries >= MAX_ENTRIES / SHARDS;
        let names = &mut current.names;
        let keys = match names.get_mut(domain) {
            Some(k) => k,
            None => {
                let name = if names.len() >= MAX_NAMES / SHARDS { OTHER } else { domain };
                names.entry(name.into()).or_default()
            }
        };
        if let Some(n) = keys.get_mut(&(frontend, place)) {
            *n += 1;
            return;
        }
        let known = places.contains_key(&place) || {
            let room = places.len() < MAX_PLACES;
            if room {
                places.insert(place, (view.isp.clone(), view.region.clone()));
            }
            room
        };
        let place = if full || keys.len() >= MAX_KEYS || !known { OTHER_PLACE } else { place };
        let n = keys.entry((frontend, place)).or_insert_with(|| {
            current.entries += 1;
            0
        });
        *n += 1;
    }

    /// The counts of `domain` over the `minutes` up to and including `now` (a Unix minute).
    pub fn stats(&self, domain: &str, minutes: u64, now: u64) -> DomainStats {
        // A name lives in its shard; what the caps folded lives in every shard.
        let shards: Vec<usize> = if domain == OTHER { (0..SHARDS).collect() } else { vec![shard_of(domain)] };
        let mut out = DomainStats::default();
        let mut per_minute: BTreeMap<u64, u64> = BTreeMap::new();
        for i in shards {
            let shard = self.shards[i].lock();
            for m in shard.minutes.iter().filter(|m| m.at + minutes > now && m.at <= now) {
                let Some(keys) = m.names.get(domain) else { continue };
                for ((frontend, place), n) in keys {
                    *per_minute.entry(m.at).or_default() += n;
                    *out.by_frontend.entry(frontend).or_default() += n;
                    let label = |t: &Option<Token>| t.as_ref().map_or("unknown", Token::as_str).to_owned();
                    let pair = match shard.places.get(place) {
                        Some((isp, region)) if *place != OTHER_PLACE => (label(isp), label(region)),
                        _ => ("other".to_owned(), "other".to_owned()),
                    };
                    *out.by_place.entry(pair).or_default() += n;
                    out.total += n;
                }
            }
        }
        out.per_minute = per_minute.into_iter().collect();
        out
    }

    /// The `n` names with the most queries over the `minutes` up to `now`, most first (ties
    /// by name).
    pub fn busiest(&self, n: usize, minutes: u64, now: u64) -> Vec<(String, u64)> {
        let mut totals: HashMap<String, u64> = HashMap::new();
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for m in shard.minutes.iter().filter(|m| m.at + minutes > now && m.at <= now) {
                for (name, keys) in &m.names {
                    *totals.entry(name.to_string()).or_default() += keys.values().sum::<u64>();
                }
            }
        }
        let mut list: Vec<(String, u64)> = totals.into_iter().collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        list.truncate(n);
        list
    }
}

/// FNV-1a over bytes, continuing from `h`.
fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// The hash of a client's carrier and region (an absent one apart from any spelling: tokens
/// are never empty, and the separators differ). Never [`OTHER_PLACE`].
fn place_of(view: &ClientView) -> u64 {
    let part = |h: u64, t: &Option<Token>| match t {
        Some(t) => fnv(fnv(h, b"="), t.as_str().as_bytes()),
        None => fnv(h, b"-"),
    };
    part(part(FNV_START, &view.isp), &view.region).min(OTHER_PLACE - 1)
}

/// FNV-1a of the name, for its shard.
fn shard_of(name: &str) -> usize {
    (fnv(FNV_START, name.as_bytes()) % SHARDS as u64) as usize
}

/// `/metrics`: `domain_queries_recent{domain}`, the queries of the [`TOP_NAMES`] busiest
/// domains over the last 5 minutes, computed at each scrape (a gauge: which names are the
/// busiest changes, and a counter per name ever seen would grow without bound).
#[derive(Debug)]
pub struct BusiestDomains {
    pub tally: std::sync::Arc<DomainTally>,
    desc: Vec<Desc>,
}

/// Minutes the busiest-names gauge covers.
pub const BUSIEST_MINUTES: u64 = 5;
// The registry adds the `httpdns_` prefix.
const BUSIEST_NAME: &str = "domain_queries_recent";
const BUSIEST_HELP: &str =
    "Queries of the busiest managed domains over the last 5 minutes (top 20), by domain.";

impl BusiestDomains {
    pub fn new(tally: std::sync::Arc<DomainTally>) -> Self {
        let desc = gauge(&[]).desc().into_iter().cloned().collect();
        Self { tally, desc }
    }
}

fn gauge(values: &[(String, u64)]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(BUSIEST_NAME, BUSIEST_HELP), &["domain"]).expect("valid metric");
    for (name, n) in values {
        g.with_label_values(&[name.as_str()]).set(*n as f64);
    }
    g
}

impl Collector for BusiestDomains {
    fn desc(&self) -> Vec<&Desc> {
        self.desc.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = httpdns_core::clock::unix_s() / 60;
        gauge(&self.tally.busiest(TOP_NAMES, BUSIEST_MINUTES, now)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(isp: &str, region: &str) -> ClientView {
        ClientView { isp: Token::parse(isp).ok(), region: Token::parse(region).ok() }
    }

    #[test]
    fn counts_by_frontend_place_and_minute_within_the_window() {
        let t = DomainTally::default();
        t.record("a.example", "d", &view("telecom", "beijing"), 100);
        t.record("a.example", "udp", &view("telecom", "beijing"), 100);
        t.record("a.example", "udp", &ClientView::default(), 101);
        t.record("b.example", "udp", &ClientView::default(), 101);
        let s = t.stats("a.example", 60, 101);
        assert_eq!(s.total, 3);
        assert_eq!(s.by_frontend, BTreeMap::from([("d", 1), ("udp", 2)]));
        assert_eq!(s.by_place[&("telecom".into(), "beijing".into())], 2);
        assert_eq!(s.by_place[&("unknown".into(), "unknown".into())], 1);
        assert_eq!(s.per_minute, [(100, 2), (101, 1)]);
        assert_eq!(t.stats("a.example", 1, 101).total, 1, "a one-minute window");
        assert_eq!(t.stats("a.example", 60, 100 + WINDOW_MINUTES).total, 1, "minute 100 left the window");
        assert_eq!(t.busiest(1, 60, 101), [("a.example".to_owned(), 3)]);
    }

    #[test]
    fn names_and_keys_are_capped() {
        let t = DomainTally::default();
        for i in 0..(MAX_NAMES * 2) {
            t.record(&format!("n{i}.example"), "d", &ClientView::default(), 7);
        }
        let names: usize = t.shards.iter().map(|s| s.lock().minutes[0].names.len()).sum();
        assert!(names <= MAX_NAMES + SHARDS, "{names}");
        assert!(t.stats(OTHER, 60, 7).total >= MAX_NAMES as u64);
        for i in 0..(MAX_KEYS * 2) {
            t.record("k.example", "d", &view("telecom", &format!("r{i}")), 8);
        }
        let s = t.stats("k.example", 1, 8);
        assert_eq!(s.total, MAX_KEYS as u64 * 2);
        assert!(s.by_place.len() <= MAX_KEYS + 1);
        assert_eq!(s.by_place[&("other".into(), "other".into())], MAX_KEYS as u64);
        // 256 names from 300 places each (76,800 triples, past MAX_ENTRIES): the minute's
        // triples stay bounded, and nothing counted is lost.
        let (names, places) = (256, 300);
        for i in 0..names * places {
            let place = view("telecom", &format!("p{}", i / names));
            t.record(&format!("m{}.example", i % names), "d", &place, 9);
        }
        let entries: usize = t.shards.iter().map(|s| s.lock().minutes.back().unwrap().entries).sum();
        assert!(entries <= MAX_ENTRIES + names, "{entries}");
        assert!(entries >= MAX_ENTRIES, "the cap was reached: {entries}");
        let total: u64 = (0..names).map(|i| t.stats(&format!("m{i}.example"), 1, 9).total).sum();
        assert_eq!(total, (names * places) as u64, "folded, not lost");
    }
}
